"""Hugging Face model helpers shared by every backend and by the exporters: model names (shipped mini models,
local folders, hub ids), configs and tokenizers, the order of a model's labels and answer words, input-length
limits and fingerprints. Nothing here imports torch (transformers is imported on use), so the command line and
the exporters import it at no cost."""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

from breaknli_fast.data.hub import require_hub
from breaknli_fast.data.labels import LABELS, map_id2label
from breaknli_fast.envinfo import package_relative
from breaknli_fast.errors import UserError
from breaknli_fast.prompts import NLI_ANSWERS

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
        check_model_files(p)
        for weights in sorted(p.glob("*.safetensors")):
            check_safetensors(weights)
        return str(p)
    if name.startswith((".", "/", "~")) or os.sep in name.strip("/").split("/", 1)[-1]:
        raise ModelLoadError(f"model path {name!r} does not exist")
    near = difflib.get_close_matches(name.lower(), MINI_MODELS, n=1, cutoff=0.75)
    if near and "/" not in name:  # "mini-nil": a typo of a shipped model, not a hub id
        raise ModelLoadError(f"unknown model {name!r}: did you mean {near[0]}? (shipped: {', '.join(MINI_MODELS)}; "
                             "or a local folder, or a hub id such as roberta-large-mnli)")
    require_hub(f"the model {name!r}")  # no network: one line now, not half a minute of retries later
    return name


# a local model folder needs one of each: its weights (a sharded checkpoint by its index) and its tokenizer
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "*.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model", "spm.model")


def check_model_files(folder: Path) -> None:
    """Raise a one-line :class:`ModelLoadError` when a model folder with a config lacks its weights or its
    tokenizer files (a copy left half-done), before a loader fails with a traceback."""
    if not any(next(folder.glob(g), None) for g in WEIGHT_FILES):
        raise ModelLoadError(f"{folder} has a config.json but no weights (model.safetensors or pytorch_model.bin); "
                             "copy or download the whole model folder")
    if not any((folder / f).exists() for f in TOKENIZER_FILES):
        raise ModelLoadError(f"{folder} has no tokenizer files (tokenizer.json, vocab.json, vocab.txt or a "
                             "sentencepiece .model); copy or download the whole model folder")


def check_safetensors(path: Path) -> None:
    """Raise a one-line :class:`ModelLoadError` unless ``path`` is a whole safetensors file: its 8-byte header
    length, its JSON header and every tensor's byte range inside the file (a download or copy cut short fails
    here in microseconds, before a loader reports ``incomplete metadata`` with a traceback)."""
    import json
    import struct

    size = path.stat().st_size
    problem = None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if n is None or 8 + n > size:
                problem = f"its header needs {8 + (n or 0)} bytes, the file has {size}"
            else:
                header = json.loads(fh.read(n))
                end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
                if 8 + n + end > size:
                    problem = f"its tensors need {8 + n + end} bytes, the file has {size}"
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        problem = f"its header cannot be read ({type(e).__name__})"
    if problem:
        raise ModelLoadError(f"{path} is truncated or corrupt: {problem}; copy or download it again")


def load_config(name: str) -> Any:
    from transformers import AutoConfig

    path = resolve_model(name)
    try:
        return AutoConfig.from_pretrained(path)
    except OSError as e:  # not found locally, hub unreachable, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load model {name!r}: {first}") from None


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a model folder or hub id, or a one-line :class:`ModelLoadError`."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load the tokenizer of {path!r}: {first}") from None


def label_permutation(config: Any, label_map: Mapping[str, str] | None = None) -> list[int]:
    """Model output index for each canonical label column (LABELS order), via ``id2label``."""
    model_labels = map_id2label(config.id2label, label_map)
    return [model_labels.index(lab) for lab in LABELS]


def answer_token_ids(tokenizer: Any) -> list[int]:
    """First token id of each answer word, in LABELS order (entailment=yes, neutral=it..., contradiction=no)."""
    ids = []
    for lab in LABELS:
        toks = tokenizer(NLI_ANSWERS[lab], add_special_tokens=False)["input_ids"]
        # skip a bare word-boundary piece ("▁") that some SentencePiece models emit first
        toks = [t for t in toks if tokenizer.decode([t]).strip()]
        if not toks:
            raise ModelLoadError(f"the tokenizer gives no token for the answer {NLI_ANSWERS[lab]!r}")
        ids.append(int(toks[0]))
    if len(set(ids)) != 3:
        raise ModelLoadError("the answer words yes / it / no share a first token under this tokenizer")
    return ids


def parse_nli_answer(text: str) -> str:
    """Flan-T5 answer text to a label: yes -> entailment, no -> contradiction, anything else -> neutral."""
    t = text.strip().lower()
    if t.startswith("yes"):
        return "entailment"
    if t.startswith("no") and (len(t) == 2 or not t[2].isalpha()):
        return "contradiction"
    return "neutral"


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


def is_masked_lm(config: Any) -> bool:
    """Whether a config describes a masked language model (``…ForMaskedLM``): the mask-filler role's models.
    :func:`model_kind` names the classifier and generator kinds only and refuses these."""
    return any(a.endswith("ForMaskedLM") for a in (getattr(config, "architectures", None) or []))


def require_masked_lm(name: str) -> Any:
    """The config of ``name`` when it is a masked LM, else a one-line :class:`ModelLoadError`."""
    config = load_config(name)
    if not is_masked_lm(config):
        archs = list(getattr(config, "architectures", None) or [])
        raise ModelLoadError(f"{name!r} is not a masked language model (architectures {archs}); the mlm role needs "
                             "one such as mini-mlm, bert-base-cased or roberta-base")
    return config


def check_model(name: str, role: str, label_map: Mapping[str, str] | None = None) -> None:
    """What can be checked of a model for a role from its files and config alone, without loading its weights
    (a one-line :class:`ModelLoadError` or :class:`~breaknli_fast.data.labels.LabelMappingError`): the folder's
    files, the kind of model the role takes (``generator``: text-to-text; ``mlm``: a masked LM; ``classifier``:
    a sequence classifier or a text-to-text NLI model) and a sequence classifier's three labels."""
    if role == "mlm":
        require_masked_lm(name)
        return
    config = load_config(name)
    kind = model_kind(config)
    if role == "generator" and kind != "seq2seq":
        raise ModelLoadError(f"{name!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    if role == "classifier" and kind == "seq-cls":
        label_permutation(config, label_map)


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
        out["path"] = package_relative(p)  # a shipped model: inside the package, wherever that lies
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


# tokenizer.model_max_length at or above this is transformers' placeholder for "not recorded" (int(1e30))
_TOKENIZER_LIMIT_UNSET = 1_000_000
# the input cap of a model that records no limit of its own: no position table (T5's relative positions)
# and no tokenizer model_max_length
DEFAULT_INPUT_LIMIT = 512
# families whose position ids start after the padding index (RoBERTa's create_position_ids_from_input_ids):
# their position table holds max_position_embeddings - padding_idx - 1 tokens
PADDING_OFFSET_FAMILIES = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "data2vec-text", "xmod",
    "longformer", "mpnet", "ibert", "luke", "lilt",
})


def position_limit(config: Any) -> tuple[int | None, str]:
    """Tokens the model's position table holds, from its config, and how that was derived; ``None`` for
    models without one (T5's relative positions). RoBERTa-style families: ``max_position_embeddings -
    padding_idx - 1``; BART (whose table adds its offset of 2 itself), DeBERTa, BERT and the rest:
    ``max_position_embeddings``; GPT-2-style configs: ``n_positions``."""
    family = getattr(config, "model_type", "?")
    mpe = getattr(config, "max_position_embeddings", None)
    if isinstance(mpe, int) and mpe > 0:
        if family in PADDING_OFFSET_FAMILIES:
            pad = getattr(config, "pad_token_id", None)
            pad = 1 if pad is None else int(pad)
            return mpe - pad - 1, f"{family} max_position_embeddings {mpe} - padding_idx {pad} - 1"
        return mpe, f"{family} max_position_embeddings {mpe}"
    n_pos = getattr(config, "n_positions", None)
    if isinstance(n_pos, int) and n_pos > 0:
        return n_pos, f"{family} n_positions {n_pos}"
    return None, f"{family}: no position table"


def tokenizer_limit(tokenizer: Any) -> int | None:
    """The tokenizer's ``model_max_length`` when it records one (not transformers' 1e30 placeholder)."""
    n = getattr(tokenizer, "model_max_length", None)
    if isinstance(n, int) and 0 < n < _TOKENIZER_LIMIT_UNSET:
        return n
    return None


def input_limit(config: Any, tokenizer: Any = None) -> tuple[int, str]:
    """The most tokens one model input may have, and where that figure comes from: the smaller of the
    position table (:func:`position_limit`) and the tokenizer's ``model_max_length``; for a model with
    neither (T5 with a tokenizer that records no length), :data:`DEFAULT_INPUT_LIMIT`."""
    pos, pos_src = position_limit(config)
    tok = tokenizer_limit(tokenizer) if tokenizer is not None else None
    cands = [(n, s) for n, s in ((pos, pos_src), (tok, f"tokenizer model_max_length {tok}")) if n is not None]
    if not cands:
        return DEFAULT_INPUT_LIMIT, f"{pos_src}, tokenizer records no model_max_length: default {DEFAULT_INPUT_LIMIT}"
    return min(cands, key=lambda c: c[0])


def effective_max_length(requested: int | None, config: Any, tokenizer: Any = None,
                         key: str = "max_length") -> tuple[int, dict[str, Any]]:
    """``min(requested, input_limit)``: the length every engine truncates a model's inputs to, and the
    record of it for ``EngineInfo.details``: ``key`` (the length used), ``<key>_requested``,
    ``model_max_length`` and ``model_max_length_from``."""
    limit, source = input_limit(config, tokenizer)
    used = limit if requested is None else min(int(requested), limit)
    if used < 1:
        raise ModelLoadError(f"the maximum input length must be at least 1 token, not {requested}")
    return used, {key: used, f"{key}_requested": requested, "model_max_length": limit,
                  "model_max_length_from": source}
