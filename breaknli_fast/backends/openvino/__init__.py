"""The OpenVINO backend (engine ``openvino``, the ``openvino`` extra): sequence classifiers on OpenVINO's CPU
runtime, from the project's own ONNX export converted to OpenVINO's IR (the runtime's ONNX frontend), compiled at
fp32 or bf16 (the inference-precision hint ``f32`` / ``bf16``). bf16 runs where the CPU computes it (AVX-512 BF16 or
AMX; refused in one line elsewhere, before anything loads: OpenVINO would emulate it slower than fp32). No generator
and no masked LM: docs/stack.md says why."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

BACKEND = Backend(
    name="openvino",
    loaders="breaknli_fast.backends.openvino.engine",
    options="breaknli_fast.backends.openvino.engine:OvOptions",
    precisions={CLASSIFIER: {"cpu": ("fp32", "bf16")}},
    missing_roles={GENERATOR: "the openvino engine has no generator role (the generator's step graphs stay on ort)",
                   MASK_FILLER: "the openvino engine has no mask-filler role"},
    requires=("openvino", "onnxruntime", "onnx"),
    install="pip install 'breaknli-fast[openvino]'",
    exporter="breaknli_fast.backends.openvino.exporter:OpenVinoExporter",
    formats=("openvino",),
    gate="breaknli_fast.backends.openvino.exporter:precision_gate",
)
