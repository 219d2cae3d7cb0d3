"""Tiny random-weight models of the real architectures, with tokenizers trained on the spot.

Used by the test-suite and by benchmarks that need the *shapes* of real checkpoints without
their weights. Nothing here downloads anything.
"""

from __future__ import annotations

import itertools
import random
import tempfile
from pathlib import Path
from typing import Iterable

SUBJECTS = ["A man", "A woman", "Two dogs", "A child", "The girl", "An old man", "A group of people", "A cat", "The boy", "A musician"]
VERBS = ["is sleeping", "is running", "is eating food", "plays a guitar", "sits on a bench", "is swimming", "walks down the street",
         "is reading a book", "rides a bike", "is cooking dinner", "is laughing", "holds an umbrella"]
PLACES = ["in the park", "at the beach", "inside a house", "near the river", "on a busy street", "in the snow", ""]


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    """Short SNLI-like sentences built from templates (deterministic)."""
    rng = random.Random(seed)
    combos = list(itertools.product(SUBJECTS, VERBS, PLACES))
    rng.shuffle(combos)
    return [" ".join(x for x in c if x) + "." for c in combos[:n]]


def pairs(n: int = 60, seed: int = 0) -> list[tuple[str, str, str]]:
    """(premise, hypothesis, gold label) triples built from templates."""
    rng = random.Random(seed)
    labels = ["entailment", "neutral", "contradiction"]
    out = []
    for i in range(n):
        s, v, p = rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(PLACES)
        v2 = rng.choice([x for x in VERBS if x != v])
        lab = labels[i % 3]
        prem = " ".join(x for x in (s, v, p) if x) + "."
        hyp = {"entailment": f"{s} {v}.", "neutral": f"{s} {v} with a friend.", "contradiction": f"{s} {v2}."}[lab]
        out.append((prem, hyp, lab))
    return out


def train_bpe_tokenizer(out_dir: str | Path, texts: Iterable[str] | None = None, vocab_size: int = 600):
    """A byte-level BPE tokenizer with RoBERTa's special tokens, saved as RobertaTokenizerFast."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(texts or corpus()), vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        tok = RobertaTokenizerFast(vocab_file=f"{tmp}/vocab.json", merges_file=f"{tmp}/merges.txt", model_max_length=512)
        tok.save_pretrained(out_dir)
    return RobertaTokenizerFast.from_pretrained(out_dir)


def train_spm_tokenizer(out_dir: str | Path, texts: Iterable[str] | None = None, vocab_size: int = 400):
    """A SentencePiece unigram tokenizer laid out as T5 expects (pad=0, eos=1, unk=2), as T5TokenizerFast."""
    import sentencepiece as spm
    from transformers import T5TokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        txt = Path(tmp) / "corpus.txt"
        txt.write_text("\n".join(list(texts or corpus()) + ["yes", "no", "it is not possible to tell"]) + "\n")
        spm.SentencePieceTrainer.train(
            input=str(txt), model_prefix=str(out_dir / "spiece"), vocab_size=vocab_size, model_type="unigram",
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, character_coverage=1.0,
            user_defined_symbols=["yes", "no", "it"],
            minloglevel=2,
        )
    (out_dir / "spiece.vocab").unlink(missing_ok=True)
    tok = T5TokenizerFast.from_pretrained(out_dir, extra_ids=0, legacy=False)
    tok.save_pretrained(out_dir)
    return T5TokenizerFast.from_pretrained(out_dir)


ID2LABEL = {0: "contradiction", 1: "neutral", 2: "entailment"}  # the MNLI checkpoints' order


def make_tiny_classifier(out_dir: str | Path, family: str = "roberta", seed: int = 0, id2label: dict | None = None,
                         hidden: int = 32, layers: int = 2, tokenizer_texts: Iterable[str] | None = None,
                         init_std: float = 0.02) -> Path:
    """A random-weight sequence classifier of the given family (roberta, bart, distilbart, deberta, deberta-v2).

    ``init_std`` is the weights' standard deviation: the default gives near-constant predictions
    (like any freshly initialised model); about 1.0 gives labels that vary with the input."""
    import torch
    from transformers import (AutoModelForSequenceClassification, BartConfig, DebertaConfig, DebertaV2Config,
                              RobertaConfig)

    out_dir = Path(out_dir)
    tok = train_bpe_tokenizer(out_dir, tokenizer_texts)
    id2label = dict(id2label or ID2LABEL)
    common = dict(vocab_size=len(tok), num_labels=3, initializer_range=init_std, id2label=id2label, label2id={v: k for k, v in id2label.items()},
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if family == "roberta":
        cfg = RobertaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=hidden * 2,
                            max_position_embeddings=130, **common)
        cfg.architectures = ["RobertaForSequenceClassification"]
    elif family in ("bart", "distilbart"):
        cfg = BartConfig(d_model=hidden, encoder_layers=layers, decoder_layers=1 if family == "distilbart" else layers,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=hidden * 2,
                         decoder_ffn_dim=hidden * 2, max_position_embeddings=128, decoder_start_token_id=tok.eos_token_id, init_std=init_std,
                         forced_eos_token_id=tok.eos_token_id, **common)
        cfg.architectures = ["BartForSequenceClassification"]
        tok.model_input_names = ["input_ids", "attention_mask"]
        tok.save_pretrained(out_dir)
    elif family == "deberta":
        cfg = DebertaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=hidden * 2,
                            max_position_embeddings=128, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=-1,
                            position_biased_input=False, type_vocab_size=0, **common)
        cfg.architectures = ["DebertaForSequenceClassification"]
    elif family == "deberta-v2":
        cfg = DebertaV2Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=hidden * 2,
                              max_position_embeddings=128, relative_attention=True, pos_att_type=["c2p", "p2c"],
                              position_buckets=32, max_relative_positions=-1, position_biased_input=False, type_vocab_size=0, **common)
        cfg.architectures = ["DebertaV2ForSequenceClassification"]
    else:
        raise ValueError(f"unknown family {family!r}")
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(cfg)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def make_tiny_t5(out_dir: str | Path, seed: int = 0, d_model: int = 32, layers: int = 2,
                 tokenizer_texts: Iterable[str] | None = None) -> Path:
    """A random-weight T5 v1.1 / Flan-T5-architecture model (gated-gelu, untied head, relative attention)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    out_dir = Path(out_dir)
    tok = train_spm_tokenizer(out_dir, tokenizer_texts)
    cfg = T5Config(vocab_size=len(tok), d_model=d_model, d_kv=d_model // 4, d_ff=d_model * 2, num_layers=layers,
                   num_decoder_layers=layers, num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    cfg.architectures = ["T5ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(cfg)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
