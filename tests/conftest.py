"""Shared fixtures: tiny random-weight models of the real architectures, built once per session
with tokenizers trained on the spot (no downloads)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# bench's per-stage ceilings in their smoke form (one call per kernel): the suite checks the pipeline, not the peaks
os.environ.setdefault("BREAKNLI_FAST_CEILINGS", "quick")

import tiny_models as testing  # noqa: E402



@pytest.fixture(autouse=True)
def _torch_threads():
    """Each test ends with torch's intra-op thread count as it found it (or, where torch was imported
    during the test, as the torch engine found it at import). Engines set the count process-wide, and
    torch's fp32 results depend on it, so without this a test's numbers would depend on the tests run
    before it."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if before is None:
        before = getattr(sys.modules.get("breaknli_fast.backends.pytorch.engine"), "_DEFAULT_THREADS", None)
    if torch is not None and before and torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_t5(tiny_dir) -> str:
    return str(testing.make_tiny_t5(tiny_dir / "t5"))


@pytest.fixture(scope="session")
def tiny_roberta(tiny_dir) -> str:
    """A RoBERTa classifier whose labels vary with the input (init std 1.0)."""
    return str(testing.make_tiny_classifier(tiny_dir / "roberta", "roberta", init_std=1.0))


@pytest.fixture(scope="session")
def tiny_bart(tiny_dir) -> str:
    return str(testing.make_tiny_classifier(tiny_dir / "bart", "bart", init_std=1.0))


@pytest.fixture(scope="session")
def tiny_tsv(tiny_dir) -> Path:
    """An SNLI-format TSV (gold_label, sentence1, sentence2, pairID) of 60 template pairs."""
    p = tiny_dir / "tiny.tsv"
    with open(p, "w") as f:
        f.write("gold_label\tsentence1\tsentence2\tpairID\n")
        for i, (prem, hyp, lab) in enumerate(testing.pairs(60)):
            f.write(f"{lab}\t{prem}\t{hyp}\tp{i}\n")
    return p


@pytest.fixture(scope="module")
def permuted(tiny_roberta, tmp_path_factory) -> str:
    """A copy of the tiny classifier whose id2label is permuted: same logits, shuffled labels."""
    d = tmp_path_factory.mktemp("perm") / "roberta-perm"
    shutil.copytree(tiny_roberta, d)
    cfg = json.loads((d / "config.json").read_text())
    old = {int(k): v for k, v in cfg["id2label"].items()}
    cfg["id2label"] = {str(k): old[(k + 1) % 3] for k in old}  # a derangement: every label changes
    cfg["label2id"] = {v: int(k) for k, v in cfg["id2label"].items()}
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(d)


@pytest.fixture(scope="session")
def tiny_mlm(tiny_dir) -> str:
    """A random-weight RoBERTa masked LM with a BPE tokenizer trained on the template corpus."""
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    out = tiny_dir / "mlm"
    tok = testing.train_bpe_tokenizer(out)
    cfg = RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=130, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, initializer_range=0.5)
    cfg.architectures = ["RobertaForMaskedLM"]
    torch.manual_seed(0)
    RobertaForMaskedLM(cfg).save_pretrained(out, safe_serialization=True)
    return str(out)
