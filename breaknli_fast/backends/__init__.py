"""The backends, one package each: its loaders (the engines of the contract in :mod:`breaknli_fast.engines.base`),
its runtime, its exporter and, in its ``__init__``, one declaration of what it supports
(:class:`~breaknli_fast.engines.backend.Backend`), which the registry (:mod:`breaknli_fast.engines.registry`)
reads. ``pytorch`` is the fp32 reference (engine name ``torch``); ``ort`` ONNX Runtime; ``tensorrt`` TensorRT;
``ct2`` CTranslate2. A backend imports the shared engine code and the format-independent export code
(:mod:`breaknli_fast.export`: cache, lock, manifest, judging against the reference), never another layer above."""
