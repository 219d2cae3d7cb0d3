"""The OpenVINO backend (engine ``openvino``, the ``openvino`` extra): every role on OpenVINO's CPU runtime, from the
project's own ONNX graphs converted to OpenVINO's IR (the runtime's ONNX frontend): sequence classifiers (and Flan-T5
as an NLI model), masked LMs, and Flan-T5 as the generator on the project's T5 step graphs.

Precisions on the CPU: fp32 (the inference hint ``f32``), bf16 (hint ``bf16``, where the CPU computes it: AVX-512
BF16 or AMX; refused in one line elsewhere, before anything loads: OpenVINO would emulate it slower than fp32) and
int8 (int8 weights per output channel; a sequence classifier's activations in ranges calibrated at export except
after GELU / tanh, every other activation quantised per token and group at run time: a row's answer does not depend
on its batch, checked on the CPU at hand when the export is judged)."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

_CPU = {"cpu": ("fp32", "bf16", "int8")}

BACKEND = Backend(
    name="openvino",
    loaders="breaknli_fast.backends.openvino.engine",
    options="breaknli_fast.backends.openvino.engine:OvOptions",
    precisions={CLASSIFIER: _CPU, GENERATOR: _CPU, MASK_FILLER: _CPU},
    requires=("openvino", "onnxruntime", "onnx"),
    install="pip install 'breaknli-fast[openvino]'",
    exporter="breaknli_fast.backends.openvino.exporter:OpenVinoExporter",
    formats=("openvino",),
    gate="breaknli_fast.backends.openvino.exporter:precision_gate",
    # --engine auto at int8: the classifier and the masked LM here (batch-invariant, the classifier at least as fast
    # as ONNX Runtime's batch-dependent per-tensor int8, BENCHMARKS.md); the generator's int8 step graphs stay on
    # ort (faster there)
    auto=("int8",),
    auto_roles=(CLASSIFIER, MASK_FILLER),
    # ... on a CPU with VNNI only: without it the CPU plugin's int8 kernels gave a pair other logits alone than in its
    # batch (docs/export.md), so the export would be refused there, and auto keeps the batch-invariant ort int8
    auto_gate="breaknli_fast.backends.openvino.exporter:auto_gate",
)
