"""``breaknli-fast export``: export a model to ONNX / TensorRT, validate it, cache it.

The lead registers it in ``cli.py`` as ``app.command("export")(export)``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import typer

from breaknli_fast.console import out_path


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f} %" if pct else f"{v:.3g}"
    return str(v)


def _bound(sign: str, limit: Any, pct: bool = False) -> str:
    """The tolerance cell of a check: ``≤ 0.001``, ``≥ 90.00 %``, or ``report only`` without a limit."""
    return f"{sign} {_fmt(limit, pct=pct)}" if limit is not None else "report only"


def validation_table(result: Any) -> Any:
    """A rich table of an export's validation figures against their tolerances."""
    from rich.table import Table

    v = result.validation or {}
    tol = v.get("tolerances") or {}
    t = Table(title=f"validation vs PyTorch fp32 ({v.get('n', 0)} pairs, {v.get('device', '?')})", show_lines=False)
    t.add_column("check")
    t.add_column("value", justify="right")
    t.add_column("tolerance", justify="right")
    t.add_row("max |Δ logit|", _fmt(v.get("max_abs_logit")), _bound("≤", tol.get("max_abs_logit")))
    t.add_row("mean |Δ logit|", _fmt(v.get("mean_abs_logit")), "report only")
    t.add_row("label agreement", _fmt(v.get("agreement"), pct=True), _bound("≥", tol.get("min_agreement"), pct=True))
    gen = v.get("generation")
    if gen:
        t.add_row(f"greedy token agreement ({gen.get('prompts')} prompts)", _fmt(gen.get("token_agreement"), pct=True),
                  _bound("≥", tol.get("min_token_agreement"), pct=True))
        t.add_row("identical greedy sequences", f"{gen.get('identical_sequences')}/{gen.get('prompts')}", "report only")
    t.add_row("non-finite outputs", _fmt(v.get("nonfinite")), f"≤ {_fmt(tol.get('max_nonfinite'))}")
    step = v.get("step_graphs")
    if step:  # the ort engine's sampling graphs, judged with the same tolerances
        t.add_row(f"step graphs: max |Δ top-{step.get('k')} logit|", _fmt(step.get("max_abs_top_logit")),
                  _bound("≤", tol.get("max_abs_logit")))
        t.add_row(f"step graphs: top-{step.get('k')} ids identical", _fmt(step.get("top_ids_identical"), pct=True),
                  "report only")
        t.add_row(f"step graphs: greedy token agreement ({step.get('prompts')} prompts)",
                  _fmt(step.get("token_agreement"), pct=True), _bound("≥", tol.get("min_token_agreement"), pct=True))
        t.add_row("step graphs: non-finite outputs", _fmt(step.get("nonfinite")), f"≤ {_fmt(tol.get('max_nonfinite'))}")
    t.add_row("result", "[green]passed[/]" if v.get("passed") else "[red]failed[/]", "")
    return t


def _load_pairs(name_or_path: str, limit: int) -> list[tuple[str, str]]:
    from breaknli_fast.data.loaders import load_examples

    data = load_examples(name_or_path, limit=limit)
    pairs = [(e.premise, e.hypothesis) for e in data.examples]
    if not pairs:
        raise ValueError(f"no usable premise/hypothesis pairs in {name_or_path!r}")
    return pairs


def export(
    model: str = typer.Option(..., "--model", "-m", help="mini-nli / mini-t5, a local model folder or a hub id"),
    format: str = typer.Option("onnx", "--format", help="the export format of a registered backend (onnx for the "
                               "ort engine; `breaknli-fast env` lists every backend's formats; a backend is imported "
                               "only when used)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32, fp16, bf16 or int8 (which ones a format "
                                  "exports: its backend's declaration; a precision it does not is one line)."),
    device: str = typer.Option("cpu", "--device", help="target device: cpu (int8 = dynamic) or cuda (int8 = static QDQ)"),
    calibration_data: Optional[str] = typer.Option(
        None, "--calibration-data", help="dataset name (sample, snli, mnli, ...) or file of pairs for calibration/validation"),
    calibration_size: int = typer.Option(256, "--calibration-size", min=1, help="pairs used to calibrate static int8"),
    validation_size: int = typer.Option(64, "--validation-size", min=1, help="pairs compared with PyTorch fp32"),
    out: Optional[Path] = typer.Option(None, "--out", parser=out_path, metavar="DIR",
                                       help="export folder (default: the cache, $BREAKNLI_FAST_CACHE)"),
    force: bool = typer.Option(False, "--force", help="rebuild even when a matching export is cached"),
    no_validate: bool = typer.Option(False, "--no-validate", help="skip the comparison with PyTorch fp32"),
    max_abs_logit: Optional[float] = typer.Option(None, "--max-abs-logit", help="tolerance: max |Δ logit|"),
    min_agreement: Optional[float] = typer.Option(None, "--min-agreement", help="tolerance: label agreement, %"),
    min_token_agreement: Optional[float] = typer.Option(
        None, "--min-token-agreement", help="tolerance: greedy token agreement of generators, %"),
    max_length: int = typer.Option(256, "--max-length", help="maximum tokens of a pair"),
) -> None:
    """Export a model to ONNX (fp32/fp16/int8), TensorRT or CTranslate2, validate it against PyTorch fp32, and
    cache it."""
    from breaknli_fast.console import console as out_console
    from breaknli_fast.console import user_errors
    from breaknli_fast.errors import check_writable_dir
    from breaknli_fast.export.errors import ExportError, ExportValidationError

    with user_errors(wrap_unexpected=True):
        try:
            from breaknli_fast.export import export_model

            if out is not None:  # checked here: the cache's own check would name the cache
                check_writable_dir(out, "the export folder")
            pairs = None
            if calibration_data:
                pairs = _load_pairs(calibration_data, calibration_size + validation_size)
            tol = {k: v for k, v in (("max_abs_logit", max_abs_logit), ("min_agreement", min_agreement),
                                     ("min_token_agreement", min_token_agreement)) if v is not None}
            result = export_model(model, format=format, precision=precision, out_dir=out, calibration_pairs=pairs,
                                  calibration_size=calibration_size, force=force, validate=not no_validate,
                                  tolerances=tol or None, progress=True, device=device, validation_size=validation_size,
                                  max_length=max_length)
        except ExportValidationError as e:  # the figures first, then the one-line error
            if e.validation:
                out_console.print(validation_table(SimpleNamespace(validation=e.validation)))
            raise
        except OSError as e:  # an --out folder that cannot be written, a full disk: one line
            raise ExportError(f"cannot write the export: {e.strerror or e}"
                              + (f" ({e.filename})" if getattr(e, "filename", None) else "")) from None
    if result.validation and not result.validation.get("skipped"):
        out_console.print(validation_table(result))
    state = "reused" if result.reused else "exported"
    out_console.print(f"{state}: {result.path}", markup=False)
