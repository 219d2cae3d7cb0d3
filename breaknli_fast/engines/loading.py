"""Model + engine + precision + device -> ready engines: the one place that loads the models of a study.

The backends export on first use and cache the export (``breaknli_fast.export``); this module picks the engine
(``auto``), loads each role a study needs (classifier, generator, masked LMs), and falls back from ``auto``'s choice to the
torch reference when a model does not export or its export does not match torch. The options go to the
backends' loaders as keyword options, which each backend turns into its typed options class (and checks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Classifier, ClassifierBase, Generator, GeneratorBase, MaskFillerBase
from breaknli_fast.errors import UserError, first_line
from breaknli_fast.export.errors import ExportError
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS


@dataclass
class EngineConfig:
    """Which engine runs the models, and how (the options ``run`` and the study entry point take)."""

    engine: str = registry.AUTO  # auto, torch, ort, tensorrt (or a registered test engine)
    precision: str = "fp32"
    # one role at another precision (e.g. an int8 classifier with an fp32 generator: the same candidates as fp32)
    classifier_precision: str | None = None
    generator_precision: str | None = None
    mlm_precision: str | None = None  # the masked LMs (mlm role) at another precision
    device: str = "cpu"
    threads: int | None = None  # CPU threads in all (engines split them into workers)
    workers: int | str | None = None  # CPU batches side by side: a number or "auto"
    # classifier options
    label_map: dict[str, str] | None = None
    max_length: int = 256
    token_budget: int = 8192
    max_batch: int | None = None
    nli_prompt: str = DEFAULT_NLI_PROMPT
    nli_method: str = "score"
    # backend-specific options: ``clf.key`` / ``gen.key`` for one role, a plain key for each role that takes it
    # (registry.split_options)
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Refuse, in one line, what is wrong without loading a model: an unknown engine, precision, device,
        ``workers``, NLI prompt or method, and sizes below 1 (the run stops before the minutes of loading)."""
        if self.engine != registry.AUTO and self.engine not in registry.engine_names():
            raise registry.EngineUnavailable(f"unknown engine {self.engine!r}; choose one of "
                                             f"{', '.join([registry.AUTO, *registry.engine_names()])}")
        for flag, prec in (("--precision", self.precision), ("--classifier-precision", self.classifier_precision),
                           ("--generator-precision", self.generator_precision), ("--mlm-precision", self.mlm_precision)):
            if prec is not None and prec not in registry.PRECISIONS:
                raise UserError(f"{flag} {prec!r}: use {', '.join(registry.PRECISIONS)}")
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
            raise UserError(f"unknown device {self.device!r}; use cpu or cuda[:N]")
        if self.workers is not None and self.workers != "auto":
            try:
                workers = int(self.workers)
            except (TypeError, ValueError):
                raise UserError(f"--workers must be a number or 'auto', not {self.workers!r}") from None
            if workers < 1:
                raise UserError(f"--workers must be at least 1, not {workers}")
        for flag, value in (("--threads", self.threads), ("--max-length", self.max_length),
                            ("--token-budget", self.token_budget), ("--max-batch", self.max_batch)):
            if value is not None and value < 1:
                raise UserError(f"{flag} must be at least 1, not {value}")
        if self.nli_prompt not in NLI_PROMPTS:
            raise UserError(f"unknown --nli-prompt {self.nli_prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if self.nli_method not in ("score", "generate"):
            raise UserError(f"unknown --nli-method {self.nli_method!r}; use score or generate")

    def _common(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"threads": self.threads} if self.threads else {}
        if self.workers is not None:
            opts["workers"] = self.workers
        return opts

    def classifier_options(self, engine: str | None = None) -> dict[str, Any]:
        """The keyword options of ``engine``'s classifier loader (``engine``: this config's, ``auto`` resolved)."""
        return {"label_map": self.label_map, "max_length": self.max_length, "token_budget": self.token_budget,
                "max_batch": self.max_batch, "prompt": self.nli_prompt, "method": self.nli_method, **self._common(),
                **self._extra(engine)[0]}

    def generator_options(self, engine: str | None = None) -> dict[str, Any]:
        """The keyword options of ``engine``'s generator loader (``engine``: this config's, ``auto`` resolved)."""
        return {**self._common(), **self._extra(engine)[1]}

    def mlm_options(self, engine: str | None = None) -> dict[str, Any]:
        """The keyword options of ``engine``'s mask-filler loader: the classifier's input length and batching, the
        common options, and ``mlm.key`` / plain keys of ``extra`` that it takes."""
        name = engine or registry.resolve_engine(self.engine, self.precision, self.device)
        return {"max_length": self.max_length, "token_budget": self.token_budget, "max_batch": self.max_batch,
                **self._common(), **(registry.mlm_options(name, self.extra) if self.extra else {})}

    def _extra(self, engine: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        if not self.extra:
            return {}, {}
        return registry.split_options(engine or registry.resolve_engine(self.engine, self.precision, self.device),
                                      self.extra)

    @property
    def clf_precision(self) -> str:
        return self.classifier_precision or self.precision

    @property
    def gen_precision(self) -> str:
        return self.generator_precision or self.precision

    @property
    def mlm_prec(self) -> str:
        return self.mlm_precision or self.precision

    @property
    def label(self) -> str:
        """``fp32``, or ``classifier int8 / generator fp32`` when the roles differ."""
        if self.clf_precision == self.gen_precision:
            return self.clf_precision
        return f"classifier {self.clf_precision} / generator {self.gen_precision}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Models:
    """The loaded engines of a study. ``engine`` is the backend that runs them (``auto`` resolved)."""

    classifier: Classifier
    generator: Generator | None = None
    engine: str = "torch"
    requested: str = "torch"
    notes: list[str] = field(default_factory=list)
    mlm: dict[str, MaskFillerBase] = field(default_factory=dict)  # masked LMs by name, in the order asked for


# a backend that cannot take the model (no export, an export that fails validation, missing libraries or hardware):
# auto falls back to torch
FALLBACK_ERRORS = (ExportError, registry.EngineUnavailable)


def mlm_names(mlm: str | Sequence[str] | None) -> list[str]:
    """Masked-LM names from ``"a,b"`` or a sequence (blank entries dropped, duplicates once, order kept)."""
    if mlm is None:
        return []
    parts = mlm.split(",") if isinstance(mlm, str) else [str(x) for x in mlm]
    out: list[str] = []
    for p in (x.strip() for x in parts):
        if p and p not in out:
            out.append(p)
    return out


def load_models(cfg: EngineConfig, classifier: str, generator: str | None = None,
                note: Callable[[str], None] | None = None, mlm: str | Sequence[str] | None = None) -> Models:
    """Load ``classifier`` (and ``generator`` when given, and each masked LM of ``mlm``: ``"a,b"`` or a list) on
    the engine of ``cfg``. With ``engine="auto"`` a model that the chosen backend cannot take (no export, an
    export that fails validation) is loaded on torch instead, and ``note`` is told why."""
    engine = registry.resolve_engine(cfg.engine, cfg.precision, cfg.device)
    for role, prec in (("classifier", cfg.classifier_precision), ("generator", cfg.generator_precision),
                       ("mlm", cfg.mlm_precision)):
        if prec is not None and prec not in registry.PRECISIONS:
            raise UserError(f"--{role}-precision {prec!r}: use {', '.join(registry.PRECISIONS)}")
    mlms = mlm_names(mlm)

    def load(name: str) -> tuple[ClassifierBase, GeneratorBase | None, dict[str, MaskFillerBase]]:
        clf = registry.load_classifier(name, classifier, precision=cfg.clf_precision, device=cfg.device,
                                       **cfg.classifier_options(name))
        gen = (registry.load_generator(name, generator, precision=cfg.gen_precision, device=cfg.device,
                                       **cfg.generator_options(name)) if generator else None)
        fillers = {m: registry.load_mask_filler(name, m, precision=cfg.mlm_prec, device=cfg.device,
                                                **cfg.mlm_options(name)) for m in mlms}
        return clf, gen, fillers

    notes: list[str] = []
    try:
        clf, gen, fillers = load(engine)
    except FALLBACK_ERRORS as e:
        if cfg.engine != registry.AUTO or engine == "torch":
            raise
        msg = f"--engine auto: {engine} is not usable here ({first_line(e)}); running on torch"
        notes.append(msg)
        if note:
            note(msg)
        engine = "torch"
        clf, gen, fillers = load(engine)
    except UserError:
        raise
    return Models(clf, gen, engine=engine, requested=cfg.engine, notes=notes, mlm=fillers)
