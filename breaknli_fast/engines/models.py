"""Resolving model names: shipped mini models, local folders, Hugging Face hub ids."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from breaknli_fast.errors import UserError

MINI_MODELS = ("mini-nli", "mini-t5", "mini-mlm")


class ModelLoadError(UserError):
    """A model that cannot be found or loaded (one-line message for the CLI)."""


def assets_models_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "models"


def resolve_model(name: str) -> str:
    """Shipped mini-model names map to their package folder; anything else is returned as is
    (a local folder, or a hub id that ``from_pretrained`` will fetch)."""
    if name in MINI_MODELS:
        path = assets_models_dir() / name
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"the shipped model {name!r} is missing from {path}; reinstall breaknli-fast or train it with "
                "`breaknli-fast mini train`"
            )
        return str(path)
    p = Path(name).expanduser()
    if p.exists():
        if not (p / "config.json").exists():
            raise ModelLoadError(f"{p} is not a Hugging Face model folder (no config.json)")
        return str(p)
    if name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1]:
        raise ModelLoadError(f"model path {name!r} does not exist")
    return name


def load_config(name: str) -> Any:
    from transformers import AutoConfig

    path = resolve_model(name)
    try:
        return AutoConfig.from_pretrained(path)
    except OSError as e:  # not found locally, hub unreachable, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load model {name!r}: {first}") from None


def model_kind(config: Any) -> str:
    """'seq-cls' for sequence classifiers, 'seq2seq' for text-to-text models (Flan-T5)."""
    archs = list(getattr(config, "architectures", None) or [])
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "seq-cls"
    if getattr(config, "is_encoder_decoder", False) and (
        any(a.endswith("ForConditionalGeneration") for a in archs) or config.model_type in ("t5", "mt5", "umt5")
    ):
        return "seq2seq"
    if getattr(config, "num_labels", 0) == 3 and not getattr(config, "is_encoder_decoder", False):
        return "seq-cls"
    raise ModelLoadError(
        f"unsupported model type {config.model_type!r} (architectures {archs}): expected a sequence classifier "
        "or a text-to-text (T5-style) model"
    )


def model_fingerprint(name: str) -> dict[str, Any]:
    """Identity of a model for config.json / manifests: the id, and file hashes for local folders."""
    path = resolve_model(name)
    out: dict[str, Any] = {"id": name}
    p = Path(path)
    if p.exists():
        files = {}
        for f in sorted(p.iterdir()):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".model", ".txt"):
                files[f.name] = file_sha256(f)
        out["path"] = str(p)
        out["files_sha256"] = files
    else:
        out["revision"] = "hub:main"
    return out


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
