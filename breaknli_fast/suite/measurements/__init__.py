"""The built-in measurements, one module each (registered in :mod:`breaknli_fast.suite.registry` and declared as
entry points of group ``breaknli_fast.measurements`` in pyproject.toml, as any other package's would be)."""
