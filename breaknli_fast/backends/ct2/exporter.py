"""The ct2 backend's exporter (format ``ct2``): CTranslate2 conversions of T5-family generators for the ct2 engine
(:mod:`breaknli_fast.backends.ct2.engine`), cached like every export (``export_model(format="ct2")``).

A local T5-family model (Flan-T5) is converted once with CTranslate2's own converter
(``ctranslate2.converters.TransformersConverter``, float32 weights; the engine quantizes at load time for int8),
the tokenizer copied beside it, into ``<export cache>/<name>-ct2-float32-<hash>/`` under the exports' lock and
atomic rename, with a manifest (:class:`Ct2Exporter`). Before it is kept it is checked against torch fp32
(:func:`check_conversion`); it is reused while the model's files and the versions of torch, CTranslate2 and
transformers match.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator

from breaknli_fast.backends.ct2.engine import (CHECK_MAX_ABS_LOGPROB, CHECK_NEW_TOKENS, CHECK_PROMPTS, CT2_FAMILIES,
                                               import_ct2, vocabulary)
from breaknli_fast.backends.ort.onnx import quiet
from breaknli_fast.engines.compat import t5_scales_output
from breaknli_fast.export.errors import ExportError, UnsupportedModelError, first_line
from breaknli_fast.export.exporter import ExportPlan, Exporter

FORMAT = "ct2"
PRECISIONS = ("fp32",)  # float32 weights; the engine quantizes at load time (int8, fp16, bf16)
LIBRARIES = ("torch", "transformers", "ctranslate2")
# the conversion's check: max |Δ log-probability| of torch's greedy tokens (judged as max_abs_logit), finite scores
TOLERANCES = {"max_abs_logit": CHECK_MAX_ABS_LOGPROB, "max_nonfinite": 0}


class Ct2Exporter(Exporter):
    """CTranslate2's conversion of a local T5-family generator (float32), checked against torch fp32."""

    FORMAT = FORMAT
    PRECISIONS = PRECISIONS
    LIBRARIES = LIBRARIES

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        if kind != "seq2seq":
            raise UnsupportedModelError(f"CTranslate2 conversions here are of T5 text-to-text models (Flan-T5), not "
                                        f"{kind} models")
        if fuse or quantization is not None:
            raise UnsupportedModelError("fuse / quantization are ONNX export settings, not CTranslate2's")
        return "float32"

    def require(self, kind: str) -> None:
        import_ct2()

    def default_tolerances(self, kind: str, precision: str) -> dict[str, Any]:
        return dict(TOLERANCES)

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        return convert(plan.src, stage, plan.say)

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        figs = check_conversion(folder, plan.src)
        figs["max_abs_logit"] = figs["max_abs_logprob"]
        return figs


def convert(src: str, stage: Path, say: Any) -> dict[str, Any]:
    """CTranslate2's conversion of a local T5-family folder (float32) and its tokenizer, in one flat folder."""
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoConfig, AutoTokenizer

    family = AutoConfig.from_pretrained(src).model_type
    if family not in CT2_FAMILIES:
        raise UnsupportedModelError(f"{src!r}: CTranslate2 conversions here are of T5 text-to-text models "
                                    f"(Flan-T5), not {family!r}")
    if not Path(src).exists():
        raise UnsupportedModelError(f"{src!r}: the ct2 engine converts local model folders (download the model first)")
    out = stage / "model"
    t0 = time.perf_counter()
    try:
        with quiet(), _t5_output_scaling():
            TransformersConverter(src).convert(str(out), quantization="float32")
    except Exception as e:  # the converter's errors are long; keep the first line
        raise ExportError(f"{src!r}: CTranslate2 conversion failed: {first_line(e)}") from e
    for f in list(out.iterdir()):  # one flat folder: CTranslate2's files and the tokenizer
        f.rename(stage / f.name)
    out.rmdir()
    AutoTokenizer.from_pretrained(src).save_pretrained(stage)
    say(f"  CTranslate2 conversion in {time.perf_counter() - t0:.1f}s")
    return {"family": family, "converter": "ctranslate2.converters.TransformersConverter (float32)"}


@contextlib.contextmanager
def _t5_output_scaling() -> Iterator[None]:
    """CTranslate2's T5 converter scales the decoder output by ``d_model ** -0.5`` when the config says
    ``tie_word_embeddings``, which transformers 5.x always sets (it keeps T5's real flag in
    ``scale_decoder_outputs``): a Flan-T5 converted there comes out mis-scaled (its check measured max |Δ
    log-probability| 2.56). While converting, the converter reads the flag the installed transformers means
    (:func:`~breaknli_fast.engines.compat.t5_scales_output`); on 4.57 that is the same value."""
    from ctranslate2.converters import transformers as ct2_transformers

    loader = ct2_transformers.T5Loader
    original = loader.get_model_spec

    def get_model_spec(self: Any, model: Any) -> Any:
        config = model.config
        tied = config.tie_word_embeddings
        config.tie_word_embeddings = t5_scales_output(config)
        try:
            return original(self, model)
        finally:
            config.tie_word_embeddings = tied

    loader.get_model_spec = get_model_spec
    try:
        yield
    finally:
        loader.get_model_spec = original


def _check_prompts(n: int) -> list[str]:
    from breaknli_fast.engines.random_weights import pairs
    from breaknli_fast.prompts import GEN_PROMPTS

    templates = list(GEN_PROMPTS.values())
    return [templates[i % len(templates)].format(h=h) for i, (_, h, _) in enumerate(pairs(n, seed=3))]


def check_conversion(folder: Path, src: str, n: int = CHECK_PROMPTS) -> dict[str, Any]:
    """The converted model (float32) against torch fp32 on ``n`` generator prompts: greedy token agreement
    (position by position over ``CHECK_NEW_TOKENS`` tokens), and the largest difference between the
    log-probabilities CTranslate2 gives torch's greedy tokens (``score_batch``) and torch's own; passed when that
    difference is at most ``CHECK_MAX_ABS_LOGPROB``. A wrong conversion (a mis-scaled output layer, a missing
    relative-position bias) is far off on both."""
    import numpy as np
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    ct2 = import_ct2()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSeq2SeqLM.from_pretrained(src, dtype=torch.float32).eval()
    prompts = _check_prompts(n)
    enc = tok(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        seqs = model.generate(**enc, do_sample=False, num_beams=1, max_new_tokens=CHECK_NEW_TOKENS,
                              min_new_tokens=CHECK_NEW_TOKENS)
        logits = model(**enc, decoder_input_ids=seqs[:, :-1]).logits.float()
    ref_lp = torch.log_softmax(logits, -1).gather(-1, seqs[:, 1:, None])[..., 0].numpy()
    tr = ct2.Translator(str(folder), device="cpu", compute_type="float32", intra_threads=1)
    sources = [tok.convert_ids_to_tokens(tok(p)["input_ids"]) for p in prompts]
    greedy = tr.translate_batch(sources, beam_size=1, max_decoding_length=CHECK_NEW_TOKENS,
                                min_decoding_length=CHECK_NEW_TOKENS, return_end_token=True)
    vocab = vocabulary(folder)
    ref_ids = seqs[:, 1:].tolist()
    same = total = 0
    for r, row in zip(greedy, ref_ids):
        got = [vocab[t] for t in r.hypotheses[0]]
        total += len(row)
        same += sum(a == b for a, b in zip(got, row))
    scored = tr.score_batch(sources, [tok.convert_ids_to_tokens(row) for row in ref_ids])
    diffs = [np.abs(np.asarray(s.log_probs[:len(row)], dtype=np.float64) - ref_lp[i, :len(row)]).max()
             for i, (s, row) in enumerate(zip(scored, ref_ids))]
    max_diff = float(max(diffs)) if diffs else 0.0
    failures = [] if np.isfinite(max_diff) and max_diff <= CHECK_MAX_ABS_LOGPROB else [
        f"max|Δ log-probability| {max_diff:.3g} > {CHECK_MAX_ABS_LOGPROB:g}"]
    return {"prompts": n, "new_tokens": CHECK_NEW_TOKENS, "token_agreement": 100.0 * same / max(1, total),
            "max_abs_logprob": max_diff, "tolerance": CHECK_MAX_ABS_LOGPROB, "passed": not failures,
            "failures": failures}
