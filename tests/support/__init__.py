"""Helpers shared by the test modules: fixtures that start real services, data builders,
comparisons. Test modules import them as ``support.<module>`` (``tests/`` is on the
path through ``pythonpath`` in pyproject.toml)."""
