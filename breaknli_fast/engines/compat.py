"""What differs between transformers 4.57 and 5.x, in one place (docs/stack.md lists the differences).

* T5's output scaling. T5 v1.0 multiplies the decoder output by ``d_model ** -0.5`` before the (tied) output
  layer; T5 v1.1 / Flan-T5 has an untied output layer and does not. transformers 4.57 reads this from
  ``config.tie_word_embeddings``; 5.x always sets ``tie_word_embeddings = True`` and moves the flag to
  ``config.scale_decoder_outputs``. :func:`t5_scales_output` reads whichever the installed version has.
* Random-weight T5s. 5.x ties the output layer to the input embeddings of a T5 built from a config, whatever
  the config says, so a Flan-T5-shaped model built here would have 60.5 M parameters instead of
  flan-t5-small's 77.0 M. :func:`new_untied_t5` builds one with its own output layer on both versions, and
  writes ``tie_word_embeddings: false`` into its config, which both versions read as "v1.1, no scaling".
* Attention. 5.x runs T5 on PyTorch's scaled-dot-product attention by default, 4.57 only has the eager
  code; :data:`T5_ATTENTION` names the implementation the engines load T5s with (the same arithmetic on
  both versions, and the arithmetic the ONNX exports trace).
* Tokenizers. 5.x's ``RobertaTokenizerFast(vocab_file=..., merges_file=...)`` ignores the files (a
  five-token vocabulary, pad id 0); :func:`load_bpe_tokenizer` loads them through ``from_pretrained``, which
  both versions read alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the attention code the engines load T5-family models with (eager: what 4.57 runs, and what the exports trace)
T5_ATTENTION = "eager"


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def t5_scales_output(config: Any) -> bool:
    """Whether a T5 multiplies its decoder output by ``d_model ** -0.5`` before the output layer (T5 v1.0:
    yes; v1.1 / Flan-T5: no), on transformers 4.57 (``tie_word_embeddings``) and 5.x
    (``scale_decoder_outputs``)."""
    scale = getattr(config, "scale_decoder_outputs", None)
    if scale is not None:
        return bool(scale)
    return bool(getattr(config, "tie_word_embeddings", True))


def seq2seq_load_kwargs(config: Any) -> dict[str, Any]:
    """Keyword arguments of ``from_pretrained`` for a text-to-text model: T5-family models on
    :data:`T5_ATTENTION`; other families as transformers chooses."""
    if getattr(config, "model_type", None) in ("t5", "mt5", "umt5"):
        return {"attn_implementation": T5_ATTENTION}
    return {}


def new_untied_t5(**config_kwargs: Any) -> Any:
    """A ``T5ForConditionalGeneration`` with random weights and its own output layer (T5 v1.1 / Flan-T5), on
    transformers 4.57 and 5.x alike: the output layer is drawn as 4.57 draws an untied one (normal, std
    ``initializer_factor``), after the rest, from torch's global generator (seed it before)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(tie_word_embeddings=False, **config_kwargs)
    cfg.architectures = ["T5ForConditionalGeneration"]
    model = T5ForConditionalGeneration(cfg)
    if model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr():  # 5.x tied it
        head = torch.empty_like(model.shared.weight)
        torch.nn.init.normal_(head, mean=0.0, std=float(cfg.initializer_factor))
        model.lm_head.weight = torch.nn.Parameter(head)
    # both versions read "false" as an untied, unscaled T5 v1.1 (5.x keeps both weights when they differ)
    model.config.tie_word_embeddings = False
    if hasattr(model.config, "scale_decoder_outputs"):
        model.config.scale_decoder_outputs = False
    return model


def load_bpe_tokenizer(vocab_dir: str | Path, **kwargs: Any) -> Any:
    """A RoBERTa tokenizer from a folder holding ``vocab.json`` and ``merges.txt``."""
    from transformers import RobertaTokenizerFast

    return RobertaTokenizerFast.from_pretrained(str(vocab_dir), **kwargs)


def load_seq2seq(path: str, dtype: Any, config: Any = None) -> Any:
    """``AutoModelForSeq2SeqLM.from_pretrained(path, dtype=dtype)`` with :func:`seq2seq_load_kwargs`."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = config if config is not None else AutoConfig.from_pretrained(path)
    return AutoModelForSeq2SeqLM.from_pretrained(path, dtype=dtype, **seq2seq_load_kwargs(config))
