"""Which engines a bench measures: ``ENGINE:PRECISION[:key=value...]`` specifications, parsed into the study's
engine configuration (:class:`~breaknli_fast.study.loading.EngineConfig`), loaded the study's way.

Examples: ``torch:fp32``, ``ort:int8``, ``ort:int8:quantization=static`` (int8 with static activation scales, labels
that do not depend on batch neighbours), ``tensorrt:fp16``, and, to compare another model folder under the same
engine (an exported or quantised copy, a deliberately perturbed classifier),
``torch:fp32:label=perm:classifier=/path/to/model``. Recognised keys: ``label`` (the name shown in reports),
``classifier`` and ``generator`` (model overrides for this engine only), ``clf.precision`` / ``gen.precision`` /
``mlm.precision`` (one role at another precision); any other key is an option of the engine's loaders (integers,
floats and true / false are converted): ``clf.key`` for the classifier only, ``gen.key`` for the generator only,
``mlm.key`` for the masked LMs, a plain key for each role whose loader takes it (the backend's typed options class
says which; a key none takes is refused with the valid ones when the engine loads). One engine per role:
``gen=ort:fp32/clf=torch:bf16`` (a role not named runs on the first part's engine).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

from breaknli_fast.engines import registry
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.engines.registry import PRECISIONS
from breaknli_fast.errors import UserError

REFERENCE = ("torch", "fp32")
ROLE_PRECISION = {"clf.precision": "classifier_precision", "gen.precision": "generator_precision",
                  "mlm.precision": "mlm_precision"}
ROLE_FIELD = {"classifier": "classifier_precision", "generator": "generator_precision", "mlm": "mlm_precision"}


class BenchSpecError(UserError, ValueError):
    """A malformed ``--engines`` / ``--random-weights`` value (one line, for the CLI)."""


@dataclass
class BenchEngine:
    """One engine of a bench: its configuration (the study's type), the name reports show, and what is not an
    engine setting: models of its own (a perturbed classifier) and, for a component split, the engine it splits."""

    config: EngineConfig
    label: str = ""
    classifier: str | None = None  # model override for this engine only
    generator: str | None = None
    component_of: str | None = None  # the label of the engine this one splits (derived entries only)

    def __post_init__(self) -> None:
        if not self.label:
            self.label = f"{self.config.engine}:{self.config.precision}"

    @property
    def engine(self) -> str:
        return self.config.engine

    @property
    def precision(self) -> str:
        return self.config.precision

    @property
    def is_plain_reference(self) -> bool:
        """torch:fp32 on the bench's own models, without options: a valid reference."""
        c = self.config
        return ((c.engine, c.precision) == REFERENCE and not (self.classifier or self.generator or c.extra)
                and all(getattr(c, f) in (None, "fp32") for f in ROLE_FIELD.values()))

    def role_precision(self, role: str) -> str:
        return getattr(self.config, ROLE_FIELD[role]) or self.config.precision

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "engine": self.engine, "precision": self.precision, "classifier": self.classifier,
                "generator": self.generator, "component_of": self.component_of, "config": asdict(self.config)}


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


ROLE_PREFIX = {"gen": "generator", "clf": "classifier", "mlm": "mlm"}


def parse_mixed(text: str, base: EngineConfig | None = None) -> BenchEngine:
    """``gen=ort:fp32/clf=torch:bf16``: each role on its own ``ENGINE:PRECISION[:key=value...]`` (a role not named
    runs on the first one's); the label is the text as written (unless a part gives ``label=``)."""
    parts = [p.strip() for p in text.strip().split("/") if p.strip()]
    entries: list[tuple[str, BenchEngine]] = []
    for part in parts:
        key, eq, spec = part.partition("=")
        role = ROLE_PREFIX.get(key.strip().lower())
        if not eq or role is None:
            raise BenchSpecError(f"engine {text!r}: each part of a per-role engine is ROLE=ENGINE:PRECISION with "
                                 f"ROLE one of {', '.join(ROLE_PREFIX)} (e.g. gen=ort:fp32/clf=torch:bf16)")
        if any(r == role for r, _ in entries):
            raise BenchSpecError(f"engine {text!r}: the {role} is named twice")
        entries.append((role, parse_engine(spec, base)))
    first = entries[0][1]
    cfg = replace(first.config, extra={})
    label = text.strip()
    for role, e in entries:
        setattr(cfg, f"{role}_engine", e.engine)
        setattr(cfg, ROLE_FIELD[role], e.precision)
        short = next(k for k, v in ROLE_PREFIX.items() if v == role)
        for k, v in e.config.extra.items():
            cfg.extra[k if k.split(".", 1)[0] in ROLE_PREFIX else f"{short}.{k}"] = v
        if e.label != f"{e.engine}:{e.precision}" and ":" not in e.label:  # a label= of its own
            label = e.label
    return BenchEngine(cfg, label, first.classifier, first.generator)


def parse_engine(text: str, base: EngineConfig | None = None) -> BenchEngine:
    """One ``ENGINE:PRECISION[:key=value...]``, or one engine per role (``gen=ort:fp32/clf=torch:bf16``,
    :func:`parse_mixed`); the bench-wide settings (device, threads, classifier options) come from ``base``."""
    head = text.strip().split(":", 1)[0]
    if "=" in head:
        return parse_mixed(text, base)
    parts = [p.strip() for p in text.strip().split(":")]
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise BenchSpecError(f"engine {text!r}: expected ENGINE:PRECISION (e.g. torch:fp32, ort:int8)")
    engine, precision = parts[0].lower(), parts[1].lower()
    try:  # an unknown engine is refused here, before any model loads (auto: the engines run's --engine auto picks)
        registry.options_class(engine if engine != registry.AUTO else registry.REFERENCE)
    except registry.EngineUnavailable as e:
        raise BenchSpecError(f"engine {text!r}: {e}") from None
    try:
        registry.precision_name(precision)
    except registry.PrecisionError:
        raise BenchSpecError(f"engine {text!r}: unknown precision {precision!r}; use {', '.join(PRECISIONS)}") from None
    cfg = replace(base or EngineConfig(), engine=engine, precision=precision, classifier_precision=None,
                  generator_precision=None, mlm_precision=None, extra={})
    # the name reports show: as written, without a label= (which replaces it)
    out = BenchEngine(cfg, ":".join([engine, precision] + [kv for kv in parts[2:] if not kv.startswith("label=")]))
    for kv in parts[2:]:
        if "=" not in kv:
            raise BenchSpecError(f"engine {text!r}: option {kv!r} must be key=value")
        key, val = (x.strip() for x in kv.split("=", 1))
        if key == "label":
            out.label = val
        elif key in ROLE_PRECISION:
            try:
                registry.precision_name(val)
            except registry.PrecisionError:
                raise BenchSpecError(f"engine {text!r}: unknown precision {val!r}; use {', '.join(PRECISIONS)}") from None
            setattr(cfg, ROLE_PRECISION[key], val.lower())
        elif key in ("classifier", "generator"):
            setattr(out, key, val)
        else:
            cfg.extra[key] = _value(val)
    if cfg.extra:
        try:  # a plain key that none of the engine's loaders takes: one line now, not a skipped engine later
            registry.role_options(registry.resolve_engine(engine, precision, cfg.device, "classifier"), "classifier",
                                  cfg.extra)
        except UserError as e:
            raise BenchSpecError(f"engine {text!r}: {e}") from None
    return out


def component_split(entries: Sequence[BenchEngine], roles: Sequence[str]) -> list[BenchEngine]:
    """After each engine that runs every role of a probe with several roles at a reduced precision (int8, fp16,
    bf16), the same engine with only one role at that precision (the others at fp32), one entry per role, so
    the report shows where a difference comes from (``X generator only``, ``X classifier only``, ``X mlm only``).
    An entry with loader options (``ort:int8:clf.quantization=static``) is a variant measured as a whole: not split."""
    roles = sorted((r for r in roles if r in ROLE_FIELD), key=("generator", "mlm", "classifier").index)
    out: list[BenchEngine] = []
    for e in entries:
        out.append(e)
        c = e.config
        if (len(roles) < 2 or c.precision == "fp32" or c.extra or c.per_role()
                or any(getattr(c, ROLE_FIELD[r]) for r in roles)):
            continue
        for role in roles:
            others = {ROLE_FIELD[r]: "fp32" for r in roles if r != role}
            out.append(BenchEngine(replace(c, extra=dict(c.extra), **others), f"{e.label} {role} only",
                                   e.classifier, e.generator, component_of=e.label))
    return out


def parse_engines(text: str | Sequence[str | BenchEngine], base: EngineConfig | None = None,
                  split: bool = False, roles: Sequence[str] = ("classifier", "generator")) -> list[BenchEngine]:
    """Parse a comma-separated list (or a list of specifications / entries); the ``torch:fp32`` reference is put
    first (added when absent); repeated labels get ``#2``, ``#3``. ``split``: :func:`component_split` for a probe
    whose models are ``roles``."""
    items = [x for x in text.split(",") if x.strip()] if isinstance(text, str) else list(text)
    entries = [parse_engine(x, base) if isinstance(x, str) else x for x in items]
    if split:
        entries = component_split(entries, roles)
    return with_reference(entries, base)


def with_reference(entries: Sequence[BenchEngine], base: EngineConfig | None = None) -> list[BenchEngine]:
    entries = list(entries)
    ref_at = next((i for i, s in enumerate(entries) if s.is_plain_reference), None)
    if ref_at is None:
        entries.insert(0, BenchEngine(replace(base or EngineConfig(), engine=REFERENCE[0], precision=REFERENCE[1],
                                              classifier_precision=None, generator_precision=None,
                                              mlm_precision=None, extra={})))
    elif ref_at:
        entries.insert(0, entries.pop(ref_at))
    seen: dict[str, int] = {}
    for s in entries:
        n = seen.get(s.label, 0) + 1
        seen[s.label] = n
        if n > 1:
            s.label = f"{s.label}#{n}"
    return entries
