"""Tiny random-weight models of the real architectures, with tokenizers trained on the spot, for the
test-suite. Nothing here downloads anything. The template texts and the tokenizer trainers are production code
(random-weight benchmarks use them too): :mod:`breaknli_fast.engines.random_weights`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from breaknli_fast.engines.random_weights import ID2LABEL, corpus, pairs, train_bpe_tokenizer, train_spm_tokenizer

__all__ = ["ID2LABEL", "corpus", "make_tiny_classifier", "make_tiny_t5", "pairs", "train_bpe_tokenizer",
           "train_spm_tokenizer"]


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
