"""Which engines a bench measures: ``ENGINE:PRECISION[:key=value...]`` specifications.

Examples: ``torch:fp32``, ``ort:int8``, ``tensorrt:fp16``, and, to compare another model folder
under the same engine (an exported or quantised copy, a deliberately perturbed classifier),
``torch:fp32:label=perm:classifier=/path/to/model``. Recognised keys: ``label`` (the name shown in
reports), ``classifier`` and ``generator`` (model overrides for this engine only); any other key is an
option of the engine's loaders (integers, floats and true / false are converted): ``clf.key`` for the
classifier only, ``gen.key`` for the generator only, a plain key for each role whose loader takes it (the
backend's typed options class says which; a key neither takes is refused with the valid ones, see
:func:`breaknli_fast.engines.registry.split_options`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from breaknli_fast.engines import registry
from breaknli_fast.engines.registry import PRECISIONS
from breaknli_fast.errors import UserError

REFERENCE = ("torch", "fp32")


class BenchSpecError(UserError, ValueError):
    """A malformed ``--engines`` / ``--random-weights`` value (one line, for the CLI)."""


@dataclass
class EngineSpec:
    engine: str
    precision: str = "fp32"
    label: str = ""
    classifier: str | None = None  # model override for this engine only
    generator: str | None = None
    opts: dict[str, Any] = field(default_factory=dict)  # loader options, as given (clf. / gen. prefixes kept)
    # one role at another precision (clf.precision= / gen.precision=): the component split of a quantised engine
    classifier_precision: str | None = None
    generator_precision: str | None = None
    component_of: str | None = None  # the label of the engine this one splits (derived specs only)

    def __post_init__(self) -> None:
        if not self.label:
            self.label = f"{self.engine}:{self.precision}"

    @property
    def is_plain_reference(self) -> bool:
        """torch:fp32 on the bench's own models, without options: a valid reference."""
        return ((self.engine, self.precision) == REFERENCE and not (self.classifier or self.generator or self.opts)
                and self.classifier_precision in (None, "fp32") and self.generator_precision in (None, "fp32"))

    @property
    def clf_precision(self) -> str:
        return self.classifier_precision or self.precision

    @property
    def gen_precision(self) -> str:
        return self.generator_precision or self.precision

    def role_options(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(classifier options, generator options) of this engine's loaders."""
        return registry.split_options(self.engine, self.opts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_engine(text: str) -> EngineSpec:
    parts = [p.strip() for p in text.strip().split(":")]
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise BenchSpecError(f"engine {text!r}: expected ENGINE:PRECISION (e.g. torch:fp32, ort:int8)")
    engine, precision = parts[0].lower(), parts[1].lower()
    if precision not in PRECISIONS:
        raise BenchSpecError(f"engine {text!r}: unknown precision {precision!r}; use {', '.join(PRECISIONS)}")
    spec = EngineSpec(engine, precision)
    for kv in parts[2:]:
        if "=" not in kv:
            raise BenchSpecError(f"engine {text!r}: option {kv!r} must be key=value")
        key, val = (x.strip() for x in kv.split("=", 1))
        if key == "label":
            spec.label = val
        elif key in ("clf.precision", "gen.precision"):
            if val.lower() not in PRECISIONS:
                raise BenchSpecError(f"engine {text!r}: unknown precision {val!r}; use {', '.join(PRECISIONS)}")
            setattr(spec, "classifier_precision" if key.startswith("clf") else "generator_precision", val.lower())
        elif key in ("classifier", "generator"):
            setattr(spec, key, val)
        else:
            spec.opts[key] = _value(val)
    return spec


def parse_engines(text: str | list[str], component_split: bool = False) -> list[EngineSpec]:
    """Parse a comma-separated list; the ``torch:fp32`` reference is put first (added when absent);
    repeated labels get ``#2``, ``#3``. ``component_split``: after each engine that runs both models at a
    reduced precision (int8, fp16, bf16), the same engine with only its generator, and with only its classifier,
    at that precision (the other role at fp32), so the report shows where a difference comes from."""
    items = text if isinstance(text, list) else [x for x in text.split(",") if x.strip()]
    specs = [parse_engine(x) if isinstance(x, str) else x for x in items]
    if component_split:
        out = []
        for s in specs:
            out.append(s)
            if s.precision != "fp32" and s.classifier_precision is None and s.generator_precision is None:
                out.append(EngineSpec(s.engine, s.precision, f"{s.label} generator only", s.classifier, s.generator,
                                      dict(s.opts), classifier_precision="fp32", component_of=s.label))
                out.append(EngineSpec(s.engine, s.precision, f"{s.label} classifier only", s.classifier, s.generator,
                                      dict(s.opts), generator_precision="fp32", component_of=s.label))
        specs = out
    return with_reference(specs)


def with_reference(specs: list[EngineSpec]) -> list[EngineSpec]:
    specs = list(specs)
    ref_at = next((i for i, s in enumerate(specs) if s.is_plain_reference), None)
    if ref_at is None:
        specs.insert(0, EngineSpec(*REFERENCE))
    elif ref_at:
        specs.insert(0, specs.pop(ref_at))
    seen: dict[str, int] = {}
    for s in specs:
        n = seen.get(s.label, 0) + 1
        seen[s.label] = n
        if n > 1:
            s.label = f"{s.label}#{n}"
    return specs
