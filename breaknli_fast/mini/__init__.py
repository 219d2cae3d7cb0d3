"""Mini models shipped with breaknli-fast: small RoBERTa / T5 models trained from scratch on SNLI.

``mini-mlm`` (RoBERTa masked LM), ``mini-nli`` (RoBERTa NLI classifier, fine-tuned from mini-mlm) and
``mini-t5`` (T5 v1.1 / Flan-T5 architecture, instruction-tuned with the BreakNLI prompts) live in
``breaknli_fast/assets/models/<name>/``; the embedded SNLI sample in ``breaknli_fast/assets/data/``.
Training code: :mod:`breaknli_fast.mini.train` (``python -m breaknli_fast.mini.train --help``).
"""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
MODELS_DIR = ASSETS_DIR / "models"
DATA_DIR = ASSETS_DIR / "data"
MINI_MODEL_NAMES = ("mini-mlm", "mini-nli", "mini-t5")


def model_path(name: str) -> Path:
    """Folder of a shipped mini model (``mini-mlm``, ``mini-nli``, ``mini-t5``)."""
    if name not in MINI_MODEL_NAMES:
        raise KeyError(f"unknown mini model {name!r}; expected one of {', '.join(MINI_MODEL_NAMES)}")
    return MODELS_DIR / name


def sample_path() -> Path:
    """The embedded SNLI sample (held-out dev pairs, JSONL)."""
    return DATA_DIR / "snli_sample.jsonl"


__all__ = ["ASSETS_DIR", "MODELS_DIR", "DATA_DIR", "MINI_MODEL_NAMES", "model_path", "sample_path"]
