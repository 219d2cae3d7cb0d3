"""The targets at the sizes users run (BENCHMARKS.md section ``1/targets`` of the real-shapes measurement): per target
and shape, the best breaknli-fast engine's ratio from the real-shape files and the real-shape loop's bench files, and
beside it the best *faithful* engine -- one that keeps the reference's answer (:func:`faithful`: a generator
token-identical to torch's, a classifier at fp32 or at the :data:`TIER` % tier, not shown to differ on BreakNLI and not
batch-dependent) -- judged from the trained-model result files."""

from __future__ import annotations

from typing import Any, Callable

from breaknli_fast.suite.base import Results
from breaknli_fast.suite.format import (DEFAULT_INT8, PER_TENSOR, PROJECT, blank, cpu_short, dig, f, feeds,
                                        not_measured, of_kind, table)
from breaknli_fast.suite.measurements.bench import (is_random, parity_files, probe_of, random_title, shown,
                                                    trained_engine)
from breaknli_fast.suite.result import ResultFile

def real_loop_files(results: Results) -> list[ResultFile]:
    """``bench`` files of the loop at real shapes (``bench-real-loop-*``, random weights)."""
    return [r for r in results if r.kind == "bench" and is_random(r) and feeds("1/targets")(r)]


def real_shape_files(results: Results) -> list[ResultFile]:
    """The real-shape measurements of the targets (the per-stack generator runs have a section of their own)."""
    return [r for r in of_kind("real_shapes")(results) if not feeds("1/gen-stacks")(r)]


# the targets at the sizes users run: (job, what is required, the bar)
REAL_TARGETS = (
    ("generate", "generator tokens/s ≥ 1.2× CTranslate2 int8 (its faster thread setting), K = 20", 1.2),
    ("classify", "classifier pairs/s ≥ 3× torch fp32, ≥ 1,000 pairs", 3.0),
    ("loop", "the loop end to end ≥ 3× torch fp32, K = 20", 3.0),
    ("classify-invariant", "the default batch-invariant int8 classifier ≥ 3× torch fp32 and ≥ 1.0× ONNX Runtime's "
     "per-tensor int8 (batch-dependent) in the same run, ≥ 512 pairs", 3.0),
    ("loop-faithful", "the faithful loop end to end ≥ 2.5× torch fp32, K = 20 (generator token-identical to torch's, "
     "classifier fp32 or at the 99.9 % tier and not shown to differ)", 2.5),
    ("bucket", "the default batch-invariant int8 classifier's largest bucket ≥ 50 % of the int8 ceiling "
     "(in the loop, K = 20)", 0.5),
)
TIER = 99.9  # % of the reference's accuracy a lower-precision classifier keeps to count as faithful


def spec_parts(label: str) -> dict[str, str]:
    """engine, precision and role precisions of an engine label (``ort:fp32:clf.precision=int8``; options that do
    not change the arithmetic, ``validate=`` / ``label=``, dropped)."""
    bare = str(label).replace(PROJECT, "")
    if "/" in bare and bare.startswith(("gen=", "clf=")):  # an engine per role: base is the label, cleaned per role
        return {"engine": bare, "precision": "", "clf": "", "gen": "",
                "base": "/".join(spec_parts(x)["base"] for x in bare.split("/"))}
    parts = [x for x in bare.split(":") if x and not x.startswith(("validate=", "label="))]
    out = {"engine": parts[0] if parts else "", "precision": parts[1] if len(parts) > 1 else "fp32",
           "base": ":".join(parts)}
    opts = dict(x.split("=", 1) for x in parts[2:] if "=" in x)
    out["clf"] = opts.get("clf.precision", out["precision"])
    out["gen"] = opts.get("gen.precision", out["precision"])
    return out


def classifier_labels(sp: dict[str, str]) -> list[str]:
    """Labels under which the trained-model files may hold the same classifier with a generator at fp32: the label
    itself, and the component-split run of the engine at the classifier's precision (``ort:int8 classifier
    only``: that classifier beside the fp32 generator)."""
    return [sp["base"], f"{sp['engine']}:{sp['clf']} classifier only"]


def batch_dependent(results: Results, sp: dict[str, str]) -> str | None:
    """Why the engine's classifier answers depend on the other pairs of its call, or None: measured in the
    batch-invariance file (a pair alone / batched / reversed / chunks of 7 not bit-equal), else known from its
    options (ONNX Runtime's per-tensor dynamic int8)."""
    base = f"{sp['engine']}:{sp['clf']}"
    opts = [x for x in sp["base"].split(":")[2:] if not x.startswith(("clf.precision=", "gen.precision="))]
    name = ":".join([base, *opts])
    for doc in (r for r in results if r.kind == "bench" and feeds("2/batch-invariance")(r)):
        for e in dig(doc, "payload", "engines") or []:
            if getattr(e, "label", None) == name and getattr(e, "batch_invariance", None) is not None:
                b = e.batch_invariance
                diffs = [b.max_abs_logit_diff, b.reversed_max_abs_logit_diff, b.chunked_max_abs_logit_diff]
                if b.labels_changed or any(d for d in diffs if d):
                    return (f"its answers depend on the batch ({b.labels_changed} of {b.pairs} labels change, "
                            f"`{doc.name}`)")
                return None
    if "quantization=dynamic-batch" in opts:
        return "its answers depend on the batch (per-tensor dynamic int8)"
    return None


def contender_spec(doc: ResultFile, contender: str) -> str:
    """A real-shape row's engine spec: its label (``label=NAME`` of the recorded contenders) resolved to the spec
    it names, so that the label does not hide its precision and options."""
    name = contender.replace(PROJECT, "")
    for item in str(dig(doc, "measurement", "args", "contenders") or "").split(","):
        if f"label={name}" in item.split(":"):
            return PROJECT + item
    return contender


def mixed_faithful(results: Results, label: str, role: str | None = None) -> tuple[bool, str] | None:
    """:func:`faithful` of an engine per role (``gen=ort:fp32/clf=openvino:int8``): each role's engine judged alone,
    the BreakNLI file searched under the whole label too; None for a plain label."""
    bare = str(label).replace(PROJECT, "")
    if "/" not in bare or not bare.startswith(("gen=", "clf=")):
        return None
    parts = dict(x.split("=", 1) for x in bare.split("/") if "=" in x)
    why = []
    for r in ("generator", "classifier"):
        spec = parts.get({"generator": "gen", "classifier": "clf"}[r])
        if spec is None or role not in (None, r):
            continue
        ok, because = faithful(results, spec, r, also=[bare] if r == "classifier" else None)
        if not ok:
            return False, because
        why.append(because)
    return True, "; ".join(why)


def faithful(results: Results, label: str, role: str | None = None,
             also: list[str] | None = None) -> tuple[bool, str]:
    """Whether an engine keeps the reference's answer (the issue's "faithful"), and why: its generator is the
    torch, ort or openvino engine at fp32 (token-identical to torch's: tests and the trained-model BreakNLI file); its
    classifier is fp32, or reaches the :data:`TIER` % of torch fp32's accuracy on all 2,724 evaluation pairs
    (probe-accuracy) and is not shown to differ on BreakNLI with all its cells judged together (the trained-model
    BreakNLI file), the same engine label measured there (or, for the classifier, beside an fp32 generator:
    ``gen=ort:fp32/clf=...``; ``also``: more labels to look for); an engine whose answers depend on the batch is not
    (:func:`batch_dependent`). ``role``: judge one role only; an engine per role is judged per role."""
    mixed = mixed_faithful(results, label, role)
    if mixed is not None:
        return mixed
    sp = spec_parts(label)
    why = []
    if role in (None, "generator"):
        if sp["engine"] not in ("torch", "ort", "openvino") or sp["gen"] != "fp32":
            return False, f"generator {sp['engine']} {sp['gen']} (not token-identical)"
        why.append("generator fp32 (token-identical)")
    if role in (None, "classifier"):
        dependent = batch_dependent(results, sp)
        if dependent:
            return False, f"classifier {sp['clf']}: {dependent}"
        if sp["clf"] == "fp32":
            why.append("classifier fp32")
        else:
            acc = trained_engine(results, "accuracy", [sp["base"], f"{sp['engine']}:{sp['clf']}"])
            m = next(iter((dig(acc, "parity", "headline", "metrics") or {}).values()), None) if acc else None
            if blank(m) or not dig(m, "b"):
                return False, f"classifier {sp['clf']}: no trained-model accuracy file for `{sp['base']}`"
            tier = 100.0 * m.a / m.b
            if tier < TIER:
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy (< {TIER} %)"
            alone = f"{sp['engine']}:{sp['clf']} classifier only"
            labels = ([alone, sp["base"]] if role == "classifier" else classifier_labels(sp) if sp["gen"] == "fp32"
                      else [sp["base"]])
            if role == "classifier":
                labels += [*(also or []), *(f"gen={g}:fp32/clf={sp['base']}" for g in ("torch", "ort", "openvino"))]
            brk = trained_engine(results, "breaknli", labels)
            if brk is None:
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy; BreakNLI not measured"
            if shown(brk) == "no":
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy; BreakNLI shown to differ"
            why.append(f"classifier {sp['clf']} at {tier:.2f} % of fp32's accuracy, BreakNLI {shown(brk)} to match "
                       "(not shown to differ)")
    return True, "; ".join(why)


def _contender(r: Any) -> str:
    """A real-shape row's contender (``real_shapes.RealRow``: that module renders its sections with this one's, so its
    rows and payload are read here by their fields)."""
    return str(r.contender if r.contender is not None else "")


def invariant_row(rows: list[dict[str, Any]], doc: ResultFile, ours: list[Any], bar: Any, key: str,
                  faithful_best: tuple[str, float | None, str]) -> None:
    """The default batch-invariant int8 classifier of a real-shape file against torch fp32 and, in the same run,
    ONNX Runtime's per-tensor int8 (met when both bars hold); beside it the file's best faithful classifier, as
    the classify row's."""
    by = {spec_parts(_contender(r).replace(PROJECT, ""))["base"]: r for r in ours}
    by.update({str(dig(r, "label")): r for r in ours if dig(r, "label")})
    mine = next((by[e] for e in DEFAULT_INT8 if e in by), None)
    tensor = next((by[e] for e in PER_TENSOR if e in by), None)
    if mine is None or (dig(doc, "payload", "workload", "pairs") or 0) < 512:
        return
    vs_tensor = getattr(mine, key) / getattr(tensor, key) if tensor else None
    ratio = getattr(mine, key) / getattr(bar, key)
    name = _contender(mine)[len(PROJECT):]
    rows.append({"job": "classify-invariant", "shape": dig(doc, "payload", "shape"), "best": name,
                 "figure": f"{getattr(mine, key):,.0f} pairs/s vs torch:fp32 {getattr(bar, key):,.0f}; "
                           + (f"{vs_tensor:.2f}× the per-tensor int8 ({getattr(tensor, key):,.0f})" if tensor
                              else "per-tensor int8 not in this run"),
                 "ratio": ratio, "met": ratio >= 3.0 and vs_tensor is not None and vs_tensor >= 1.0,
                 "doc": doc, "faithful": faithful_best})


def real_target_rows(results: Results) -> list[dict[str, Any]]:
    """One row per real-shape file: the job, the shape, the best breaknli-fast engine, its figure against the
    target's yardstick, and the file's provenance; beside it the best *faithful* engine (:func:`faithful`) and
    its ratio."""
    rows: list[dict[str, Any]] = []

    def best_faithful(cands: list[Any], name: Callable[[Any], str], ratio: Callable[[Any], float],
                      role: str | None) -> tuple[str, float | None, str]:
        ok = [(c, faithful(results, name(c), role)) for c in cands]
        ok = [(c, why) for c, (yes, why) in ok if yes]
        if not ok:
            return "none", None, ""
        c, why = max(ok, key=lambda t: ratio(t[0]))
        return spec_parts(name(c))["base"], ratio(c), why

    for doc in real_shape_files(results):
        p = doc.payload  # real_shapes.RealShapesPayload
        gen = p.job == "generate"
        key = "tokens_per_s" if gen else "pairs_per_s"
        contenders = [r for r in p.rows or [] if getattr(r, key)]
        ours = [r for r in contenders if _contender(r).startswith(PROJECT)]
        if gen:
            bars = [r for r in contenders if _contender(r).startswith("peer:ct2-int8")]
        else:
            bars = [r for r in contenders if r.contender == PROJECT + "torch:fp32"]
            ours = [r for r in ours if r is not bars[0]] if bars else ours
        if not ours or not bars:
            continue
        best, bar = max(ours, key=lambda r: getattr(r, key)), max(bars, key=lambda r: getattr(r, key))
        unit = "tokens/s" if gen else "pairs/s"
        fb = best_faithful(ours, lambda r: contender_spec(doc, _contender(r)), lambda r: getattr(r, key) / getattr(bar, key),
                           "generator" if gen else "classifier")
        rows.append({"job": p.job, "shape": p.shape, "best": _contender(best)[len(PROJECT):],
                     "figure": f"{getattr(best, key):,.0f} {unit} vs {_contender(bar).replace(PROJECT, '')} "
                               f"{getattr(bar, key):,.0f}",
                     "ratio": getattr(best, key) / getattr(bar, key), "doc": doc, "faithful": fb})
        if not gen:
            invariant_row(rows, doc, ours, bar, key, fb)
    for doc in real_loop_files(results):
        engines = [e for e in dig(doc, "payload", "engines") or [] if e.status == "ok"]
        speed = lambda e: dig(e, "speed", "speedup", "end_to_end")  # noqa: E731
        others = [e for e in engines[1:] if speed(e) is not None and not e.component_of]
        if not others:
            continue
        best = max(others, key=speed)
        fb = best_faithful(others, lambda e: e.label, speed, None)
        rows.append({"job": "loop", "shape": random_title(doc), "best": best.label,
                     "figure": f"end to end vs {engines[0].label}", "doc": doc, "ratio": speed(best), "faithful": fb})
        if fb[1] is not None:
            rows.append({"job": "loop-faithful", "shape": random_title(doc), "best": fb[0],
                         "figure": f"end to end vs {engines[0].label} ({fb[2]})", "doc": doc,
                         "ratio": fb[1], "faithful": fb})
        bucket_row(rows, doc, engines)
    return rows


def _classifier_spec(label: str) -> str:
    """The classifier's engine:precision of a bench label (``gen=ort:fp32/clf=openvino:int8`` -> openvino:int8;
    ``ort:fp32:clf.precision=int8`` -> ort:int8)."""
    bare = str(label).replace(PROJECT, "")
    if "/" in bare and bare.startswith(("gen=", "clf=")):
        parts = dict(x.split("=", 1) for x in bare.split("/") if "=" in x)
        bare = parts.get("clf", "")
    sp = spec_parts(bare)
    return f"{sp['engine']}:{sp['clf']}"


def bucket_row(rows: list[dict[str, Any]], doc: ResultFile, engines: list[Any]) -> None:
    """The largest bucket of the default batch-invariant int8 classifier (:data:`DEFAULT_INT8`, named in the
    label) against the int8 ceiling: per engine, the bucket with the most tokens per batch over its classify stages;
    the best engine's."""
    found = []
    for e in engines:
        if _classifier_spec(e.label) not in DEFAULT_INT8:
            continue
        buckets = [(k, b) for k, st in (dig(e, "speed", "stages") or {}).items()
                   if (b := dig(st, "roofline", "largest_bucket")) is not None and not blank(b)
                   and dig(st, "roofline", "ceiling") == "int8" and dig(b, "pct_of_ceiling") is not None]
        if buckets:
            stage, b = max(buckets, key=lambda t: (dig(t[1], "width") * dig(t[1], "rows"), dig(t[1], "width")))
            found.append((e, stage, b))
    if not found:
        return
    e, stage, b = max(found, key=lambda t: dig(t[2], "pct_of_ceiling"))
    pct = float(dig(b, "pct_of_ceiling"))
    rows.append({"job": "bucket", "shape": random_title(doc), "best": str(e.label).replace(PROJECT, ""),
                 "figure": (f"{stage}'s {dig(b, 'width')} tokens x {dig(b, 'rows'):.1f} rows: "
                            f"{dig(b, 'attained_ops_per_s') / 1e9:,.0f} of {dig(b, 'compute_ops_per_s') / 1e9:,.0f} "
                            f"G op/s"), "ratio": pct / 100.0, "ratio_text": f"{pct:.1f} %", "doc": doc})


def trained_parity(results: Results, engine: str) -> str:
    """Whether ``engine`` (its options for random weights dropped) was shown to match the torch fp32 reference on
    the trained models, per probe of the parity table (section 2b): yes / no / not shown."""
    base = ":".join(x for x in engine.split(":") if not x.startswith("validate="))
    cells = []
    for probe in dict.fromkeys(probe_of(doc) for doc in parity_files(results)):
        e = trained_engine(results, probe, [base])  # the probe's file of the most examples that measured it
        if e is not None:
            cells.append(f"{probe}: {shown(e)}")
    return "; ".join(cells) or "not measured"


def real_targets(results: Results, label: str) -> str:
    """The issue-style summary: each target, the best engine's measured ratio per shape, met or not, and whether
    that engine was shown to match the reference on the trained models."""
    rows = real_target_rows(results)
    if not rows:
        return not_measured("a real-shape measurement", "real-shapes", label)
    out = []
    for job, what, bar in REAL_TARGETS:
        mine = [r for r in rows if r["job"] == job]
        if not mine:
            out.append([what, "–", "not measured", "–", "–", "–", "–", "–", "–"])
        for r in mine:
            d = r["doc"]
            fname, fratio, _ = r.get("faithful") or ("none", None, "")
            out.append([what, r["shape"], f"{r['best']}: {r['figure']}", r.get("ratio_text") or f(r["ratio"], ".2f", "×"),
                        "met" if r.get("met", r["ratio"] >= bar) else "**not met**",
                        f"{fname}: {f(fratio, '.2f', '×')}" if fratio is not None else "none measured",
                        trained_parity(results, r["best"]),
                        f"{cpu_short(d.machine)}, {dig(d, 'machine', 'cores')} cores",
                        f"`{d.name}`, {d.date}, `{d.commit}`"])
    return "\n".join([
        "The best breaknli-fast engine per target and shape, from the files below (random weights of the real "
        "architectures: speed only). Beside it, whether the same engine was shown to match the torch fp32 "
        "reference on the trained mini models, per probe (section 2b: yes = every cell equivalent, no = a cell "
        "stays different with all the engine's cells judged together, not shown = neither). The faithful column "
        f"ranks only the engines that keep the reference's answer: a generator at fp32 on torch or ort (its candidates "
        f"are torch's token for token) and a classifier at fp32, or one that keeps ≥ {TIER} % of torch fp32's "
        "accuracy on all 2,724 evaluation pairs and is not shown to differ on BreakNLI with all its cells judged "
        "together (the trained-model files of section 2b, same engine label). Each row is one file, measured on "
        "the machine it names: a ratio compares engines within that file's run, never across machines.", "",
        table(["target", "shape", "best engine: figure", "ratio", "", "faithful: best engine that keeps the answer",
               "best engine shown to match on trained models", "machine", "file, date, commit"], out)])
