"""The CTranslate2 backend (engine ``ct2``): the generator on CTranslate2's T5 (converted on first use). It runs no
classifier or masked LM: named for every role (``--engine ct2``), its declaration hands those to ``auto``'s choice
(``delegates``); ``--classifier-engine`` picks another."""

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER

BACKEND = Backend(
    name="ct2",
    loaders="breaknli_fast.backends.ct2.engine",
    options="breaknli_fast.backends.ct2.engine:Ct2Options",
    # the generator's compute types on this machine are checked again at load (CTranslate2 knows the hardware)
    precisions={GENERATOR: {"cpu": ("fp32", "int8"), "cuda": ("fp32", "fp16", "bf16", "int8")}},
    delegates={CLASSIFIER: "auto", MASK_FILLER: "auto"},
    # CTranslate2 runs its only role, the generator (the roles it hands on never reach it); config.json and bench.json
    # record its version with each run
    requires=("ctranslate2",),
    install="pip install 'breaknli-fast[ct2]' (ctranslate2)",
    exporter="breaknli_fast.backends.ct2.exporter:Ct2Exporter",
    formats=("ct2",),
)
