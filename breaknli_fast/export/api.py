"""``export_model``: one export of any format, validated against the torch fp32 reference and cached.

What every format shares lives here: the model's resolution and kind, the length cap, the calibration and
validation pairs, the cache key, the lock, the staging folder, the judging of the validation figures against the
tolerances, and the manifest. What a format does is its backend's exporter (the declared ``exporter`` module of
the backend whose ``formats`` holds it, found through :mod:`breaknli_fast.engines.registry`):

* ``variant(kind, precision, device, fuse, quantization) -> str``: the recipe's name (``fp32``,
  ``int8-dynamic``, ``fp16``, ...), or :class:`UnsupportedModelError`; ``calibrated(variant) -> bool``;
* ``require(kind)``: its libraries, or a one-line :class:`~breaknli_fast.engines.backend.EngineUnavailable`;
* ``cache_key(kind, precision, variant, family, device, max_length, max_batch) -> dict``: what else makes an
  export reusable (library versions, graph versions, the GPU);
* ``build(src, kind, precision, variant, stage, calib, val_pairs, device, max_length, max_batch, say) -> dict``:
  writes the export into ``stage`` and returns what the manifest records;
* ``validate(folder, kind, src, pairs, device, max_length, precision=, label_map=) -> dict``: the figures against
  the reference, most of them through the engine contract (:mod:`breaknli_fast.export.validate`), judged against
  :data:`~breaknli_fast.export.validate.DEFAULT_TOLERANCES` (or the exporter's ``default_tolerances(kind,
  precision)``) with the caller's overrides.

A backend's loader calls :func:`export_model` on first use; the ``export`` command calls it too. Nothing here
imports a backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import random_weights, registry
from breaknli_fast.engines.model_info import (ModelLoadError, effective_max_length, is_masked_lm, load_config,
                                              model_fingerprint, model_kind, resolve_model)
import breaknli_fast.export.manifest as mf
import breaknli_fast.export.validate as val
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError, first_line
from breaknli_fast.export.options import (CALIBRATION_SIZE, EXPORT_OPTS, VALIDATION_SIZE, ExportOptions,  # noqa: F401
                                          ExportResult)

TASKS = ("mlm",)  # roles exported only when asked (the kind of the other models follows from their config)
Pair = tuple[str, str]


def formats() -> list[str]:
    """The export formats of the registered backends (``onnx``, ``tensorrt``, ``ct2``)."""
    return registry.export_formats()


def exporter(format: str) -> Any:
    """The exporter module of the backend that writes ``format``."""
    decl = registry.backend_for_format(format)
    if decl is None or decl.exporter is None:
        raise UnsupportedModelError(f"unknown export format {format!r}; choose one of {', '.join(formats())}")
    return importlib.import_module(decl.exporter)


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
        val_pairs = pairs[calibration_size:calibration_size + validation_size]
    else:
        val_pairs = pairs[:validation_size]
    return calib, val_pairs


def _pairs_digest(pairs: Sequence[Pair]) -> str:
    return hashlib.sha256(json.dumps(list(pairs)).encode()).hexdigest()[:16]


def _pairs(calibration_pairs: Iterable[Any] | None, calibrated: bool, calibration_size: int,
           validation_size: int) -> tuple[list[Pair], list[Pair], str]:
    """(calibration pairs, validation pairs, where the validation pairs come from)."""
    n_calib = calibration_size if calibrated else 0
    if calibration_pairs is not None:
        all_pairs = as_pairs(calibration_pairs)
        if not all_pairs:
            raise ExportError("no calibration/validation pairs were given")
        calib, val_pairs = split_pairs(all_pairs, n_calib, validation_size)
        return calib, val_pairs, "given"
    if calibrated:  # calibrated on the tuning slice, so that the evaluation slice stays unseen by the export
        calib, _ = tuning_pairs(n_calib)
        val_pairs, src = default_pairs(validation_size)
        return calib, val_pairs, src
    all_pairs, src = default_pairs(validation_size)
    return [], all_pairs[:validation_size], src


def _check_sizes(calibration_size: int, validation_size: int) -> None:
    for name, v in (("calibration_size", calibration_size), ("validation_size", validation_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ExportError(f"{name} must be a whole number of pairs, at least 1 (got {v!r})")


_timers: list[list[float]] = []


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """The seconds of every :func:`export_model` call made while the block runs (building an export, or checking
    a cached one): what an engine that exports on first use spends before it can load (bench's cold start)."""
    spent: list[float] = []
    _timers.append(spent)
    try:
        yield spent
    finally:
        _timers.remove(spent)


def export_model(model: str, *args: Any, **kwargs: Any) -> ExportResult:
    """:func:`build_export` (see there), timed for :func:`timed`."""
    t0 = time.perf_counter()
    try:
        return build_export(model, *args, **kwargs)
    finally:
        for spent in _timers:
            spent.append(time.perf_counter() - t0)


def build_export(
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
    label_map: Mapping[str, str] | None = None,
) -> ExportResult:
    """Export ``model`` (a shipped mini-model name, a local folder or a hub id) in ``format`` and validate it.

    ``format="onnx"`` (the ort backend): fp32 graph(s), fp16 conversion, or int8 (dynamic quantization for
    ``device="cpu"``, static symmetric QDQ for ``cuda``). ``format="tensorrt"``: a serialized TensorRT engine
    (needs TensorRT 10 and a CUDA GPU). ``format="ct2"``: a CTranslate2 conversion of a T5 generator. The export
    folder (``out_dir``, else the cache) holds the graphs, the tokenizer and ``manifest.json``; an export whose
    manifest matches is reused unless ``force``. Validation compares with the torch fp32 reference on
    ``validation_size`` pairs and raises :class:`ExportValidationError` beyond ``tolerances``; ``label_map``
    names the classifier's labels where its config does not (as the engines' ``label_map`` option).

    ``max_length`` (tokens of a pair or prompt, for the traced inputs, the validation, the calibration and a
    TensorRT profile) is capped at the model's own limit
    (:func:`~breaknli_fast.engines.model_info.effective_max_length`).

    ``task="mlm"``: a masked language model for the mask-filler role (ONNX only), validated by top-1 and top-k
    agreement of the suggestions with torch fp32 on masked pairs.
    """
    t_start = time.perf_counter()
    console = _console(progress)

    def say(msg: str, style: str | None = None) -> None:
        if console is not None:
            console.print(msg, style=style, markup=False)

    if task is not None and task not in TASKS:
        raise UnsupportedModelError(f"unknown export task {task!r}; choose one of {', '.join(TASKS)}")
    ex = exporter(format)
    _check_sizes(calibration_size, validation_size)
    val.check_tolerance_values(tolerances)  # before any work: a tolerance that would judge nothing is refused
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ExportError(f"max_length must be a whole number of tokens, at least 1, not {max_length!r}")
    try:
        dev = registry.device_kind(device)
    except registry.PrecisionError as e:
        raise ExportError(str(e)) from None
    device = ex.target_device(device) if hasattr(ex, "target_device") else device
    dev = device.split(":")[0]
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
    if precision not in ex.PRECISIONS:
        ways = [f"--format {f}" for f in registry.export_formats()
                if precision in getattr(exporter(f), "PRECISIONS", ())]
        ways += ["the torch engine, without an export"] if precision == "bf16" else []
        raise UnsupportedModelError(f"{format} exports are {', '.join(ex.PRECISIONS)}, not {precision!r}"
                                    + (f" ({precision}: {', or '.join(ways)})" if ways else ""))
    max_length, limits = _capped_max_length(resolved, config, max_length)
    fuse = bool(fuse) if not isinstance(fuse, str) else fuse.lower() in ("1", "true", "yes")
    variant = ex.variant(kind, precision, dev, fuse, quantization)
    ex.require(kind)  # fail fast, one line, before any work
    defaults = ex.default_tolerances(kind, precision) if hasattr(ex, "default_tolerances") else None
    tol = val.tolerances_for(kind, precision, tolerances, defaults)
    calib, val_pairs, pairs_src = _pairs(calibration_pairs, ex.calibrated(variant), calibration_size, validation_size)

    fingerprint = model_fingerprint(model)
    key: dict[str, Any] = {
        "schema": mf.SCHEMA,
        "format": format,
        "precision": precision,
        "variant": variant,
        "kind": kind,
        "source": fingerprint.get("files_sha256") or fingerprint.get("revision"),
        "source_id": resolved,
        **ex.cache_key(kind, precision, variant, family, device, max_length, max_batch),
    }
    if ex.calibrated(variant):
        key["calibration"] = {"pairs": len(calib), "sha256": _pairs_digest(calib)}
    target = Path(out_dir).expanduser() if out_dir else mf.export_dir_for(model, resolved, format, precision, variant, cache_dir)

    def validation(folder: Path) -> dict[str, Any]:
        try:
            figs = ex.validate(folder, kind, resolved, val_pairs, device, max_length, precision=precision,
                              label_map=label_map)
        except (ExportError, registry.EngineUnavailable):
            raise
        except Exception as e:
            raise ExportError(f"validation could not run: {first_line(e)}") from e
        figs["pairs_source"] = pairs_src
        figs["max_length"] = max_length
        return figs

    with mf.locked(mf.lock_path(target, cache_dir)):
        old = mf.read_manifest(target) if target.exists() else None
        why = "forced" if force else (mf.mismatch(old, key, target) if target.exists() else "not exported yet")
        if why is None and old is not None:
            result = ExportResult(target, old, reused=True)
            say(f"reusing {target}", "green")
            if validate:
                figs = old.get("validation")
                if not figs or figs.get("skipped") or figs.get("label_map") != _map_record(label_map):
                    say("validating the cached export against the PyTorch fp32 model ...")
                    figs = validation(target)
                    figs["label_map"] = _map_record(label_map)
                    old["validation"] = figs
                    mf.write_manifest(target, old)
                figs["tolerances"] = tol
                _judge(figs, tol, model, format, precision)
            result.seconds = time.perf_counter() - t_start
            return result
        if target.exists() and why:
            say(f"rebuilding {target.name}: {why}")
        say(f"exporting {model} ({family}, {kind}) → {format} {precision} ({variant})", "bold")
        with mf.staging_dir(target) as stage:
            info = ex.build(resolved, kind, precision, variant, stage, calib, val_pairs, device, max_length,
                            max_batch, say)
            figs: dict[str, Any] = {"skipped": True}
            if validate:
                say(f"validating on {len(val_pairs)} pairs against the PyTorch fp32 model ...")
                figs = validation(stage)
                figs["label_map"] = _map_record(label_map)
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
                "libraries": key.get("libraries"),
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


def _map_record(label_map: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(label_map) if label_map else None


def _capped_max_length(src: str, config: Any, max_length: int) -> tuple[int, dict[str, Any]]:
    """``max_length`` capped at the model's input limit (its position table, its tokenizer's
    ``model_max_length``), with the record of how."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(src)
    except (OSError, ValueError, TypeError) as e:
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
