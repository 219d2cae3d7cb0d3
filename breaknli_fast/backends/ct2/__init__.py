"""The CTranslate2 backend (engine ``ct2``): the generator on CTranslate2's T5 (converted on first use); the
classifier role runs on another engine (``classifier_engine``, default ``auto``)."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

_DELEGATED = {"cpu": ("fp32", "fp16", "bf16", "int8"), "cuda": ("fp32", "fp16", "bf16", "int8")}

BACKEND = Backend(
    name="ct2",
    loaders="breaknli_fast.backends.ct2.engine",
    options="breaknli_fast.backends.ct2.engine:Ct2Options",
    # the generator's compute types on this machine are checked again at load (CTranslate2 knows the hardware);
    # the classifier and masked LMs are delegated to another engine, which checks their precision
    precisions={GENERATOR: {"cpu": ("fp32", "int8"), "cuda": ("fp32", "fp16", "bf16", "int8")},
                CLASSIFIER: _DELEGATED, MASK_FILLER: _DELEGATED},
    # CTranslate2 is needed by the generator only (its loader says so in one line); the delegated roles run without it
    install="pip install 'breaknli-fast[ct2]' (ctranslate2)",
    exporter="breaknli_fast.backends.ct2.exporter",
    formats=("ct2",),
)
