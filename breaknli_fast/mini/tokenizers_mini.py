"""Tokenizers of the mini models: byte-level BPE (RoBERTa) and SentencePiece unigram (T5)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from breaknli_fast.prompts import CONTRADICT_PROMPT, ENTAIL_PROMPT, NLI_ANSWERS, NLI_PROMPTS

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
ROBERTA_MAX_LEN = 128
T5_MAX_LEN = 512


def prompt_lines(repeat: int = 200) -> list[str]:
    """Prompt and answer strings (without the slots), repeated so that their words become single pieces."""
    lines = []
    for tpl in [CONTRADICT_PROMPT, ENTAIL_PROMPT, *NLI_PROMPTS.values()]:
        lines.append(tpl.replace("{h}", "").replace("{premise}", "").replace("{hypothesis}", "").strip())
    lines.extend(NLI_ANSWERS.values())
    return lines * repeat


def train_bpe(texts: Sequence[str], out_dir: str | Path, vocab_size: int = 8000):
    """Byte-level BPE on ``texts`` wrapped as ``RobertaTokenizerFast`` and saved to ``out_dir``."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=2,
                            special_tokens=ROBERTA_SPECIALS, show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        bpe.save_model(tmp)
        tok = RobertaTokenizerFast(vocab_file=str(Path(tmp) / "vocab.json"), merges_file=str(Path(tmp) / "merges.txt"),
                                   model_max_length=ROBERTA_MAX_LEN)
        tok.save_pretrained(out)
    tok = RobertaTokenizerFast.from_pretrained(out)
    check_roberta_tokenizer(tok)
    return tok


def check_roberta_tokenizer(tok) -> None:
    ids = tok("A man.", "A dog.")["input_ids"]
    text = tok.decode(ids)
    if text != "<s>A man.</s></s>A dog.</s>":
        raise AssertionError(f"unexpected RoBERTa pair encoding {text!r}")
    for s in ["A man is playing a guitar on stage.", "Two dogs run through a field!"]:
        if tok.decode(tok(s, add_special_tokens=False)["input_ids"]) != s:
            raise AssertionError(f"BPE round trip failed for {s!r}")
    if (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) != (1, 0, 2, 3):
        raise AssertionError("unexpected RoBERTa special token ids")


def train_sentencepiece(texts: Iterable[str], out_dir: str | Path, vocab_size: int = 6000, seed: int = 0):
    """SentencePiece unigram (``<pad>``=0, ``</s>``=1, ``<unk>``=2 as in T5) loaded as ``T5TokenizerFast``."""
    import sentencepiece as spm
    from transformers import T5TokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "spiece")
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(list(texts)),
            model_prefix=prefix,
            model_type="unigram",
            vocab_size=vocab_size,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
            pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
            character_coverage=1.0,
            shuffle_input_sentence=False,
            num_threads=1,
            minloglevel=2,
        )
        folder = Path(tmp) / "tok"
        folder.mkdir()
        shutil.copy(prefix + ".model", folder / "spiece.model")
        old = out / "spiece.model"
        if old.exists() and _same_pieces(old, folder / "spiece.model"):
            # the serialised model differs in bytes between identical trainings; keep the file, avoid churn
            shutil.copy(old, folder / "spiece.model")
        tok = T5TokenizerFast.from_pretrained(str(folder), extra_ids=0, model_max_length=T5_MAX_LEN)
        tok.save_pretrained(out)
    tok = T5TokenizerFast.from_pretrained(str(out))
    check_t5_tokenizer(tok)
    return tok


def _same_pieces(a: Path, b: Path) -> bool:
    import sentencepiece as spm

    pa, pb = spm.SentencePieceProcessor(model_file=str(a)), spm.SentencePieceProcessor(model_file=str(b))
    n = pa.get_piece_size()
    return n == pb.get_piece_size() and all(
        pa.id_to_piece(i) == pb.id_to_piece(i) and abs(pa.get_score(i) - pb.get_score(i)) < 1e-6 for i in range(n))


def check_t5_tokenizer(tok) -> None:
    if (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) != (0, 1, 2):
        raise AssertionError("unexpected T5 special token ids")
    s = "A man is playing a guitar on stage."
    ids = tok(s)["input_ids"]
    if ids[-1] != tok.eos_token_id:
        raise AssertionError("T5 tokenizer does not append </s>")
    if tok.decode(ids, skip_special_tokens=True) != s:
        raise AssertionError(f"SentencePiece round trip failed: {tok.decode(ids, skip_special_tokens=True)!r}")
    firsts = set()
    for ans in NLI_ANSWERS.values():
        t = [i for i in tok(ans, add_special_tokens=False)["input_ids"] if tok.decode([i]).strip()]
        firsts.add(t[0])
    if len(firsts) != 3:
        raise AssertionError("answer words share a first token")
