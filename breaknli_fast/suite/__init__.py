"""The benchmark suite: every measurement behind BENCHMARKS.md as a typed, registered part of the package.

- :mod:`~breaknli_fast.suite.base`: the measurement contract (a config declared with the options machinery, a typed
  payload, ``run(config, recorder)``, the sections of BENCHMARKS.md it renders, what it requires);
- :mod:`~breaknli_fast.suite.registry`: the measurements, joined by entry point (group
  ``breaknli_fast.measurements``); :mod:`~breaknli_fast.suite.measurements`: the built-in ones;
- :mod:`~breaknli_fast.suite.result`: result files, typed (:func:`~breaknli_fast.suite.result.read_result`);
  :mod:`~breaknli_fast.suite.provenance`: the recorder around a measurement;
- :mod:`~breaknli_fast.suite.spec`: ``benchmarks/suite.toml`` (entries that name a measurement and its arguments);
  :mod:`~breaknli_fast.suite.runner`: running them; :mod:`~breaknli_fast.suite.document`: BENCHMARKS.md;
- :mod:`~breaknli_fast.suite.main`: ``breaknli-fast suite run | list | render | measure``.

docs/benchmarks.md describes the suite and shows a measurement written from scratch.
"""
