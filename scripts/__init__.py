"""Set-up and operator scripts; the Python ones are importable for their tests."""
