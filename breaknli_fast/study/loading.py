"""Model + engine + precision + device -> ready engines: the one place that loads the models of a study
(one loop over the model roles of :mod:`breaknli_fast.engines.roles`).

The backends export on first use and cache the export (``breaknli_fast.export``); this module picks the engine
(``auto``), loads each role a study needs (classifier, generator, masked LMs), and falls back from ``auto``'s choice to the
torch reference when a model does not export or its export does not match torch. The options go to the
backends' loaders as keyword options, which each backend turns into its typed options class (and checks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from breaknli_fast.engines import registry
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER
from breaknli_fast.engines.roles import ROLES, Models, model_names
from breaknli_fast.errors import UserError, first_line
from breaknli_fast.export.errors import ExportError
from breaknli_fast.limits import MAX_BATCH_PAIRS, MAX_GEN_BATCH, MAX_TOKEN_BUDGET, check_threads
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
    # one role on another engine (--classifier-engine / --generator-engine / --mlm-engine); None: ``engine``
    classifier_engine: str | None = None
    generator_engine: str | None = None
    mlm_engine: str | None = None
    device: str = "cpu"
    threads: int | None = None  # CPU threads in all (engines split them into workers)
    workers: int | str | None = None  # CPU batches side by side: a number or "auto"
    gen_batch: int | None = None  # prompts per generator batch (None: the engine's default for the device)
    # classifier options
    label_map: dict[str, str] | None = None
    max_length: int = 256
    token_budget: int = 8192
    max_batch: int | None = None
    nli_prompt: str = DEFAULT_NLI_PROMPT
    nli_method: str = "score"
    # backend-specific options: ``clf.key`` / ``gen.key`` for one role, a plain key for each role that takes it
    # (registry.role_options)
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Refuse, in one line, what is wrong without loading a model: an unknown precision, device, ``workers``,
        NLI prompt or method, and sizes below 1 (the run stops before the minutes of loading)."""
        self.check_precisions()
        try:
            kind = registry.device_kind(self.device)  # the one parser of device strings
        except registry.PrecisionError as e:
            raise UserError(str(e)) from None
        if kind == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UserError(f"--device {self.device} was requested but no CUDA GPU is visible to torch")
        _check_count(self.workers, "workers (--workers)", "--workers", auto=True)
        for key, value in self.extra.items():  # a bench entry's threads= / workers= (clf.workers=, ...): the same
            plain = key.split(".", 1)[1] if key.split(".", 1)[0] in ("clf", "gen", "mlm") else key
            if plain in ("threads", "workers"):
                _check_count(value, f"{key}=", f"{key}=", auto=plain == "workers")
        for name, value in (("threads", self.threads), ("max_length", self.max_length),
                            ("token_budget", self.token_budget), ("max_batch", self.max_batch),
                            ("gen_batch", self.gen_batch)):
            if value is not None and value < 1:  # named as the caller may have passed it: either way
                raise UserError(f"{name} (--{name.replace('_', '-')}) must be at least 1, not {value}")
        check_threads(self.threads, "--threads")
        for flag, value, bound in (("--token-budget", self.token_budget, MAX_TOKEN_BUDGET),
                                   ("--max-batch", self.max_batch, MAX_BATCH_PAIRS),
                                   ("--gen-batch", self.gen_batch, MAX_GEN_BATCH)):
            if value is not None and value > bound:
                raise UserError(f"{flag} {value}: at most {bound} (docs/limits.md: larger batches only hold more "
                                "activations at once)")
        if self.nli_prompt not in NLI_PROMPTS:
            raise UserError(f"unknown --nli-prompt {self.nli_prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if self.nli_method not in ("score", "generate"):
            raise UserError(f"unknown --nli-method {self.nli_method!r}; use score or generate")

    def options(self, role: str, engine: str | None = None) -> dict[str, Any]:
        """The keyword options of ``engine``'s loader for ``role`` (``engine``: this config's, ``auto`` resolved):
        the role's own fields of this config, the common ones, and the keys of ``extra`` that the role takes."""
        name = engine or registry.resolve_engine(self.engine, self.precision, self.device)
        common: dict[str, Any] = {"threads": self.threads} if self.threads else {}
        if self.workers is not None:
            common["workers"] = self.workers
        batching = {"max_length": self.max_length, "token_budget": self.token_budget, "max_batch": self.max_batch}
        if role == CLASSIFIER:
            own = {"label_map": self.label_map, **batching, "prompt": self.nli_prompt, "method": self.nli_method}
        elif role == MASK_FILLER:
            own = batching
        elif role == GENERATOR:
            own = {"prompt_batch": self.gen_batch} if self.gen_batch else {}
        else:
            own = {}
        return {**own, **common, **(registry.role_options(name, role, self.extra) if self.extra else {})}

    def check_precisions(self) -> None:
        """Every precision named here is one some backend runs (:func:`registry.precision_name`); whether a role's
        engine runs it is :meth:`check_roles`'s."""
        for flag, prec in (("--precision", self.precision), ("--classifier-precision", self.classifier_precision),
                           ("--generator-precision", self.generator_precision), ("--mlm-precision", self.mlm_precision)):
            if prec is not None:
                try:
                    registry.precision_name(prec, flag)
                except registry.PrecisionError as e:
                    raise UserError(str(e)) from None

    def engine_of(self, role: str) -> str:
        """The engine of ``role``'s models: its own (``<role>_engine``) or the config's, ``auto`` resolved at the
        role's precision."""
        own = getattr(self, f"{role}_engine", None)
        if own:
            return registry.resolve_engine(own, self.precision_of(role), self.device, role)
        try:  # --engine for every role: a role its backend hands to another engine goes there (ct2's classifier)
            return registry.role_engine(self.engine, role, self.precision_of(role), self.device)
        except registry.EngineUnavailable:
            return registry.resolve_engine(self.engine, self.precision_of(role), self.device, role)  # check_roles says why

    def requested_engine_of(self, role: str) -> str:
        return getattr(self, f"{role}_engine", None) or self.engine

    def per_role(self) -> bool:
        """Whether a role has an engine of its own."""
        return any(getattr(self, f"{r.name}_engine", None) for r in ROLES)

    def engine_label(self, roles: Sequence[str] = (CLASSIFIER, GENERATOR)) -> str:
        """The engine of ``roles`` as one name (``ort``), or one per role where they differ (``clf-openvino+gen-ort``;
        run directory names, config.json)."""
        if not roles:
            return registry.resolve_engine(self.engine, self.precision, self.device)
        return role_label({r: self.engine_of(r) for r in roles})

    def check_roles(self, roles: Sequence[str], hint: Callable[[str], str] | None = None) -> None:
        """Each role a probe needs checked against its engine's declaration (the role, its precision on the
        device), in one line before anything loads or exports: ``run --engine openvino`` on BreakNLI, whose
        generator OpenVINO does not run, stops here and says which option gives the role another engine
        (``hint(role)``: another way to say it, e.g. a bench entry's)."""
        for role in roles:
            name = self.engine_of(role)
            flag = "--mlm-engine" if role == MASK_FILLER else f"--{role}-engine"
            try:
                registry.check(name, role, self.precision_of(role), self.device)
            except registry.PrecisionError as e:  # its own line names the precisions the engine runs
                raise UserError(first_line(e)) from None
            except registry.EngineUnavailable as e:  # a role it does not run: say how to give it another engine
                how = hint(role) if hint is not None else f"{flag} runs the {role} on another engine"
                raise UserError(f"{first_line(e)} ({how})") from None

    def check_used(self, roles: Sequence[str], what: str, flags: Callable[[str, str], str] | None = None) -> None:
        """An engine or a precision given for a role that ``what`` (a probe, LoadGen's roles) does not use would
        change nothing: one line (``flags(role, kind)``: how the caller names the option; default ``run``'s)."""
        for r in ROLES:
            if r.name in roles:
                continue
            for kind in ("engine", "precision"):
                if getattr(self, f"{r.name}_{kind}", None):
                    own = ("--mlm" if r.name == MASK_FILLER else f"--{r.name}") + f"-{kind}"
                    flag = flags(r.name, kind) if flags else own
                    raise UserError(f"{flag}: {what} has no {r.title or r.name} (its models: {', '.join(roles)}), "
                                    "so it would change nothing; leave it out")

    def precision_of(self, role: str) -> str:
        """The precision of ``role``'s models: its own (``<role>_precision``) or the config's."""
        return getattr(self, f"{role}_precision", None) or self.precision

    @property
    def clf_precision(self) -> str:
        return self.precision_of(CLASSIFIER)

    @property
    def gen_precision(self) -> str:
        return self.precision_of(GENERATOR)

    @property
    def mlm_prec(self) -> str:
        return self.precision_of(MASK_FILLER)

    @property
    def label(self) -> str:
        """``fp32``, or ``classifier int8 / generator fp32`` when the roles differ."""
        if self.clf_precision == self.gen_precision:
            return self.clf_precision
        return f"classifier {self.clf_precision} / generator {self.gen_precision}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


OR_AUTO = " or 'auto'"


def _check_count(value: Any, what: str, flag: str, auto: bool) -> None:
    """A thread or worker count: a number of at least 1 (or ``auto``), within
    :func:`~breaknli_fast.limits.max_threads`."""
    if value is None or (auto and value == "auto"):
        return
    try:
        n = int(value)
        if isinstance(value, float) and n != value:
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a number{OR_AUTO if auto else ''}, not {value!r}") from None
    if n < 1:
        raise UserError(f"{what} must be at least 1, not {n}")
    check_threads(n, flag)


# a backend that cannot take the model (no export, an export that fails validation, missing libraries or hardware):
# auto falls back to torch
FALLBACK_ERRORS = (ExportError, registry.EngineUnavailable)


mlm_names = model_names  # the masked LMs of ``--mlm a,b``

def hf_models(engine: str) -> bool:
    """Whether ``engine``'s models are Hugging Face models, checked from their config before any loads (its
    declaration says; a plugin module without one resolves its own model names)."""
    try:
        decl = registry.backend(engine)
    except registry.EngineUnavailable:
        return False
    return decl is not None and decl.hf_models


def check_models(cfg: EngineConfig, requests: Mapping[str, str | Sequence[str] | None]) -> None:
    """Every model of ``requests`` checked for its role from its files and config, without loading weights
    (:func:`~breaknli_fast.engines.model_info.check_model`): a folder without weights, a masked LM as the
    classifier or a 2-label classifier is one line before the first model loads, and before the first cell of a
    study over several classifiers runs."""
    from breaknli_fast.engines.model_info import check_model

    for r in ROLES:
        if not hf_models(cfg.engine_of(r.name)):
            continue
        value = requests.get(r.name)
        for name in (model_names(value) if r.many else [value] if value else []):
            check_model(name, r.name, cfg.label_map if r.name == CLASSIFIER else None)


def load_models(cfg: EngineConfig, requests: Mapping[str, str | Sequence[str] | None],
                note: Callable[[str], None] | None = None) -> Models:
    """Load the models of ``requests`` (role -> model name, or several names for a role with ``many``: ``"a,b"`` or
    a list; a role left out or None is not loaded) on the engine of ``cfg``. With ``engine="auto"`` a model that
    the chosen backend cannot take (no export, an export that fails validation) is loaded on torch instead, and
    ``note`` is told why."""
    cfg.check_precisions()
    wanted = [(r, model_names(requests.get(r.name)) if r.many else requests.get(r.name)) for r in ROLES]
    wanted = [(r, m) for r, m in wanted if m]
    cfg.check_roles([r.name for r, _ in wanted])  # every role on its engine, before the first loads
    by_role = {r.name: cfg.engine_of(r.name) for r, _ in wanted}

    def load(r: Any, m: Any, name: str) -> Any:
        kw = dict(precision=cfg.precision_of(r.name), device=cfg.device, **cfg.options(r.name, name))
        return {x: r.load(name, x, **kw) for x in m} if r.many else r.load(name, m, **kw)

    def load_all() -> dict[str, Any]:
        return {r.name: load(r, m, by_role[r.name]) for r, m in wanted}

    notes: list[str] = []
    try:
        engines = load_all()
    except FALLBACK_ERRORS as e:
        auto = [r for r, _ in wanted if cfg.requested_engine_of(r.name) == registry.AUTO and by_role[r.name] != "torch"]
        if not auto:
            raise
        msg = (f"--engine auto: {', '.join(sorted({by_role[r.name] for r in auto}))} is not usable here "
               f"({first_line(e)}); running on torch")
        notes.append(msg)
        if note:
            note(msg)
        by_role.update({r.name: "torch" for r in auto})  # the roles auto chose for; a role named on its own stays
        engines = load_all()
    label = role_label(by_role) if by_role else registry.resolve_engine(cfg.engine, cfg.precision, cfg.device)
    return Models(engines, engine=label, requested=cfg.engine, notes=notes, by_role=by_role)


SHORT_ROLES = {CLASSIFIER: "clf", GENERATOR: "gen", MASK_FILLER: "mlm"}


def role_label(by_role: Mapping[str, str]) -> str:
    """The engines of the roles as one name: ``ort`` when one engine runs them all, else one per role in the
    roles' order (``clf-openvino+gen-ort``)."""
    if len(set(by_role.values())) == 1:
        return next(iter(by_role.values()))
    return "+".join(f"{SHORT_ROLES.get(r, r)}-{e}" for r, e in by_role.items())


def role_engines(cfg: EngineConfig, roles: Sequence[str], loaded: Mapping[str, str] | None = None) -> dict[str, Any]:
    """config.json's ``roles``: per role the engine that ran it (``loaded``, else the config's choice), the one
    asked for, its precision, and the versions of the libraries its backend declares."""
    from breaknli_fast.envinfo import package_version

    out: dict[str, Any] = {}
    for r in roles:
        name = (loaded or {}).get(r) or cfg.engine_of(r)
        try:
            decl = registry.backend(name)
        except registry.EngineUnavailable:
            decl = None
        libs = decl.requires if decl is not None else ()
        out[r] = {"engine": name, "requested": cfg.requested_engine_of(r), "precision": cfg.precision_of(r),
                  "runtime": {m: package_version(m) for m in libs}}
    return out
