"""CTranslate2 conversions of T5-family generators for the ct2 engine (:mod:`breaknli_fast.engines.ct2`), cached
like the ONNX exports (``export_model(format="ct2")`` dispatches here).

A local T5-family model (Flan-T5) is converted once with CTranslate2's own converter
(``ctranslate2.converters.TransformersConverter``, float32 weights; the engine quantizes at load time for int8),
the tokenizer copied beside it, into ``<export cache>/<name>-ct2-float32-<hash>/`` under the exports' lock and
atomic rename, with a manifest. Before it is kept it is checked against torch fp32 (:func:`check_conversion`);
it is reused while the model's files and the versions of CTranslate2 and transformers match.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import breaknli_fast.export.manifest as mf
from breaknli_fast.engines.artifacts import ExportResult
from breaknli_fast.engines.ct2 import (CHECK_MAX_ABS_LOGPROB, CHECK_NEW_TOKENS, CHECK_PROMPTS, CT2_FAMILIES,
                                       import_ct2, vocabulary)
from breaknli_fast.engines.model_info import load_config, model_fingerprint, model_kind, resolve_model
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError, first_line
from breaknli_fast.export.onnx import quiet

CONVERSION_SCHEMA = 1


def _key(model: str, ct2: Any) -> dict[str, Any]:
    import transformers

    fp = model_fingerprint(model)
    return {"schema": CONVERSION_SCHEMA, "format": "ctranslate2", "source": fp.get("files_sha256") or fp.get("revision"),
            "source_id": resolve_model(model), "ctranslate2": ct2.__version__, "transformers": transformers.__version__}


def convert_t5(model: str, cache_dir: str | Path | None = None, force: bool = False, progress: bool = False) -> ExportResult:
    """The checked CTranslate2 conversion of a local T5-family ``model`` (built, or reused from the cache)."""
    t_start = time.perf_counter()
    ct2 = import_ct2()
    config = load_config(model)
    family = getattr(config, "model_type", "?")
    if model_kind(config) != "seq2seq" or family not in CT2_FAMILIES:
        raise UnsupportedModelError(f"{model!r}: CTranslate2 conversions here are of T5 text-to-text models "
                                    f"(Flan-T5), not {family!r}")
    resolved = resolve_model(model)
    if not Path(resolved).exists():
        raise UnsupportedModelError(f"{model!r}: the ct2 engine converts local model folders (download the model first)")
    key = _key(model, ct2)
    target = mf.export_dir_for(model, resolved, "ct2", "fp32", "float32", cache_dir)
    with mf.locked(mf.lock_path(target, cache_dir)):
        old = mf.read_manifest(target) if target.exists() else None
        why = "forced" if force else (mf.mismatch(old, key, target) if target.exists() else "not converted yet")
        if why is None and old is not None:
            return ExportResult(target, old, reused=True, seconds=time.perf_counter() - t_start)
        with mf.staging_dir(target) as stage:
            from ctranslate2.converters import TransformersConverter
            from transformers import AutoTokenizer

            out = stage / "model"
            try:
                with quiet():
                    TransformersConverter(resolved).convert(str(out), quantization="float32")
            except Exception as e:  # the converter's errors are long; keep the first line
                raise ExportError(f"{model!r}: CTranslate2 conversion failed: {first_line(e)}") from e
            for f in list(out.iterdir()):  # one flat folder: CTranslate2's files and the tokenizer
                f.rename(stage / f.name)
            out.rmdir()
            AutoTokenizer.from_pretrained(resolved).save_pretrained(stage)
            check = check_conversion(stage, resolved)
            if not check["passed"]:
                raise ExportValidationError(f"{model!r}: the CTranslate2 conversion does not match torch fp32: "
                                            f"{'; '.join(check['failures'])}", check)
            manifest = {"schema": CONVERSION_SCHEMA, "created": mf.now_iso(), "model": model, "family": family,
                        "format": "ct2", "precision": "fp32", "variant": "float32",
                        "converter": "ctranslate2.converters.TransformersConverter (float32)",
                        "build_seconds": round(time.perf_counter() - t_start, 2), "validation": check,
                        "files": mf.files_manifest(stage), "key": key}
            mf.write_manifest(stage, manifest)
            mf.install(stage, target)
    return ExportResult(target, manifest, reused=False, seconds=time.perf_counter() - t_start)


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
