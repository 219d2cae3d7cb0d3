"""The cudagraph backend (engine ``cudagraph``): torch on one GPU at the hardware's speed. The generator is a T5 decode
loop of its own (fused weights, a preallocated self-attention cache, cross-attention keys and values shared by a
prompt's K samples, the sampler's draw on the device) and the classifier a BERT / RoBERTa forward pass of its own,
each captured as one CUDA graph per bucket and replayed (docs/export.md, "The cudagraph engine"). fp32 keeps the
torch reference's answers (TF32 off, as the torch engine); bf16 (and fp16 for the classifier) keeps norms, softmax,
logits and sampling in fp32; fp8 / int8 quantise the products (weights per output channel, activations per row:
quant.py; the classifier's GPU kernels ran on a lent H200, the generator's are not verified on a GPU). On the CPU the same steps run eagerly: the tests and dry
runs."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

BACKEND = Backend(
    name="cudagraph",
    loaders="breaknli_fast.backends.cudagraph.engine",
    options="breaknli_fast.backends.cudagraph.engine:GraphOptions",
    # no fp16 generator: T5 overflows in fp16; the CPU runs the same steps without graphs (tests, dry runs); fp8 /
    # int8: quantised products (quant.py), exact emulation on the CPU
    precisions={GENERATOR: {"cuda": ("fp32", "bf16", "fp8", "int8"), "cpu": ("fp32", "bf16", "fp8", "int8")},
                CLASSIFIER: {"cuda": ("fp32", "bf16", "fp16", "fp8", "int8"), "cpu": ("fp32", "bf16", "fp8", "int8")}},
    # fp8 needs compute capability 8.9 (Ada / Hopper), int8 8.0: refused in one line before anything loads
    gate="breaknli_fast.backends.cudagraph.quant:precision_gate",
    # the classifier's torch._scaled_mm / torch._int_mm ran on a lent H200 (gpu-check-h200-cudagraph-steps.json);
    # the generator's quantised products have not run on a GPU
    unverified=("cuda:fp8:generator", "cuda:int8:generator"),
    missing_roles={MASK_FILLER: "the cudagraph engine has no mask-filler role (MERGE's masked LMs): use --engine torch"},
    requires=("torch", "transformers"),
    install="pip install breaknli-fast",
)
