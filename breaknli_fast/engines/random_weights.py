"""Material for models that have no trained weights (random-weight benchmarks, the test-suite's tiny models,
the exporters' fallback validation pairs): template sentences and SNLI-like (premise, hypothesis, label)
triples, and tokenizers trained on them on the spot. Nothing here downloads anything."""

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

    from breaknli_fast.engines.compat import load_bpe_tokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(texts or corpus()), vocab_size=vocab_size, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        # through from_pretrained: transformers 5.x ignores vocab_file / merges_file given to the constructor
        tok = load_bpe_tokenizer(tmp, model_max_length=512)
        tok.save_pretrained(out_dir)
    return RobertaTokenizerFast.from_pretrained(out_dir)


# tokenizers trained in this process: (corpus digest, vocabulary size) -> the files of the trained tokenizer
_SPM_TRAINED: dict[tuple[str, int], list[Path]] = {}


def train_spm_tokenizer(out_dir: str | Path, texts: Iterable[str] | None = None, vocab_size: int = 400):
    """A SentencePiece unigram tokenizer laid out as T5 expects (pad=0, eos=1, unk=2), as T5TokenizerFast.

    Trained once per process for a given corpus and size (a later call copies the files): SentencePiece's trainer
    runs a thread pool of its own, which aborted the process (``Fatal Python error: Aborted``) while other
    runtimes' threads were alive; it also trains on one thread (``num_threads=1``), which gives the same pieces
    and scores as its default 16 (checked on the corpus here)."""
    import hashlib
    import shutil

    import sentencepiece as spm
    from transformers import T5TokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = list(texts or corpus()) + ["yes", "no", "it is not possible to tell"]
    key = (hashlib.sha256("\n".join(lines).encode()).hexdigest(), int(vocab_size))
    done = _SPM_TRAINED.get(key)
    if done and all(f.is_file() for f in done) and done[0].parent != out_dir:
        for f in done:
            shutil.copyfile(f, out_dir / f.name)
        return T5TokenizerFast.from_pretrained(out_dir)
    with tempfile.TemporaryDirectory() as tmp:
        txt = Path(tmp) / "corpus.txt"
        txt.write_text("\n".join(lines) + "\n")
        spm.SentencePieceTrainer.train(
            input=str(txt), model_prefix=str(out_dir / "spiece"), vocab_size=vocab_size, model_type="unigram",
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, character_coverage=1.0,
            user_defined_symbols=["yes", "no", "it"], num_threads=1,
            minloglevel=2,
        )
    (out_dir / "spiece.vocab").unlink(missing_ok=True)
    # legacy=True: a word-boundary marker before every piece that follows a space or an added token, as the shipped
    # mini-t5's tokenizer does; transformers 5.x's T5 tokenizer always works that way (it sets its own pre-tokenizer
    # at load), 4.57's reads it from the file: both then give the same ids
    tok = T5TokenizerFast.from_pretrained(out_dir, extra_ids=0, legacy=True)
    saved = [Path(f) for f in tok.save_pretrained(out_dir)]
    _SPM_TRAINED[key] = [out_dir / "spiece.model"] + [f for f in saved if f.name != "spiece.model" and f.is_file()]
    return T5TokenizerFast.from_pretrained(out_dir)


ID2LABEL = {0: "contradiction", 1: "neutral", 2: "entailment"}  # the MNLI checkpoints' order
