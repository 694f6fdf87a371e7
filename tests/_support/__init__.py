"""Helpers the tests import by name (on the test path through pyproject's `pythonpath`).

Fixtures live in `tests/conftest.py`; no test imports a conftest.
"""
