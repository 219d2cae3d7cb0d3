"""The :class:`Exporter` base class: one export of any format, in named steps, each a method.

:meth:`Exporter.export` runs them in order, under the export's lock:

1. :meth:`~Exporter.resolve`: the request checked, the model resolved (its kind, family and length limit), the
   format's recipe (``variant``), the tolerances and the calibration / validation pairs: an :class:`ExportPlan`;
2. :meth:`~Exporter.cache_key`: what makes an export reusable (the model's files, the recipe, the calibration
   pairs, and the format's own :meth:`~Exporter.key_parts`);
3. :meth:`~Exporter.reuse`: a cached export whose manifest matches the key is reused (its recorded figures judged
   against the present tolerances; an unvalidated one validated first), else None;
4. :meth:`~Exporter.build`: the format's files written into a staging folder (:meth:`~Exporter.write_files`);
5. :meth:`~Exporter.measure` and :meth:`~Exporter.judge`: the export against the torch fp32 reference
   (:meth:`~Exporter.compare`), judged against the tolerances; over them, :class:`ExportValidationError` and
   nothing is installed;
6. :meth:`~Exporter.write_manifest`: the manifest, written last, before the staging folder is renamed into place.

A backend's exporter subclasses it (declared as ``exporter="module:Class"`` in its ``BACKEND``) and overrides the
format's parts: :meth:`~Exporter.write_files` and :meth:`~Exporter.compare` (abstract), and, where the defaults do
not fit, :meth:`~Exporter.variant`, :meth:`~Exporter.calibrated`, :meth:`~Exporter.require`,
:meth:`~Exporter.target_device`, :meth:`~Exporter.default_tolerances` and :meth:`~Exporter.key_parts`.
"""

from __future__ import annotations

import abc
import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import breaknli_fast.export.manifest as mf
import breaknli_fast.export.validate as val
from breaknli_fast.engines import registry
from breaknli_fast.engines.model_info import (ModelLoadError, effective_max_length, is_masked_lm, load_config,
                                              model_fingerprint, model_kind, resolve_model)
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError, first_line
from breaknli_fast.export.options import CALIBRATION_SIZE, VALIDATION_SIZE, ExportResult
from breaknli_fast.export.pairs import Pair, export_pairs, pairs_digest

Say = Callable[..., None]


@dataclass
class ExportRequest:
    """What was asked of :func:`~breaknli_fast.export.api.export_model` (its arguments, unchecked)."""

    model: str
    format: str = "onnx"
    precision: str = "fp32"
    out_dir: str | Path | None = None
    calibration_pairs: Iterable[Any] | None = None
    calibration_size: int = CALIBRATION_SIZE
    force: bool = False
    validate: bool = True
    tolerances: Mapping[str, Any] | None = None
    progress: bool = True
    device: str = "cpu"
    validation_size: int = VALIDATION_SIZE
    cache_dir: str | Path | None = None
    max_length: int = 256
    max_batch: int = 64
    task: str | None = None
    fuse: bool = False
    quantization: str | None = None
    label_map: Mapping[str, str] | None = None
    started: float = field(default_factory=time.perf_counter)  # what build_seconds and the result's seconds count from


@dataclass
class ExportPlan:
    """The request resolved (:meth:`Exporter.resolve`): what the other steps and a format's hooks read."""

    request: ExportRequest
    say: Say  # progress lines (a no-op without ``progress``): ``say(message, style=None)``
    src: str  # the resolved model: a local folder or a hub id
    config: Any
    kind: str  # seq-cls, seq2seq or mlm
    family: str  # the config's model_type
    device: str  # the target device (after the format's target_device)
    max_length: int  # capped at the model's own limit
    limits: dict[str, Any]  # how (model_max_length, model_max_length_from)
    variant: str  # the format's recipe: fp32, int8-dynamic, ir-bf16, ...
    tolerances: dict[str, Any]
    calib: list[Pair]
    val_pairs: list[Pair]
    pairs_source: str
    fingerprint: dict[str, Any]
    target: Path  # the export folder

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def format(self) -> str:
        return self.request.format

    @property
    def precision(self) -> str:
        return self.request.precision

    @property
    def max_batch(self) -> int:
        return self.request.max_batch

    @property
    def label_map(self) -> Mapping[str, str] | None:
        return self.request.label_map

    @property
    def label_record(self) -> dict[str, str] | None:
        """The ``label_map`` as the validation figures record it."""
        return dict(self.label_map) if self.label_map else None


def formats() -> list[str]:
    """The export formats of the registered backends (``onnx``, ``tensorrt``, ``ct2``, ...)."""
    return registry.export_formats()


def exporter(format: str) -> "Exporter":
    """The exporter of the backend that writes ``format``: its declaration's ``exporter="module:Class"``."""
    decl = registry.backend_for_format(format)
    if decl is None or decl.exporter is None:
        raise UnsupportedModelError(f"unknown export format {format!r}; choose one of {', '.join(formats())}")
    module, _, name = decl.exporter.partition(":")
    cls = vars(importlib.import_module(module)).get(name) if name else None
    if not (isinstance(cls, type) and issubclass(cls, Exporter)):
        raise ExportError(f"the {decl.name} backend declares exporter={decl.exporter!r}: not 'module:Class' of a "
                          "breaknli_fast.export.exporter.Exporter subclass")
    return cls()


def _console_say(progress: bool) -> Say:
    console = None
    if progress:
        from rich.console import Console

        console = Console(stderr=True, highlight=False)

    def say(msg: str, style: str | None = None) -> None:
        if console is not None:
            console.print(msg, style=style, markup=False)

    return say


def _check_request(r: ExportRequest) -> None:
    """The request's numbers and device, before any work (a tolerance that would judge nothing is refused)."""
    for name, v in (("calibration_size", r.calibration_size), ("validation_size", r.validation_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ExportError(f"{name} must be a whole number of pairs, at least 1 (got {v!r})")
    val.check_tolerance_values(r.tolerances)
    if isinstance(r.max_length, bool) or not isinstance(r.max_length, int) or r.max_length < 1:
        raise ExportError(f"max_length must be a whole number of tokens, at least 1, not {r.max_length!r}")
    try:
        registry.device_kind(r.device)
    except registry.PrecisionError as e:
        raise ExportError(str(e)) from None


def _model_kind(model: str, task: str | None) -> tuple[str, Any, str]:
    """(the resolved model, its config, its kind)."""
    try:
        resolved = resolve_model(model)
        config = load_config(model)
        if task == "mlm":
            if not is_masked_lm(config):
                raise UnsupportedModelError(f"{model!r} is not a masked language model (…ForMaskedLM)")
            return resolved, config, "mlm"
        return resolved, config, model_kind(config)
    except ModelLoadError as e:
        raise UnsupportedModelError(str(e)) from None


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


class Exporter(abc.ABC):
    """One format's exporter: the shared steps (:meth:`export` runs them) and the format's hooks."""

    FORMAT: str = ""
    PRECISIONS: tuple[str, ...] = ("fp32",)  # what it exports; another precision is refused in one line
    LIBRARIES: tuple[str, ...] = ("torch", "transformers")  # what builds it: their versions are in the cache key

    # -- the format's hooks: override these ----------------------------------------------------------------------

    def target_device(self, device: str) -> str:
        """The device the export is built for (a TensorRT engine: a GPU, whatever was named)."""
        return device

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        """The recipe's name (part of the folder name and the key), or :class:`UnsupportedModelError`."""
        return precision

    def calibrated(self, variant: str) -> bool:
        """Whether ``variant`` is calibrated on pairs (their digest joins the cache key)."""
        return False

    def require(self, kind: str) -> None:
        """The libraries it needs, or a one-line :class:`~breaknli_fast.engines.backend.EngineUnavailable`."""

    def default_tolerances(self, kind: str, precision: str) -> dict[str, Any] | None:
        """Its own tolerances (None: :data:`~breaknli_fast.export.validate.DEFAULT_TOLERANCES`)."""
        return None

    def key_parts(self, plan: ExportPlan) -> dict[str, Any]:
        """What else makes an export reusable: the versions of :attr:`LIBRARIES`, a graph version, the GPU."""
        return {"libraries": mf.library_versions(self.LIBRARIES)}

    @abc.abstractmethod
    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """Write the export into ``stage``; what the manifest records of it."""

    @abc.abstractmethod
    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        """The figures of the export in ``folder`` against the torch fp32 reference on ``plan.val_pairs``
        (through the engine contract: :mod:`breaknli_fast.export.validate`)."""

    # -- the steps -----------------------------------------------------------------------------------------------

    def export(self, request: ExportRequest) -> ExportResult:
        """resolve → cache key → reuse, or build → measure and judge → manifest, then install."""
        plan = self.resolve(request)
        key = self.cache_key(plan)
        with mf.locked(mf.lock_path(plan.target, request.cache_dir)):
            cached = self.reuse(plan, key)
            if cached is not None:
                return cached
            with mf.staging_dir(plan.target) as stage:
                info = self.build(plan, stage)
                figs: dict[str, Any] = {"skipped": True}
                if request.validate:
                    plan.say(f"validating on {len(plan.val_pairs)} pairs against the PyTorch fp32 model ...")
                    figs = self.measure(plan, stage)
                    self.judge(plan, figs)
                manifest = self.write_manifest(plan, key, stage, info, figs)
                mf.install(stage, plan.target)
        plan.say(f"exported {plan.target} in {time.perf_counter() - request.started:.1f}s", "green")
        return ExportResult(plan.target, manifest, reused=False, seconds=time.perf_counter() - request.started)

    def resolve(self, request: ExportRequest) -> ExportPlan:
        """The request checked and resolved, before any work: the model, its kind and length limit, the recipe,
        the libraries (:meth:`require`), the tolerances and the pairs."""
        r = request
        say = _console_say(r.progress)
        _check_request(r)
        device = self.target_device(r.device)
        src, config, kind = _model_kind(r.model, r.task)
        self.check_precision(r.precision, r.format)
        max_length, limits = _capped_max_length(src, config, r.max_length)
        fuse = bool(r.fuse) if not isinstance(r.fuse, str) else r.fuse.lower() in ("1", "true", "yes")
        variant = self.variant(kind, r.precision, device.split(":")[0], fuse, r.quantization)
        self.require(kind)  # fail fast, one line, before any work
        tol = val.tolerances_for(kind, r.precision, r.tolerances, self.default_tolerances(kind, r.precision))
        calib, val_pairs, pairs_src = export_pairs(r.calibration_pairs, self.calibrated(variant), r.calibration_size,
                                                   r.validation_size)
        fingerprint = model_fingerprint(r.model)
        target = (Path(r.out_dir).expanduser() if r.out_dir
                  else mf.export_dir_for(r.model, src, r.format, r.precision, variant, r.cache_dir))
        return ExportPlan(request=r, say=say, src=src, config=config, kind=kind,
                          family=getattr(config, "model_type", "?"), device=device, max_length=max_length,
                          limits=limits, variant=variant, tolerances=tol, calib=calib, val_pairs=val_pairs,
                          pairs_source=pairs_src, fingerprint=fingerprint, target=target)

    def check_precision(self, precision: str, format: str) -> None:
        """Refuse a precision this format does not export, naming the formats (or engine) that do."""
        if precision in self.PRECISIONS:
            return
        ways = [f"--format {f}" for f in formats() if precision in exporter(f).PRECISIONS]
        ways += ["the torch engine, without an export"] if precision == "bf16" else []
        raise UnsupportedModelError(f"{format} exports are {', '.join(self.PRECISIONS)}, not {precision!r}"
                                    + (f" ({precision}: {', or '.join(ways)})" if ways else ""))

    def cache_key(self, plan: ExportPlan) -> dict[str, Any]:
        """What a cached export's manifest must record to be reused."""
        fp = plan.fingerprint
        key: dict[str, Any] = {
            "schema": mf.SCHEMA,
            "format": plan.format,
            "precision": plan.precision,
            "variant": plan.variant,
            "kind": plan.kind,
            "source": fp.get("files_sha256") or fp.get("revision"),
            "source_id": plan.src,
            **self.key_parts(plan),
        }
        if self.calibrated(plan.variant):
            key["calibration"] = {"pairs": len(plan.calib), "sha256": pairs_digest(plan.calib)}
        return key

    def reuse(self, plan: ExportPlan, key: Mapping[str, Any]) -> ExportResult | None:
        """The cached export at ``plan.target`` when its manifest matches ``key`` (and not ``force``), its
        figures judged (an unvalidated one validated first); else None, saying why it is rebuilt."""
        target = plan.target
        old = mf.read_manifest(target) if target.exists() else None
        why = "forced" if plan.request.force else (
            mf.mismatch(old, dict(key), target) if target.exists() else "not exported yet")
        if why is None and old is not None:
            result = ExportResult(target, old, reused=True)
            plan.say(f"reusing {target}", "green")
            if plan.request.validate:
                self._judge_cached(plan, old)
            result.seconds = time.perf_counter() - plan.request.started
            return result
        if target.exists() and why:
            plan.say(f"rebuilding {target.name}: {why}")
        return None

    def _judge_cached(self, plan: ExportPlan, manifest: dict[str, Any]) -> None:
        figs = manifest.get("validation")
        if not figs or figs.get("skipped") or figs.get("label_map") != plan.label_record:
            plan.say("validating the cached export against the PyTorch fp32 model ...")
            figs = self.measure(plan, plan.target)
            manifest["validation"] = figs
            mf.write_manifest(plan.target, manifest)
        self.judge(plan, figs)

    def build(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """The format's files in ``stage`` (:meth:`write_files`); what the manifest records of them."""
        plan.say(f"exporting {plan.model} ({plan.family}, {plan.kind}) → {plan.format} {plan.precision} "
                 f"({plan.variant})", "bold")
        return self.write_files(plan, stage)

    def measure(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        """The validation figures of the export in ``folder`` (:meth:`compare`), with what they were measured on;
        a failure to measure is one :class:`ExportError` line."""
        try:
            figs = self.compare(plan, folder)
        except (ExportError, registry.EngineUnavailable):
            raise
        except Exception as e:
            raise ExportError(f"validation could not run: {first_line(e)}") from e
        figs["pairs_source"] = plan.pairs_source
        figs["max_length"] = plan.max_length
        figs["label_map"] = plan.label_record
        return figs

    def judge(self, plan: ExportPlan, figs: dict[str, Any]) -> None:
        """``figs`` against ``plan.tolerances`` (recorded in them, with the verdict); over them,
        :class:`ExportValidationError` naming the failed checks."""
        figs["tolerances"] = plan.tolerances
        failures = val.check(figs, plan.tolerances)
        figs["passed"] = not failures
        figs["failures"] = failures
        if failures:
            # a target this machine cannot run was judged on the CPU provider instead: the line says so, since that
            # is not the device the export is meant for (--no-validate builds it without judging it here)
            where = (f" ({figs['note']}, not on {plan.device}, the export's target; --no-validate builds it without "
                     "this check)" if figs.get("note") else "")
            raise ExportValidationError(f"{plan.model} {plan.format} {plan.precision} failed validation against "
                                        f"PyTorch fp32: {'; '.join(failures)}{where}", figs)

    def write_manifest(self, plan: ExportPlan, key: Mapping[str, Any], stage: Path, info: Mapping[str, Any],
                       figs: dict[str, Any]) -> dict[str, Any]:
        """``manifest.json`` in ``stage`` (the last file written there); the manifest."""
        manifest = {
            "schema": mf.SCHEMA,
            "created": mf.now_iso(),
            "build_seconds": round(time.perf_counter() - plan.request.started, 2),
            "model": plan.model,
            "source": plan.fingerprint,
            "kind": plan.kind,
            "family": plan.family,
            "format": plan.format,
            "precision": plan.precision,
            "variant": plan.variant,
            **info,
            "model_max_length": plan.limits["model_max_length"],
            "model_max_length_from": plan.limits["model_max_length_from"],
            "libraries": key.get("libraries"),
            "files": mf.files_manifest(stage),
            "validation": figs,
            "key": dict(key),
        }
        mf.write_manifest(stage, manifest)
        return manifest
