"""Plain helpers (models, data, constants) that test modules of several folders share; pytest fixtures
live in the folders' `conftest.py`."""
