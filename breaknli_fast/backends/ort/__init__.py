"""The ONNX Runtime backend (engine ``ort``): the project's own exports (classifiers, masked LMs and Flan-T5's
graphs, ``torch.onnx.export`` on transformers 4.57 and 5.x) at fp32, fp16 and int8, run on ONNX Runtime's CPU
provider, or its CUDA / TensorRT providers with onnxruntime-gpu."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

_ALL = {"cpu": ("fp32", "fp16", "int8"), "cuda": ("fp32", "fp16", "int8")}

BACKEND = Backend(
    name="ort",
    loaders="breaknli_fast.backends.ort.engine",
    options="breaknli_fast.backends.ort.engine:OrtOptions",
    precisions={CLASSIFIER: _ALL, GENERATOR: _ALL, MASK_FILLER: _ALL},
    requires=("onnxruntime", "onnx"),
    install="pip install 'breaknli-fast[onnx]'",
    exporter="breaknli_fast.backends.ort.exporter:OrtExporter",
    formats=("onnx",),
    auto=("fp32", "int8"),
    unverified=("cuda",),  # the CUDA / TensorRT providers need onnxruntime-gpu, which the lent GPUs cannot install
)
