"""The native TensorRT backend (engine ``tensorrt``): sequence classifiers as serialized TensorRT engines, built
from the ort backend's fp32 ONNX graph on first use (needs TensorRT 10 and a CUDA GPU)."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR

BACKEND = Backend(
    name="tensorrt",
    loaders="breaknli_fast.backends.tensorrt.engine",
    options="breaknli_fast.backends.tensorrt.engine:TensorRTOptions",
    precisions={CLASSIFIER: {"cuda": ("fp32", "fp16", "int8")}},
    requires=("tensorrt",),
    install="pip install 'breaknli-fast[tensorrt]' on a machine with a CUDA GPU (TensorRT 10)",
    exporter="breaknli_fast.backends.tensorrt.exporter:TensorRTExporter",
    formats=("tensorrt",),
    unverified=("cuda",),  # TensorRT cannot be installed on the project's GPU machines
    missing_roles={GENERATOR: "the tensorrt engine does not support generators yet: use --engine ort --device cuda "
                              "for Flan-T5 (ONNX Runtime, optionally with its TensorRT execution provider)"},
)
