"""The BreakNLI generate–filter–evaluate loop (docs/methodology.md), engine-agnostic.

Stages per mode: select -> correct-only -> generate K -> deduplicate to U -> relation filter
to S -> evaluate (p, h') -> verdict. These are the steps; :mod:`breaknli_fast.probes.breaknli` makes them a
probe of the study runner, which runs them in resumable chunks.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines.base import Classifier, Decoding, Generator
from breaknli_fast.limits import MAX_BEAMS, MAX_NEW_TOKENS
from breaknli_fast.probes.breaknli.generation import generate_candidates
from breaknli_fast.probes.breaknli.topup import MAX_TOP_UP, top_up
from breaknli_fast.probes.breaknli.verdicts import MODES, SELECTED, TARGET, verdict
from breaknli_fast.prompts import GEN_PROMPTS, check_template
from breaknli_fast.probes.base import CliOption, SharedCache, StageCache, StageTimes, option, options
from breaknli_fast.progress import ProgressHook

STATUSES = ("incorrect", "too_few_unique", "too_few_on_target", "evaluated")
RELATION_FILTERS = ("lazy", "full")


def parse_modes(mode: str) -> tuple[str, ...]:
    """The modes of a ``--mode`` value (``both`` = contradictive then entailed)."""
    return MODES if mode == "both" else (mode,)


MAX_K = 1000  # candidates per hypothesis: K sequences of the generator are held per prompt at once
GENERATION = "Generation"  # the help panel of the generator's options


def check_beams(decoding: Decoding, k: int) -> None:
    """Beam settings that cannot give K candidates are refused, not changed: beam search returns at most one
    candidate per beam, so the beams (num_beams, default K) must be at least K, and diverse-beam's beams a
    multiple of its groups; beam settings with another strategy would be ignored, so they are refused too."""
    beams, groups = decoding.num_beams, decoding.num_beam_groups
    if decoding.strategy not in ("beam", "diverse-beam"):
        if beams is not None or groups is not None:
            raise ValueError(f"num_beams / num_beam_groups (--num-beams / --num-beam-groups) apply to beam and "
                             f"diverse-beam decoding, not to {decoding.strategy}")
        return
    if beams is not None and beams < k:
        raise ValueError(f"num_beams (--num-beams) {beams} is fewer than the {k} candidates asked for (K, --k): beam "
                         "search returns one candidate per beam, so use at least K beams (the default is K)")
    beams = beams or k
    if decoding.strategy == "diverse-beam" and beams % (groups or beams):
        raise ValueError(f"diverse-beam: num_beams ({beams}) must be a multiple of num_beam_groups "
                         f"(--num-beam-groups, {groups})")


@dataclass
class BreakNLIConfig:
    modes: tuple[str, ...] = option(MODES, help="contradictive, entailed or both.", flag="--mode", cli_default="both",
                                    type=str, parse=parse_modes)
    k: int = option(20, help=f"Candidates generated per hypothesis (at most {MAX_K}).", min=1, max=MAX_K)
    u: int = option(10, help="Distinct candidates kept (examples with fewer are dropped).", min=1)
    s: int = option(5, help="On-target candidates evaluated (examples with fewer are dropped).", min=1)
    bidirectional: bool = option(True, help="Relation filter on (h,h') and (h',h) (the study's code), or (h,h') "
                                            "only (the study's README).", flag="--bidirectional/--one-direction")
    top_up: int = option(0, help="Fewer than S on target: draw up to N more candidates, one at a time, before "
                                 "dropping the example (the study's code: 15; 0: drop at once). Needs sampling.",
                         min=0, max=MAX_TOP_UP, metavar="N")
    prompts: dict[str, str] = options(
        lambda: dict(GEN_PROMPTS),
        contradictive=CliOption("Prompt of the contradictive mode ({h} = hypothesis).", flag="--contradict-prompt",
                                panel=GENERATION),
        entailed=CliOption("Prompt of the entailed mode ({h} = hypothesis).", flag="--entail-prompt", panel=GENERATION))
    decoding: Decoding = options(
        Decoding,
        strategy=CliOption("sampling, beam, diverse-beam or greedy.", flag="--decoding", panel=GENERATION),
        top_p=CliOption("Sampling: nucleus probability mass.", flag="--top-p", panel=GENERATION),
        top_k=CliOption("Sampling: most likely tokens kept (0 = all).", flag="--top-k", panel=GENERATION),
        temperature=CliOption("Sampling temperature.", panel=GENERATION),
        sampler=CliOption("Sampling draws: fast (top-k first, seeded per prompt) or transformers (token-identical to "
                          "transformers' generate; slower).", panel=GENERATION),
        max_new_tokens=CliOption(f"Longest candidate, in tokens (at most {MAX_NEW_TOKENS}).", panel=GENERATION),
        num_beams=CliOption(f"Beams for beam / diverse-beam decoding: at least K (default: K), at most {MAX_BEAMS}.",
                            panel=GENERATION),
        num_beam_groups=CliOption("diverse-beam: groups (default: one beam per group).", panel=GENERATION),
        diversity_penalty=CliOption("diverse-beam: Hamming diversity penalty.", panel=GENERATION))
    seed: int = 0
    chunk_size: int = 16
    # lazy: (h', h) only for candidates whose (h, h') is on target, and only until the first S pass (same
    # verdicts as full, about half the relation pairs); full: both directions of every kept candidate
    relation_filter: str = option("lazy", help="lazy: (h', h) only for candidates whose (h, h') is on target, until "
                                               "S pass (same verdicts, about half the relation pairs); full: both "
                                               "directions of every kept candidate (audits).")

    def __post_init__(self) -> None:
        if self.relation_filter not in RELATION_FILTERS:
            raise ValueError(f"unknown --relation-filter {self.relation_filter!r}; use lazy or full")
        for m in self.modes:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r}; use contradictive, entailed or both")
        if not (self.k >= self.u >= self.s >= 1):
            raise ValueError(f"need K >= U >= S >= 1, got K={self.k}, U={self.u}, S={self.s}")
        if self.k > MAX_K:
            raise ValueError(f"--k {self.k}: at most {MAX_K} candidates per hypothesis")
        if not 0 <= self.top_up <= MAX_TOP_UP:
            raise ValueError(f"--top-up {self.top_up}: between 0 and {MAX_TOP_UP} draws per example")
        if self.top_up and self.decoding.strategy != "sampling":
            raise ValueError(f"--top-up {self.top_up} draws one sampled candidate at a time; --decoding "
                             f"{self.decoding.strategy} would draw the same one each time (use --decoding sampling)")
        check_beams(self.decoding, self.k)
        flags = {"contradictive": "--contradict-prompt", "entailed": "--entail-prompt"}
        for m in self.modes:
            check_template(self.prompts.get(m, ""), ("h",), f"the {m} generation prompt ({flags[m]})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["modes"] = list(self.modes)
        d["decoding"] = self.decoding.to_dict()
        if not self.top_up:  # absent = 0: a run without top-up keeps the identity runs had before the option
            del d["top_up"]
        return d


STAGES = ("classify_ph", "generate", "relation", "evaluate")  # the loop's timed stages


def new_times() -> StageTimes:
    """Timings with every stage of the loop at zero (reports list them all, run or not)."""
    return StageTimes(seconds={k: 0.0 for k in STAGES}, pairs={k: 0 for k in STAGES if k != "generate"})


def dedup_candidates(hypothesis: str, candidates: Sequence[str], u: int) -> tuple[list[str], int]:
    """Normalise, drop exact duplicates and candidates equal to h; keep the first ``u`` in
    generation order. Returns (kept, number of distinct candidates)."""
    h = normalize_text(hypothesis)
    seen: set[str] = set()
    distinct: list[str] = []
    for c in candidates:
        n = normalize_text(c)
        if not n or n == h or n in seen:
            continue
        seen.add(n)
        distinct.append(n)
    return distinct[:u], len(distinct)


def data_key(examples: Sequence[Example]) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([ex.id, ex.premise, ex.hypothesis, ex.label]).encode())
    return h.hexdigest()


STAGE_PH = "premise_hypothesis"  # the stage cache of M(p, h): stage_premise_hypothesis.json


def classify_premise_hypothesis(examples: Sequence[Example], classifier: Classifier, stages: StageCache | None,
                                times: StageTimes, hook: ProgressHook, batch: int = 256) -> dict[str, dict[str, Any]]:
    """M(p, h) for every example, cached in the run directory (keyed by the data)."""
    key = data_key(examples)
    if stages is not None:
        cached = stages.load_stage(STAGE_PH, key)
        if cached is not None:
            return cached["predictions"]
    preds: dict[str, dict[str, Any]] = {}
    hook.start("classify (p, h)", len(examples))
    t0 = time.perf_counter()
    for i in range(0, len(examples), batch):
        part = examples[i : i + batch]
        out = classifier.classify([(ex.premise, ex.hypothesis) for ex in part])
        probs = out.probs
        for j, ex in enumerate(part):
            preds[ex.id] = {"label": out.labels[j], "probs": [round(float(x), 6) for x in probs[j]]}
        hook.advance("classify (p, h)", len(part))
    times.add("classify_ph", time.perf_counter() - t0, len(examples))
    hook.finish("classify (p, h)")
    if stages is not None:
        stages.save_stage(STAGE_PH, key, {"predictions": preds})
    return preds


RelationResult = tuple[list[list[Any]], list[str], "int | None", int]  # relations, passing, n on target, pairs


def relation_filter_full(examples: Sequence[Example], kept: dict[str, list[str]], target: str, cfg: BreakNLIConfig,
                         classifier: Classifier) -> tuple[dict[str, RelationResult], int]:
    """Every kept candidate in both directions (one direction with ``bidirectional`` off), in one call."""
    step = 2 if cfg.bidirectional else 1
    pairs = []
    for ex in examples:
        for c in kept[ex.id]:
            pairs.append((ex.hypothesis, c))
            if cfg.bidirectional:
                pairs.append((c, ex.hypothesis))
    labels = classifier.classify(pairs).labels if pairs else []
    out: dict[str, RelationResult] = {}
    pos = 0
    for ex in examples:
        rels, passing = [], []
        for c in kept[ex.id]:
            r = labels[pos : pos + step]
            pos += step
            rels.append(r)
            if all(x == target for x in r):
                passing.append(c)
        out[ex.id] = (rels, passing, len(passing), len(kept[ex.id]) * step)
    return out, len(pairs)


def relation_filter_lazy(examples: Sequence[Example], kept: dict[str, list[str]], target: str, cfg: BreakNLIConfig,
                         classifier: Classifier) -> tuple[dict[str, RelationResult], int]:
    """The same first S passing candidates with fewer pairs. Wave 1: (h, h') of every kept candidate. Then, in
    waves batched over the chunk's examples, (h', h) of just as many forward-passing candidates, in generation
    order, as are still missing to reach S; an example stops when S pass, or when fewer than S can still pass.
    A relation that was not needed is recorded as None (not computed)."""
    fw_pairs = [(ex.hypothesis, c) for ex in examples for c in kept[ex.id]]
    fw = classifier.classify(fw_pairs).labels if fw_pairs else []
    n_pairs = len(fw_pairs)
    rels: dict[str, list[list[Any]]] = {}
    pos = 0
    for ex in examples:
        rels[ex.id] = [[fw[pos + i]] + ([None] if cfg.bidirectional else []) for i in range(len(kept[ex.id]))]
        pos += len(kept[ex.id])
    count = {ex.id: len(kept[ex.id]) for ex in examples}
    if not cfg.bidirectional:
        out = {}
        for ex in examples:
            passing = [c for c, r in zip(kept[ex.id], rels[ex.id]) if r[0] == target]
            out[ex.id] = (rels[ex.id], passing, len(passing), count[ex.id])
        return out, n_pairs
    forward_ok = {ex.id: [i for i, r in enumerate(rels[ex.id]) if r[0] == target] for ex in examples}
    nxt = {ex.id: 0 for ex in examples}  # next position in forward_ok to ask (h', h) for
    passed: dict[str, list[int]] = {ex.id: [] for ex in examples}
    while True:
        wave: list[tuple[str, int]] = []
        for ex in examples:
            ok, got = forward_ok[ex.id], passed[ex.id]
            need = cfg.s - len(got)
            left = len(ok) - nxt[ex.id]
            if need <= 0 or left <= 0:
                continue  # done, or nothing left to ask
            if len(got) + left < cfg.s:  # can no longer reach S with its kept candidates alone:
                if not cfg.top_up:
                    continue  # dropped
                need = left  # the top-up comes after them, so every one that passes counts: ask them all
            for i in ok[nxt[ex.id] : nxt[ex.id] + need]:
                wave.append((ex.id, i))
            nxt[ex.id] += need
        if not wave:
            break
        by_id = {ex.id: ex for ex in examples}
        bw = classifier.classify([(kept[eid][i], by_id[eid].hypothesis) for eid, i in wave]).labels
        n_pairs += len(wave)
        for (eid, i), lab in zip(wave, bw):
            rels[eid][i][1] = lab
            count[eid] += 1
            if lab == target:
                passed[eid].append(i)
    out = {}
    for ex in examples:
        idx = sorted(passed[ex.id])
        out[ex.id] = (rels[ex.id], [kept[ex.id][i] for i in idx], None, count[ex.id])
    return out, n_pairs


def process_chunk(mode: str, chunk: Sequence[Example], yhat: dict[str, dict[str, Any]], classifier: Classifier,
                  generator: Generator | None, cfg: BreakNLIConfig, times: StageTimes,
                  shared: SharedCache | None = None) -> list[dict[str, Any]]:
    target = TARGET[mode]
    records: dict[str, dict[str, Any]] = {}
    correct: list[Example] = []
    for ex in chunk:
        pred = yhat[ex.id]["label"]
        records[ex.id] = {"mode": mode, "id": ex.id, "line": ex.line, "premise": ex.premise, "hypothesis": ex.hypothesis,
                          "gold": ex.label, "yhat": pred, "ph_probs": dict(zip(LABELS, yhat[ex.id]["probs"]))}
        if pred == ex.label:
            correct.append(ex)
        else:
            records[ex.id]["status"] = "incorrect"
    if not correct:
        return [records[ex.id] for ex in chunk]

    # Generate K candidates per kept hypothesis, one seed per (run seed, mode, example) (or reuse a study's).
    cands = generate_candidates(mode, correct, generator, cfg, times, shared)

    kept: dict[str, list[str]] = {}
    for ex, cs in zip(correct, cands):
        k, n_distinct = dedup_candidates(ex.hypothesis, cs, cfg.u)
        rec = records[ex.id]
        rec["n_generated"] = len(cs)
        rec["generated"] = list(cs)  # the raw K candidates in generation order: every funnel step checkable
        rec["n_distinct"] = n_distinct
        if n_distinct < cfg.u:
            rec["status"] = "too_few_unique"
            rec["candidates"] = k
        else:
            kept[ex.id] = k

    # Relation filter: (h, h') and, when bidirectional, (h', h) must both equal the target.
    todo = [ex for ex in correct if ex.id in kept]
    relation = relation_filter_full if cfg.relation_filter == "full" else relation_filter_lazy
    t0 = time.perf_counter()
    found, n_pairs = relation(todo, kept, target, cfg, classifier)
    if n_pairs:
        times.add("relation", time.perf_counter() - t0, n_pairs)
    final: dict[str, list[str]] = {}
    for ex in todo:
        rec = records[ex.id]
        rels, passing, n_on_target, pairs = found[ex.id]
        rec["candidates"] = kept[ex.id]
        rec["relations"] = rels
        rec["relation_pairs"] = pairs
        if n_on_target is not None:
            rec["n_on_target"] = n_on_target
        final[ex.id] = passing[: cfg.s]
        if cfg.top_up:
            rec["top_up_draws"] = 0

    # Top-up: an example short of S draws up to cfg.top_up more candidates, one at a time (topup.py).
    short = [ex for ex in todo if len(final[ex.id]) < cfg.s]
    if short and cfg.top_up:
        extra = top_up(mode, short, {ex.id: len(final[ex.id]) for ex in short}, kept, target, cfg, classifier,
                       generator, times, shared)
        for ex in short:
            rec, t = records[ex.id], extra[ex.id]
            rec.update(top_up_draws=t.draws, top_up_generated=t.generated, top_up_relations=t.relations)
            rec["relation_pairs"] += t.pairs
            final[ex.id] = (final[ex.id] + t.passing)[: cfg.s]
    for ex in todo:
        if len(final[ex.id]) < cfg.s:
            records[ex.id]["status"] = "too_few_on_target"
            del final[ex.id]

    # Evaluate (p, h') for the S kept candidates.
    eval_pairs = [(ex.premise, c) for ex in correct if ex.id in final for c in final[ex.id]]
    if eval_pairs:
        t0 = time.perf_counter()
        ev = classifier.classify(eval_pairs)
        times.add("evaluate", time.perf_counter() - t0, len(eval_pairs))
        labels, probs = ev.labels, ev.probs
        pos = 0
        for ex in correct:
            if ex.id not in final:
                continue
            rec = records[ex.id]
            n = len(final[ex.id])
            preds = labels[pos : pos + n]
            rec["evaluated"] = final[ex.id]
            rec["predictions"] = preds
            rec["eval_probs"] = [{lab: round(float(x), 6) for lab, x in zip(LABELS, row)} for row in probs[pos : pos + n]]
            rec["verdict"] = verdict(mode, rec["yhat"], preds).to_dict()
            rec["status"] = "evaluated"
            pos += n
    return [records[ex.id] for ex in chunk]


def funnel(records: Sequence[dict[str, Any]], data: LoadedData, modes: Sequence[str]) -> dict[str, Any]:
    """The funnel per mode (examples read, skipped, selected, correct, generated, dropped, evaluated)."""
    out: dict[str, Any] = {"read": data.skips.read, "skipped": data.skips.skipped, "skips": data.skips.to_dict(),
                           "valid": len(data.examples)}
    ph_total = ph_correct = 0
    seen: set[str] = set()
    for r in records:
        if r["id"] in seen:
            continue
        seen.add(r["id"])
        ph_total += 1
        ph_correct += r["yhat"] == r["gold"]
    out["accuracy_ph"] = (100.0 * ph_correct / ph_total) if ph_total else None
    out["accuracy_ph_n"] = ph_total
    for mode in modes:
        rs = [r for r in records if r["mode"] == mode]
        st = {s: sum(r["status"] == s for r in rs) for s in STATUSES}
        correct = len(rs) - st["incorrect"]
        out[mode] = {
            "selected": sum(ex.label in SELECTED[mode] for ex in data.examples),
            "processed": len(rs),
            "correct": correct,
            "generated": correct,
            "too_few_unique": st["too_few_unique"],
            "too_few_on_target": st["too_few_on_target"],
            "evaluated": st["evaluated"],
            "by_label": {lab: sum(r["status"] == "evaluated" and r["yhat"] == lab for r in rs) for lab in LABELS},
        }
        if any("top_up_draws" in r for r in rs):  # a run with --top-up: what the draws did
            drew = [r for r in rs if r.get("top_up_draws")]
            out[mode]["top_up"] = {"examples": len(drew), "draws": sum(r["top_up_draws"] for r in drew),
                                   "evaluated": sum(r["status"] == "evaluated" for r in drew)}
    return out
