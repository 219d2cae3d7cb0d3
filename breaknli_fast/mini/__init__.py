"""Mini models shipped with breaknli-fast: small RoBERTa / T5 models trained from scratch on SNLI.

``mini-mlm`` (RoBERTa masked LM), ``mini-nli`` (RoBERTa NLI classifier, fine-tuned from mini-mlm) and
``mini-t5`` (T5 v1.1 / Flan-T5 architecture, instruction-tuned with the BreakNLI prompts) live in
``breaknli_fast/assets/models/<name>/``; the embedded SNLI sample in ``breaknli_fast/assets/data/``.
Training code: :mod:`breaknli_fast.mini.train` (``breaknli-fast mini train --help``); its recipe is
``breaknli_fast/mini/recipe.json``.

This package is training code: the runtime (engines, export, pipeline, data, bench) never imports it. The asset
paths below come from the runtime modules that own them (:func:`breaknli_fast.engines.model_info.assets_models_dir`,
:func:`breaknli_fast.data.loaders.sample_path`).
"""

from __future__ import annotations

from pathlib import Path

from breaknli_fast.data.loaders import sample_path
from breaknli_fast.engines.model_info import assets_models_dir

MODELS_DIR = assets_models_dir()
DATA_DIR = sample_path().parent
MINI_MODEL_NAMES = ("mini-mlm", "mini-nli", "mini-t5")  # in training order


def model_path(name: str) -> Path:
    """Folder of a shipped mini model (``mini-mlm``, ``mini-nli``, ``mini-t5``)."""
    if name not in MINI_MODEL_NAMES:
        raise KeyError(f"unknown mini model {name!r}; expected one of {', '.join(MINI_MODEL_NAMES)}")
    return MODELS_DIR / name


__all__ = ["MODELS_DIR", "DATA_DIR", "MINI_MODEL_NAMES", "model_path", "sample_path"]
