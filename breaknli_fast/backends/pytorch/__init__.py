"""The PyTorch backend (engine ``torch``): the fp32 reference every other engine is judged against."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

_ALL = {"cpu": ("fp32", "fp16", "bf16"), "cuda": ("fp32", "fp16", "bf16")}

BACKEND = Backend(
    name="torch",
    loaders="breaknli_fast.backends.pytorch.engine",
    options="breaknli_fast.backends.pytorch.engine:TorchOptions",
    precisions={CLASSIFIER: _ALL, GENERATOR: _ALL, MASK_FILLER: _ALL},
    requires=("torch", "transformers"),
    install="pip install breaknli-fast",
)
