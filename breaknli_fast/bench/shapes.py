"""Random-weight models of the real checkpoints' architectures (no downloads).

The configurations below are written from the public architecture numbers of each checkpoint
(hidden size, layers, heads, feed-forward size, vocabulary, position embeddings), so a bench can
measure the speed and memory of the real sizes where the checkpoints cannot be downloaded.

The weights are random, so **parity figures of such a bench mean nothing** (random logits sit
close together and any numeric change flips labels); only speed and memory do.

Tokenizers: the real vocabularies are not available offline, so the shipped mini models' tokenizers
are reused (``mini-t5``'s SentencePiece for T5 shapes, ``mini-nli``'s byte-level BPE for the
encoders; both trained on SNLI, with the real checkpoints' special-token layout). Their ids stay
below the model's vocabulary size, which keeps the real embedding and output sizes; SNLI sentences
come out at lengths close to, not equal to, the real tokenizers'. Without the shipped models a
small tokenizer is trained on the bench's own texts instead (sequences then run about twice as
long). For T5 generators the output rows of ids outside the tokenizer are zeroed, so generated ids
decode to text; every output row is still computed (same cost as the real model).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from breaknli_fast.bench.specs import BenchSpecError
from breaknli_fast.engines import random_weights as rw
from breaknli_fast.engines.model_info import assets_models_dir
from breaknli_fast.engines.random_weights import ID2LABEL

# 2: T5s with their own output layer on transformers 5.x too (5.x tied it; such folders are rebuilt)
SHAPES_VERSION = 2


def _t5(d_model: int, d_ff: int, heads: int, layers: int) -> dict[str, Any]:
    # Flan-T5 = T5 v1.1: gated-GELU feed-forward, untied output layer, d_kv 64, vocab 32128.
    return {"family": "t5", "d_model": d_model, "d_ff": d_ff, "d_kv": 64, "num_heads": heads, "num_layers": layers,
            "num_decoder_layers": layers, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
            "tie_word_embeddings": False, "relative_attention_num_buckets": 32,
            "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6}


def _roberta(hidden: int, layers: int, heads: int, ff: int) -> dict[str, Any]:
    return {"family": "roberta", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": ff, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
            "layer_norm_eps": 1e-5}


def _bart(encoder_layers: int, decoder_layers: int) -> dict[str, Any]:
    return {"family": "bart", "d_model": 1024, "encoder_layers": encoder_layers, "decoder_layers": decoder_layers,
            "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
            "decoder_ffn_dim": 4096, "vocab_size": 50265, "max_position_embeddings": 1024}


def _deberta(hidden: int, layers: int, heads: int, ff: int) -> dict[str, Any]:
    return {"family": "deberta", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": ff, "vocab_size": 50265, "max_position_embeddings": 512, "type_vocab_size": 0,
            "relative_attention": True, "max_relative_positions": -1, "pos_att_type": ["c2p", "p2c"],
            "position_biased_input": False, "pooler_hidden_size": hidden, "layer_norm_eps": 1e-7}


SHAPES: dict[str, dict[str, Any]] = {
    # generators (and seq2seq NLI models)
    "flan-t5-small": _t5(512, 1024, 6, 8),
    "flan-t5-base": _t5(768, 2048, 12, 12),
    "flan-t5-large": _t5(1024, 2816, 16, 24),
    "flan-t5-xl": _t5(2048, 5120, 32, 24),
    # sequence classifiers (the study's MNLI checkpoints)
    "roberta-base": _roberta(768, 12, 12, 3072),
    "roberta-large": _roberta(1024, 24, 16, 4096),
    "bart-large-mnli": _bart(12, 12),
    "distilbart-mnli-12-1": _bart(12, 1),
    "deberta-base": _deberta(768, 12, 12, 3072),
    "deberta-large": _deberta(1024, 24, 16, 4096),
    "deberta-xlarge": _deberta(1024, 48, 16, 4096),
    "deberta-v2-xlarge": {"family": "deberta-v2", "hidden_size": 1536, "num_hidden_layers": 24,
                          "num_attention_heads": 24, "intermediate_size": 6144, "vocab_size": 128100,
                          "max_position_embeddings": 512, "type_vocab_size": 0, "relative_attention": True,
                          "max_relative_positions": -1, "position_buckets": 256, "norm_rel_ebd": "layer_norm",
                          "share_att_key": True, "pos_att_type": ["p2c", "c2p"], "conv_kernel_size": 3,
                          "conv_act": "gelu", "position_biased_input": False, "pooler_hidden_size": 1536,
                          "layer_norm_eps": 1e-7},
}
ALIASES = {
    "roberta-large-mnli": "roberta-large", "roberta-base-mnli": "roberta-base", "bart-large": "bart-large-mnli",
    "distilbart-mnli": "distilbart-mnli-12-1", "deberta-base-mnli": "deberta-base",
    "deberta-large-mnli": "deberta-large", "deberta-xlarge-mnli": "deberta-xlarge",
    "deberta-v2-xlarge-mnli": "deberta-v2-xlarge", "t5-small": "flan-t5-small", "t5-base": "flan-t5-base",
    "t5-large": "flan-t5-large",
}


def shape_name(name: str) -> str:
    key = name.strip().lower().split("/")[-1]
    key = ALIASES.get(key, key)
    if key not in SHAPES:
        raise BenchSpecError(f"no built-in shape {name!r}; choose one of {', '.join(SHAPES)}")
    return key


def is_seq2seq(name: str) -> bool:
    return SHAPES[shape_name(name)]["family"] == "t5"


def parse_random_weights(text: str | None) -> dict[str, str]:
    """``flan-t5-base,roberta-large`` -> {generator: flan-t5-base, classifier: roberta-large}.

    A bare T5 shape is the generator, a bare classifier shape the classifier; ``classifier=flan-t5-large``
    makes a T5 shape the (seq2seq) NLI model."""
    out: dict[str, str] = {}
    for item in [x.strip() for x in (text or "").split(",") if x.strip()]:
        if "=" in item:
            role, name = (x.strip() for x in item.split("=", 1))
            if role not in ("generator", "classifier"):
                raise BenchSpecError(f"--random-weights {item!r}: role must be generator or classifier")
        else:
            name = item
            role = "generator" if is_seq2seq(name) and "generator" not in out else "classifier"
        name = shape_name(name)
        if role == "generator" and not is_seq2seq(name):
            raise BenchSpecError(f"--random-weights: {name} cannot be the generator (not a text-to-text model)")
        if role in out:
            raise BenchSpecError(f"--random-weights: two {role} shapes given ({out[role]}, {name})")
        out[role] = name
    return out


def default_cache_dir() -> Path:
    base = os.environ.get("BREAKNLI_FAST_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "breaknli_fast")
    return Path(base).expanduser() / "random-weights"


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def shipped_tokenizer(family: str, vocab_size: int) -> Path | None:
    """The shipped mini model whose tokenizer a random-weight model of ``family`` reuses, when it is
    installed and its ids fit the model's vocabulary."""
    path = assets_models_dir() / ("mini-t5" if family == "t5" else "mini-nli")
    if not (path / "tokenizer_config.json").exists():
        return None
    try:
        from transformers import AutoTokenizer

        n = len(AutoTokenizer.from_pretrained(path))
    except Exception:  # noqa: BLE001 - fall back to a trained tokenizer
        return None
    return path if n <= vocab_size else None


def _tokenizer_hash(path: Path | None) -> str | None:
    if path is None:
        return None
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and (f.name.startswith(("tokenizer", "special_tokens")) or f.suffix in (".model", ".txt")
                            or f.name in ("vocab.json", "merges.txt")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _copy_tokenizer(src: Path, out: Path) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    tok.save_pretrained(out)
    return tok


def build_random_model(name: str, cache_dir: str | Path | None = None, texts: Iterable[str] = (), seed: int = 0,
                       log: Callable[[str], None] | None = None) -> Path:
    """Build (or reuse from the cache) a model folder with the real architecture of ``name`` and
    random weights. Returns the folder (config.json, model.safetensors, tokenizer files)."""
    name = shape_name(name)
    shape = dict(SHAPES[name])
    family = shape.pop("family")
    shipped = shipped_tokenizer(family, int(shape["vocab_size"]))
    text_list = list(rw.corpus()) + sorted({t for t in texts if t})
    tok_key = {"shipped": str(shipped), "files": _tokenizer_hash(shipped)} if shipped else {"texts": _hash(text_list)}
    key = _hash({"v": SHAPES_VERSION, "name": name, "shape": shape, "seed": seed, "tokenizer": tok_key})
    out = Path(cache_dir or default_cache_dir()) / f"{name}-{key}"
    done = out / ".complete"
    if done.exists():
        return out
    if log:
        log(f"building random-weight {name} in {out}")
    import torch

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if family == "t5":
        from breaknli_fast.engines.compat import new_untied_t5

        tok = _copy_tokenizer(shipped, out) if shipped else rw.train_spm_tokenizer(out, text_list, vocab_size=4000)
        # its own output layer on transformers 4.57 and 5.x (5.x would tie it to the embeddings)
        model = new_untied_t5(decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                              **{k: v for k, v in shape.items() if k != "tie_word_embeddings"})
        with torch.no_grad():  # ids the small tokenizer cannot decode get zero logits
            model.lm_head.weight[len(tok):] = 0.0
    else:
        from transformers import AutoModelForSequenceClassification, BartConfig, DebertaConfig, DebertaV2Config, RobertaConfig

        tok = _copy_tokenizer(shipped, out) if shipped else rw.train_bpe_tokenizer(out, text_list, vocab_size=4000)
        common = dict(num_labels=3, id2label=dict(ID2LABEL), label2id={v: k for k, v in ID2LABEL.items()},
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
        if family == "roberta":
            cfg = RobertaConfig(**shape, **common)
            cfg.architectures = ["RobertaForSequenceClassification"]
        elif family == "bart":
            cfg = BartConfig(**shape, decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=tok.eos_token_id, **common)
            cfg.architectures = ["BartForSequenceClassification"]
            tok.model_input_names = ["input_ids", "attention_mask"]
            tok.save_pretrained(out)
        elif family == "deberta":
            cfg = DebertaConfig(**shape, **common)
            cfg.architectures = ["DebertaForSequenceClassification"]
        else:
            cfg = DebertaV2Config(**shape, **common)
            cfg.architectures = ["DebertaV2ForSequenceClassification"]
        model = AutoModelForSequenceClassification.from_config(cfg)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    (out / "random_weights.json").write_text(json.dumps(
        {"shape": name, "family": family, "architecture": shape, "seed": seed, "tokenizer_size": len(tok),
         "tokenizer_source": str(shipped) if shipped else "trained on the bench's texts",
         "parameters": sum(p.numel() for p in model.parameters()),
         "note": "random weights: speed and memory only; parity figures are not meaningful"}, indent=2))
    done.write_text("ok\n")
    del model
    return out
