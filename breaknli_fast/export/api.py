"""``export_model``: ONNX (fp32 / fp16 / int8) and TensorRT exports, validated and cached.

This is the exporters' API for the engines that export on first use (ort, tensorrt): they call
:func:`export_model` with an :class:`ExportOptions`, and nothing here imports an engine backend (the exports
are validated against the torch engine loaded through the registry, on the engines' runtimes).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import random_weights
from breaknli_fast.engines.model_info import (ModelLoadError, effective_max_length, is_masked_lm, load_config,
                                          model_fingerprint, model_kind, resolve_model)
from breaknli_fast.engines.ort_runtime import classifier_feeds
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.engines.tensorrt_runtime import require_tensorrt
import breaknli_fast.export.manifest as mf
import breaknli_fast.export.onnx as ox
import breaknli_fast.export.quantize as qz
import breaknli_fast.export.t5_step as t5_step
import breaknli_fast.export.tensorrt as trt_export
import breaknli_fast.export.validate as val
from breaknli_fast.engines.artifacts import (CALIBRATION_SIZE, EXPORT_OPTS, VALIDATION_SIZE, ExportOptions,  # noqa: F401
                                            ExportResult, provide_builder)
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError, first_line

FORMATS = ("onnx", "tensorrt")
TASKS = ("mlm",)  # roles exported only when asked (the kind of the other models follows from their config)
PRECISIONS = ("fp32", "fp16", "int8")
Pair = tuple[str, str]


def _console(progress: bool) -> Any:
    if not progress:
        return None
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def as_pairs(items: Iterable[Any]) -> list[Pair]:
    """(premise, hypothesis) from tuples ``(p, h)`` / ``(p, h, label)``, dicts or objects with attributes."""
    out: list[Pair] = []
    for it in items:
        if isinstance(it, (tuple, list)):
            out.append((str(it[0]), str(it[1])))
        elif isinstance(it, Mapping):
            out.append((str(it["premise"]), str(it["hypothesis"])))
        else:
            out.append((str(it.premise), str(it.hypothesis)))
    return out


def default_pairs(n: int) -> tuple[list[Pair], str]:
    """The embedded SNLI sample when it is there, else the template pairs of
    :mod:`breaknli_fast.engines.random_weights`."""
    try:
        data = load_examples("sample", limit=n)
        ps = as_pairs(data.examples)
        if ps:
            return ps, "embedded snli sample"
    except Exception:  # sample missing or unreadable: fall back
        pass
    return as_pairs(random_weights.pairs(n)), "breaknli_fast.engines.random_weights.pairs"


def tuning_pairs(n: int) -> tuple[list[Pair], str]:
    """The first ``n`` pairs of the held-out tuning slice (``sample-tuning``; the evaluation slice, ``sample``,
    is what studies and benches measure on), else :func:`default_pairs`."""
    try:
        ps = as_pairs(load_examples("sample-tuning", limit=n).examples)
        if ps:
            return ps, "embedded snli tuning slice"
    except Exception:  # the slice missing or unreadable: fall back
        pass
    return default_pairs(n)


def split_pairs(pairs: Sequence[Pair], calibration_size: int, validation_size: int) -> tuple[list[Pair], list[Pair]]:
    """Calibration and validation pairs, disjoint when there are enough."""
    pairs = list(pairs)
    calib = pairs[:calibration_size]
    if len(pairs) >= calibration_size + validation_size:
        val = pairs[calibration_size:calibration_size + validation_size]
    else:
        val = pairs[:validation_size]
    return calib, val


QUANTIZATIONS = ("dynamic", "static")
STATIC = ("int8-qdq", "int8-static")  # the variants calibrated on pairs


def _variant(kind: str, format: str, precision: str, device: str, fuse: bool = False,
             quantization: str | None = None) -> str:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UnsupportedModelError(f"quantization={quantization!r}: use dynamic or static")
    if fuse and kind == "seq-cls" and format == "onnx" and device == "cpu":
        if quantization == "static" and precision == "int8":
            raise UnsupportedModelError("fuse=true with quantization=static is not supported: use one of them")
        return _variant(kind, format, precision, device, quantization=quantization) + "-fused"
    if precision != "int8":
        if quantization is not None:
            raise UnsupportedModelError(f"quantization={quantization} is an int8 setting, not one of {precision}")
        return precision
    if format == "onnx" and device == "cpu":
        if quantization != "static":
            return "int8-dynamic"
        if kind != "seq-cls":
            raise UnsupportedModelError(
                f"static int8 on the CPU is for sequence classifiers, not {kind} models (give it to the classifier "
                "alone: clf.quantization=static)")
        return "int8-static"
    if quantization == "dynamic":
        raise UnsupportedModelError("int8 on the GPU is static (QDQ): quantization=dynamic is for the CPU")
    if kind == "mlm":
        raise UnsupportedModelError("int8 masked LMs on the GPU are not supported (no static calibration of the "
                                    "mask positions): use fp16 on cuda, or int8 on the CPU")
    if kind == "seq2seq":
        raise UnsupportedModelError(
            "int8 for text-to-text models on the GPU is not supported (static QDQ calibration of the decoder with "
            "past is not implemented): use fp16 on cuda, or int8 on the CPU"
        )
    return "int8-qdq"


def _with_step_graphs(kind: str, precision: str, family: str) -> bool:
    """T5 / mT5 exports in fp32 / int8 also get the ort engine's sampling graphs (``export.t5_step``; not
    umT5, whose every layer has its own relative position bias)."""
    return kind == "seq2seq" and precision in ("fp32", "int8") and family in t5_step.STEP_FAMILIES


def _pairs_digest(pairs: Sequence[Pair]) -> str:
    return hashlib.sha256(json.dumps(list(pairs)).encode()).hexdigest()[:16]


def export_model(
    model: str,
    format: str = "onnx",
    precision: str = "fp32",
    out_dir: str | Path | None = None,
    calibration_pairs: Iterable[Any] | None = None,
    calibration_size: int = CALIBRATION_SIZE,
    force: bool = False,
    validate: bool = True,
    tolerances: Mapping[str, Any] | None = None,
    progress: bool = True,
    device: str = "cpu",
    validation_size: int = VALIDATION_SIZE,
    cache_dir: str | Path | None = None,
    max_length: int = 256,
    max_batch: int = 64,
    task: str | None = None,
    fuse: bool = False,
    quantization: str | None = None,
) -> ExportResult:
    """Export ``model`` (a shipped mini-model name, a local folder or a hub id) and validate it.

    ``format="onnx"``: fp32 graph(s), fp16 conversion, or int8 (dynamic quantization for
    ``device="cpu"``, static symmetric QDQ for ``cuda``). ``format="tensorrt"``: a serialized
    TensorRT engine (needs TensorRT 10 and a CUDA GPU). The export folder (``out_dir``, else the
    cache) holds the graphs, the tokenizer and ``manifest.json``; an export whose manifest matches
    is reused unless ``force``. Validation compares with the PyTorch fp32 model on
    ``validation_size`` pairs and raises :class:`ExportValidationError` beyond ``tolerances``.

    ``max_length`` (tokens of a pair or prompt, for the traced inputs, the validation, the calibration
    and a TensorRT profile) is capped at the model's own limit
    (:func:`~breaknli_fast.engines.model_info.effective_max_length`).

    ``task="mlm"``: a masked language model for the mask-filler role (ONNX only; one graph with log-probabilities
    at the mask positions), validated by top-1 and top-k agreement of the suggestions with torch fp32 on masked
    pairs (``validate.validate_masked_lm``).
    """
    if format == "ct2":  # a CTranslate2 conversion for the ct2 engine (float32; the engine quantizes on load)
        from breaknli_fast.export.ct2 import convert_t5

        return convert_t5(model, cache_dir=cache_dir, force=force, progress=progress)
    t_start = time.perf_counter()
    console = _console(progress)

    def say(msg: str, style: str | None = None) -> None:
        if console is not None:
            console.print(msg, style=style, markup=False)

    if task is not None and task not in TASKS:
        raise UnsupportedModelError(f"unknown export task {task!r}; choose one of {', '.join(TASKS)}")
    if format not in FORMATS:
        raise UnsupportedModelError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    if precision not in PRECISIONS:
        raise UnsupportedModelError(
            f"{format} exports are fp32, fp16 or int8, not {precision!r}" + (" (bf16 runs on the torch engine)" if precision == "bf16" else "")
        )
    dev = device.split(":")[0]
    if dev not in ("cpu", "cuda"):
        raise ExportError(f"unknown device {device!r}; use cpu or cuda[:N]")
    if format == "tensorrt":
        device = device if dev == "cuda" else "cuda"
    try:
        resolved = resolve_model(model)
        config = load_config(model)
        if task == "mlm":
            if not is_masked_lm(config):
                raise UnsupportedModelError(f"{model!r} is not a masked language model (…ForMaskedLM)")
            kind = "mlm"
        else:
            kind = model_kind(config)
    except ModelLoadError as e:
        raise UnsupportedModelError(str(e)) from None
    family = getattr(config, "model_type", "?")
    max_length, limits = _capped_max_length(resolved, config, max_length)
    if format == "tensorrt" and kind == "mlm":
        raise UnsupportedModelError("TensorRT engines of masked LMs are not supported: use --engine ort")
    if format == "tensorrt" and kind == "seq2seq":
        raise UnsupportedModelError(
            "TensorRT engines for text-to-text models (Flan-T5) are not supported yet: use --engine ort --device cuda "
            "(optionally with the TensorRT execution provider)"
        )
    fuse = bool(fuse) if not isinstance(fuse, str) else fuse.lower() in ("1", "true", "yes")
    variant = _variant(kind, format, precision, dev, fuse, quantization)
    if format == "tensorrt":
        require_tensorrt()  # fail fast, one line, before any work
    tol = val.tolerances_for(kind, precision, tolerances)

    pairs_src = "given"
    n_calib = calibration_size if variant in STATIC else 0
    if calibration_pairs is not None:
        all_pairs = as_pairs(calibration_pairs)
        if not all_pairs:
            raise ExportError("no calibration/validation pairs were given")
        calib, val_pairs = split_pairs(all_pairs, n_calib, validation_size)
    elif variant == "int8-static":
        # calibrated on the tuning slice, so that the evaluation slice stays unseen by the export
        calib, _ = tuning_pairs(n_calib)
        val_pairs, pairs_src = default_pairs(validation_size)
    else:
        all_pairs, pairs_src = default_pairs(max(n_calib, validation_size) + (validation_size if n_calib else 0))
        calib, val_pairs = split_pairs(all_pairs, n_calib, validation_size)

    fingerprint = model_fingerprint(model)
    key: dict[str, Any] = {
        "schema": mf.SCHEMA,
        "format": format,
        "precision": precision,
        "variant": variant,
        "kind": kind,
        "source": fingerprint.get("files_sha256") or fingerprint.get("revision"),
        "source_id": resolved,
        "libraries": mf.library_versions(),
    }
    if _with_step_graphs(kind, precision, family):
        key["step_graphs"] = t5_step.STEP_GRAPHS_VERSION
    if variant in STATIC:
        key["calibration"] = {"pairs": len(calib), "sha256": _pairs_digest(calib)}
    if format == "tensorrt":  # an engine is specific to the GPU model and the TensorRT version
        import torch

        key.update(max_length=max_length, max_batch=max_batch, gpu=torch.cuda.get_device_name(0))
    target = Path(out_dir).expanduser() if out_dir else mf.export_dir_for(model, resolved, format, precision, variant, cache_dir)

    with mf.locked(mf.lock_path(target, cache_dir)):
        old = mf.read_manifest(target) if target.exists() else None
        why = "forced" if force else (mf.mismatch(old, key, target) if target.exists() else "not exported yet")
        if why is None and old is not None:
            result = ExportResult(target, old, reused=True)
            say(f"reusing {target}", "green")
            if validate:
                figs = old.get("validation")
                if not figs or figs.get("skipped"):
                    say("validating the cached export against the PyTorch fp32 model ...")
                    figs = _run_validation(target, kind, format, resolved, val_pairs, device, max_length, pairs_src)
                    old["validation"] = figs
                    mf.write_manifest(target, old)
                figs["tolerances"] = tol
                _judge(figs, tol, model, format, precision)
            result.seconds = time.perf_counter() - t_start
            return result
        if target.exists() and why:
            say(f"rebuilding {target.name}: {why}")
        say(f"exporting {model} ({family}, {kind}) → {format} {precision} ({variant})", "bold")
        with mf.staging_dir(target) as stage, tempfile.TemporaryDirectory(dir=stage.parent, prefix=f".{target.name}.fp32-") as fp32_tmp:
            info = _build(resolved, kind, format, precision, variant, Path(fp32_tmp), stage, calib, val_pairs,
                          device, max_length, max_batch, say, fuse=variant.endswith("-fused"))
            figs: dict[str, Any] = {"skipped": True}
            if validate:
                say(f"validating on {len(val_pairs)} pairs against the PyTorch fp32 model ...")
                figs = _run_validation(stage, kind, format, resolved, val_pairs, device, max_length, pairs_src)
            manifest = {
                "schema": mf.SCHEMA,
                "created": mf.now_iso(),
                "build_seconds": round(time.perf_counter() - t_start, 2),
                "model": model,
                "source": fingerprint,
                "kind": kind,
                "family": family,
                "format": format,
                "precision": precision,
                "variant": variant,
                **info,
                "model_max_length": limits["model_max_length"],
                "model_max_length_from": limits["model_max_length_from"],
                "libraries": key["libraries"],
                "files": mf.files_manifest(stage),
                "validation": figs,
                "key": key,
            }
            if validate:
                figs["tolerances"] = tol
                _judge(figs, tol, model, format, precision)
            mf.write_manifest(stage, manifest)
            mf.install(stage, target)
    say(f"exported {target} in {time.perf_counter() - t_start:.1f}s", "green")
    return ExportResult(target, manifest, reused=False, seconds=time.perf_counter() - t_start)


def _capped_max_length(src: str, config: Any, max_length: int) -> tuple[int, dict[str, Any]]:
    """``max_length`` capped at the model's input limit (its position table, its tokenizer's
    ``model_max_length``), with the record of how."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(src)
    except (OSError, ValueError) as e:
        raise UnsupportedModelError(f"cannot load the tokenizer of {src!r}: {first_line(e)}") from None
    try:
        return effective_max_length(max_length, config, tok)
    except ModelLoadError as e:
        raise ExportError(str(e)) from None


def _judge(figs: dict[str, Any], tol: Mapping[str, Any], model: str, format: str, precision: str) -> None:
    failures = val.check(figs, tol)
    figs["passed"] = not failures
    figs["failures"] = failures
    if failures:
        raise ExportValidationError(
            f"{model} {format} {precision} failed validation against PyTorch fp32: {'; '.join(failures)}", figs
        )


def _copy_side_files(src: Path, dst: Path) -> None:
    """Tokenizer, config and generation config (everything that is not a graph)."""
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".onnx", ".onnx.data", ".data")):
            shutil.copy2(f, dst / f.name)


def _calibration_feeds(folder: Path, graph: str, pairs: Sequence[Pair], max_length: int, batch: int = 16) -> list[dict[str, Any]]:
    import onnx
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    inputs = onnx.load(str(folder / graph), load_external_data=False).graph.input
    return [classifier_feeds(tok, pairs[i:i + batch], inputs, max_length) for i in range(0, len(pairs), batch)]


def _build(src: str, kind: str, format: str, precision: str, variant: str, fp32_dir: Path, stage: Path,
           calib: Sequence[Pair], val_pairs: Sequence[Pair], device: str, max_length: int, max_batch: int,
           say: Any, fuse: bool = False) -> dict[str, Any]:
    ox.require_export_libs(kind)
    t0 = time.perf_counter()
    direct = precision == "fp32"
    out = stage if direct else fp32_dir
    if kind == "seq-cls":
        info = ox.export_classifier(src, out, val_pairs, max_length=max_length)
        graphs = [ox.CLASSIFIER_FILE]
        if fuse:
            from transformers import AutoConfig

            t1 = time.perf_counter()
            feeds = _calibration_feeds(out, ox.CLASSIFIER_FILE, val_pairs, max_length)
            info["fusion"] = ox.fuse_transformer(out / ox.CLASSIFIER_FILE, AutoConfig.from_pretrained(str(out)), feeds)
            fuse = bool(info["fusion"]["applied"])
            say(f"  transformer fusion: {info['fusion'].get('fused') or info['fusion'].get('reason')} "
                f"in {time.perf_counter() - t1:.1f}s")
    elif kind == "mlm":
        from transformers import AutoTokenizer

        mask = AutoTokenizer.from_pretrained(src).mask_token
        items = [tuple(x.replace(val.MASK, mask or "") for x in it) for it in val.masked_items(val_pairs[:2])]
        info = ox.export_masked_lm(src, out, items, max_length=max_length)
        graphs = [ox.MLM_FILE]
    else:
        info = ox.export_seq2seq(src, out)
        graphs = list(ox.SEQ2SEQ_FILES)
        if _with_step_graphs(kind, precision, info["family"]):
            info["step_graphs"] = t5_step.export_step_graphs(src, out)
            info["graphs"].update(info["step_graphs"].pop("graphs"))
            graphs += list(t5_step.STEP_FILES)
    say(f"  fp32 ONNX ({info['exporter']}, opset {info['opset']}) in {time.perf_counter() - t0:.1f}s")
    if not direct:
        _copy_side_files(fp32_dir, stage)
        t0 = time.perf_counter()
        if precision == "fp16":
            recipe = "t5" if info["family"] in ox.SEQ2SEQ_FAMILIES else None
            stats = {g: qz.to_fp16(fp32_dir / g, stage / g, keep_fp32=recipe) for g in graphs}
            info["fp16"] = {"converter": "onnxruntime.transformers.float16 (keep_io_types=True)",
                            "kept_fp32": "T5 wo / residual adds / RMS norms" if recipe else "none", "graphs": stats}
        elif variant.startswith("int8-dynamic"):
            stats = {g: qz.int8_dynamic(fp32_dir / g, stage / g, fused=fuse and kind == "seq-cls") for g in graphs}
            info["quantization"] = {"scheme": "dynamic", "graphs": stats}
        elif variant == "int8-static":
            feeds = _calibration_feeds(fp32_dir, graphs[0], calib, max_length)
            stats = {g: qz.int8_static_cpu(fp32_dir / g, stage / g, feeds) for g in graphs}
            info["quantization"] = {"scheme": "static", "calibration_pairs": len(calib),
                                    "calibration_source": "sample-tuning (held-out tuning slice)", "graphs": stats}
        else:
            feeds = _calibration_feeds(fp32_dir, graphs[0], calib, max_length)
            stats = {g: qz.int8_static_qdq(fp32_dir / g, stage / g, feeds) for g in graphs}
            info["quantization"] = {"scheme": "static-qdq", "calibration_pairs": len(calib), "graphs": stats}
        say(f"  {variant} conversion in {time.perf_counter() - t0:.1f}s")
        info["graphs"] = {g: ox.graph_io(stage / g) for g in graphs}
    if format == "tensorrt":
        t0 = time.perf_counter()
        info["tensorrt"] = trt_export.build_for_export(stage, graphs[0], precision, calib or val_pairs, max_length, max_batch)
        say(f"  TensorRT engine in {time.perf_counter() - t0:.1f}s")
    return info


def _run_validation(folder: Path, kind: str, format: str, src: str, pairs: Sequence[Pair], device: str,
                    max_length: int, pairs_src: str) -> dict[str, Any]:
    try:
        if format == "tensorrt":
            figs = val.validate_plan(folder, src, pairs, device, max_length)
        elif kind == "seq-cls":
            figs = _validate_on(val.validate_classifier, folder, src, pairs, device, max_length)
        elif kind == "mlm":
            figs = _validate_on(val.validate_masked_lm, folder, src, pairs, device, max_length)
        else:
            figs = _validate_on(val.validate_seq2seq, folder, src, pairs, device, max_length)
    except (ExportError, EngineUnavailable):
        raise
    except Exception as e:
        raise ExportError(f"validation could not run: {first_line(e)}") from e
    figs["pairs_source"] = pairs_src
    figs["max_length"] = max_length
    return figs


def _validate_on(fn: Any, folder: Path, src: str, pairs: Sequence[Pair], device: str, max_length: int) -> dict[str, Any]:
    """Validate on the target device when this machine can run it, else on the CPU (recorded)."""
    if device != "cpu":
        try:
            return fn(folder, src, pairs, device=device, max_length=max_length)
        except EngineUnavailable as e:
            figs = fn(folder, src, pairs, device="cpu", max_length=max_length)
            figs["note"] = f"validated on the CPU provider: {first_line(e)}"
            return figs
    return fn(folder, src, pairs, device="cpu", max_length=max_length)


# the engines that export on first use (ort, tensorrt) build through this function (engines.artifacts)
provide_builder(export_model)
