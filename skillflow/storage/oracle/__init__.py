"""storage/oracle"""
