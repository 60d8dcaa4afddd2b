"""injection"""
