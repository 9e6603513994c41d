"""Importing this file never finishes."""

while True:
    pass
