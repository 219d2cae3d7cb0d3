"""The model roles a study can need, as one table: a new role is one row.

Each row names the role (its key in ``Models``, config.json and the reports), the contract its engines implement,
the registry loader that loads one, and whether a study takes several models in it (the masked LMs of MERGE).
Its precision is ``EngineConfig.<name>_precision`` (the command line's ``--<name>-precision``), its loader options
``EngineConfig.options(<name>, engine)``. Loading (:func:`breaknli_fast.study.loading.load_models`), the Ray
workers, config.json and the reports loop over :data:`ROLES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from breaknli_fast.engines import registry
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER, Classifier, Generator, MaskFiller


@dataclass(frozen=True)
class Role:
    name: str  # classifier, generator, mlm
    protocol: type  # the contract of its engines (engines.base)
    load: Callable[..., Any]  # registry loader: (engine, model, precision=, device=, **options) -> engine
    many: bool = False  # several models by name (a dict of engines), e.g. the masked LMs
    default: str | None = None  # the model used when a probe needs the role and none is named
    title: str = ""  # how reports name it


ROLES: tuple[Role, ...] = (
    Role(CLASSIFIER, Classifier, registry.load_classifier, default="mini-nli", title="classifier"),
    Role(GENERATOR, Generator, registry.load_generator, default="mini-t5", title="generator"),
    Role(MASK_FILLER, MaskFiller, registry.load_mask_filler, many=True, default="mini-mlm", title="masked LM"),
)
ROLE_NAMES = tuple(r.name for r in ROLES)


def role(name: str) -> Role:
    for r in ROLES:
        if r.name == name:
            return r
    raise KeyError(f"unknown model role {name!r}; roles: {', '.join(ROLE_NAMES)}")


def model_names(value: str | Any | None) -> list[str]:
    """Model names from ``"a,b"`` or a sequence (blank entries dropped, duplicates once, order kept)."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else [str(x) for x in value]
    out: list[str] = []
    for p in (x.strip() for x in parts):
        if p and p not in out:
            out.append(p)
    return out


@dataclass
class Models:
    """The loaded engines of a study, by role (a role with ``many`` holds ``{model name: engine}``). ``engine``
    is the backend that runs them (``auto`` resolved)."""

    engines: dict[str, Any] = field(default_factory=dict)
    engine: str = "torch"  # one name, or one per role where they differ (clf-openvino+gen-ort)
    requested: str = "torch"
    notes: list[str] = field(default_factory=list)
    by_role: dict[str, str] = field(default_factory=dict)  # role -> the engine that runs it

    @classmethod
    def of(cls, classifier: Any, generator: Any = None, **more: Any) -> "Models":
        """Engines loaded by hand (tests, benchmarks): ``Models.of(clf, gen, mlm={...})``."""
        engines = {CLASSIFIER: classifier, **({GENERATOR: generator} if generator is not None else {}), **more}
        return cls(engines)

    def get(self, name: str) -> Any:
        return self.engines.get(name)

    @property
    def classifier(self) -> Any:
        return self.engines.get(CLASSIFIER)

    @property
    def generator(self) -> Any:
        return self.engines.get(GENERATOR)

    @property
    def mlm(self) -> dict[str, Any]:
        return self.engines.get(MASK_FILLER) or {}

    def loaded(self) -> Iterator[tuple[Role, Any]]:
        """(role, engine or {name: engine}) for every role with engines, in the table's order."""
        for r in ROLES:
            if self.engines.get(r.name):
                yield r, self.engines[r.name]

    def details(self) -> dict[str, Any]:
        """Each loaded engine's description (``<role>_details`` in config.json)."""
        out: dict[str, Any] = {}
        for r, e in self.loaded():
            out[f"{r.name}_details"] = ({k: m.info.to_dict() for k, m in e.items()} if r.many else e.info.to_dict())
        return out
