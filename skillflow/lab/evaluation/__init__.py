"""The three-arm evaluation harness: do learned skills help?"""
