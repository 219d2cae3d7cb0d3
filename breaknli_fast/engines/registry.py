"""Engine registry: name -> backend package, whose ``BACKEND`` declaration (:class:`~.backend.Backend`) says what it
supports. Backends import lazily, so ``torch`` works without onnxruntime, TensorRT or CTranslate2 installed.

A backend is one package: its loaders (``load_classifier(model, precision, device, **opts)``,
``load_generator(...)``, ``load_mask_filler(...)`` for the roles it has), returning engines of the contract of
:mod:`breaknli_fast.engines.base`, its runtime, its exporter, and the declaration in its ``__init__``. Adding an
engine is that package and its entry point (group ``breaknli_fast.backends``: ``name = "package"`` in the package's
own metadata, so a backend installed as a package of its own joins the CLI; :func:`register` in code and tests). A
module without a declaration
(a plugin written as one module with loaders and optionally ``OPTIONS``) is still accepted: it runs every role it
has a loader for, at any precision its loaders take.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Mapping

from breaknli_fast.engines.backend import Backend, EngineUnavailable, PrecisionError, device_kind  # noqa: F401
from breaknli_fast.engines.base import (CLASSIFIER, GENERATOR, MASK_FILLER, ROLES, ClassifierBase, GeneratorBase, MaskFillerBase, as_classifier, as_generator, as_mask_filler)
from breaknli_fast.engines.options import EngineOptionError, EngineOptions
from breaknli_fast.errors import first_line

# engine name -> package (with a BACKEND declaration) or module (loaders only); the order is auto's preference
_ENGINES: dict[str, str] = {
    # OpenVINO's CPU runtime, every role; auto's int8 classifier and masked LM
    "openvino": "breaknli_fast.backends.openvino",
    "ort": "breaknli_fast.backends.ort",
    "torch": "breaknli_fast.backends.pytorch",
    "tensorrt": "breaknli_fast.backends.tensorrt",
    "ct2": "breaknli_fast.backends.ct2",  # CTranslate2: the generator only (the classifier on ort / torch)
    "cudagraph": "breaknli_fast.backends.cudagraph",  # torch on one GPU: own decode loop and classifier, CUDA graphs
}

AUTO = "auto"
REFERENCE = "torch"  # the fp32 reference, and auto's fallback
# every precision some backend runs (command-line choices); each backend's own are in its declaration
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
def precision_name(value: str, what: str = "precision") -> str:
    """``value`` when it names a precision some backend runs (lower-cased), else one line naming the choices; which
    precisions a backend runs for a role on a device is its declaration's (:meth:`Backend.check`)."""
    v = str(value).strip().lower()
    if v not in PRECISIONS:
        raise PrecisionError(f"{what} {value!r}: use {', '.join(PRECISIONS)}")
    return v


# prefixes of an option meant for one role only (bench specs, EngineConfig.extra)
ROLE_PREFIXES = {"clf.": CLASSIFIER, "gen.": GENERATOR, "mlm.": MASK_FILLER}
_LOADERS = {CLASSIFIER: "load_classifier", GENERATOR: "load_generator", MASK_FILLER: "load_mask_filler"}


ENTRY_POINTS = "breaknli_fast.backends"  # the entry-point group a backend package joins by
_PLUGINS_READ = False


def register(name: str, module: str) -> None:
    """Register a backend package (with ``BACKEND``) or a loaders module under ``name``."""
    _ENGINES[name] = module


def _read_plugins() -> None:
    """The backends installed packages declare (entry points of group :data:`ENTRY_POINTS`, ``name = "package"``),
    read once; the built-in ones are declared there too (pyproject.toml) and listed in ``_ENGINES`` for a checkout
    that runs uninstalled. A name registered already keeps its module."""
    global _PLUGINS_READ
    if _PLUGINS_READ:
        return
    _PLUGINS_READ = True
    from breaknli_fast.envinfo import installed_entry_points

    for name, value in installed_entry_points(ENTRY_POINTS):
        _ENGINES.setdefault(name, value.split(":", 1)[0])


def rescan() -> None:
    """Read the entry points again (a package installed while this process runs; tests)."""
    global _PLUGINS_READ
    _PLUGINS_READ = False
    _read_plugins()


def names() -> list[str]:
    _read_plugins()
    return list(_ENGINES)


class BrokenBackend(EngineUnavailable):
    """A registered backend whose module raises when imported (a plugin with a bug, or one built for another
    version): one line naming it; every command that does not use it works (they skip it)."""


def _import(engine: str) -> Any:
    _read_plugins()
    if engine not in _ENGINES:
        raise EngineUnavailable(f"unknown engine {engine!r}; choose one of {', '.join(_ENGINES)}")
    try:
        return importlib.import_module(_ENGINES[engine])
    except Exception as e:  # noqa: BLE001 - whatever the plugin's module raises
        raise BrokenBackend(f"the {engine} backend ({_ENGINES[engine]}) does not import: {type(e).__name__}: "
                            f"{first_line(e)}") from e


def backend(engine: str) -> Backend | None:
    """``engine``'s declaration (``None`` for a plugin module without one); the module is imported here, when the
    engine is first used (:class:`BrokenBackend` where it raises)."""
    return getattr(_import(engine), "BACKEND", None)


def usable_backends() -> Iterator[tuple[str, Backend | None]]:
    """(name, declaration) of every registered backend that imports, in the registry's order, each imported as the
    loop reaches it: what a loop over them (``auto``, the export formats, the versions recorded) reads; a broken
    one is left out here and reported by ``breaknli-fast env`` (:func:`broken_backends`)."""
    for name in names():
        try:
            decl = backend(name)
        except BrokenBackend:
            continue
        yield name, decl


def broken_backends() -> dict[str, str]:
    """name -> the one-line reason, for every registered backend whose module does not import."""
    out = {}
    for name in names():
        try:
            backend(name)
        except BrokenBackend as e:
            out[name] = str(e)
    return out


def module_of(engine: str) -> str:
    """The module ``engine`` is registered with (no import)."""
    _read_plugins()
    return _ENGINES[engine]


def _module(engine: str) -> Any:
    """The module with ``engine``'s loaders."""
    decl = backend(engine)
    return importlib.import_module(decl.loaders) if decl is not None else _import(engine)


def backend_for_format(format: str) -> Backend | None:
    """The declared backend whose exporter writes ``format`` (``onnx``, ``tensorrt``, ``ct2``), if any."""
    for _, decl in usable_backends():
        if decl is not None and format in decl.formats:
            return decl
    return None


def declared_packages() -> tuple[str, ...]:
    """The libraries every registered backend declares (``requires``): the versions config.json, bench.json and
    ``env`` record beside the core ones, a plugin's runtime included."""
    out: list[str] = []
    for _, decl in usable_backends():  # a plugin that does not import: its versions are not recorded
        out += [m for m in (decl.requires if decl is not None else ()) if m not in out]
    return tuple(out)


def export_formats() -> list[str]:
    return [f for name, decl in usable_backends() for f in ((decl or Backend(name, "", {})).formats)]


def resolve_engine(engine: str, precision: str = "fp32", device: str = "cpu", role: str | None = None) -> str:
    """The engine that ``auto`` stands for: the first registered backend whose declaration lets ``auto`` pick it at
    this precision on this device, for ``role`` (None: a backend auto picks for every role), and whose libraries are
    installed (on the CPU: ``openvino`` for int8 classifiers and masked LMs where OpenVINO is installed, ``ort`` for
    fp32 and the int8 generator wherever onnxruntime is; BENCHMARKS.md), else the torch reference. Any other name is
    returned as it is."""
    if engine != AUTO:
        return engine
    for name, decl in usable_backends():
        if decl is not None and decl.auto_picks(precision, device, role):
            return name
    return REFERENCE


def role_engine(engine: str, role: str, precision: str = "fp32", device: str = "cpu") -> str:
    """The engine that runs ``role`` when ``engine`` is named for every role: ``engine`` itself (``auto``
    resolved), or the engine its declaration hands the role to (``delegates``, itself resolved)."""
    name = resolve_engine(engine, precision, device, role)
    decl = backend(name)
    if decl is not None and role not in decl.precisions and role in decl.delegates:
        other = resolve_engine(decl.delegates[role], precision, device, role)
        if other == name or role not in ((backend(other) or Backend(other, "", {role: {}})).precisions):
            raise EngineUnavailable(f"the {name} engine hands its {role} to {other}, which does not run it either")
        return other
    return name


def check(engine: str, role: str, precision: str, device: str = "cpu") -> None:
    """Refuse in one line what ``engine``'s declaration does not run (a role, a precision on a device); nothing for
    a plugin without a declaration. Libraries are not checked here (:meth:`Backend.require`)."""
    decl = backend(engine)
    if decl is not None:
        decl.check(role, precision, device)
    elif not hasattr(_module(engine), _LOADERS[role]):
        raise EngineUnavailable(f"the {engine} engine has no {role} role")


def options_class(engine: str) -> type[EngineOptions] | None:
    """The typed options class of ``engine``'s loaders (``None`` for a backend that declares none)."""
    decl = backend(engine)
    if decl is not None:
        return decl.options_class()
    return getattr(_module(engine), "OPTIONS", None)


def role_options(engine: str, role: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``engine``'s ``role`` loader from options meant for any role: ``clf.key`` / ``gen.key`` /
    ``mlm.key`` go to that role only; a plain key goes to each role whose loader takes it (to every role for a
    backend without an options class). A plain key that no role takes raises the one-line
    :class:`~breaknli_fast.engines.options.EngineOptionError`; prefixed keys are checked by the loaders."""
    cls = options_class(engine)
    out: dict[str, Any] = {}
    for key, value in opts.items():
        prefix = next((p for p in ROLE_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            if ROLE_PREFIXES[prefix] == role:
                out[key[len(prefix):]] = value
        elif cls is None or key in cls.keys(role):
            out[key] = value
        elif not any(key in cls.keys(r) for r in ROLES):
            valid = sorted({k for r in ROLES for k in cls.keys(r)})
            raise EngineOptionError(f"unknown {engine} option {key!r}; valid: {', '.join(valid)}")
    return out


def split_options(engine: str, opts: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(classifier options, generator options) of ``engine`` (:func:`role_options` of both roles)."""
    return role_options(engine, CLASSIFIER, opts), role_options(engine, GENERATOR, opts)


def _load(engine: str, role: str, model: str, precision: str, device: str, opts: dict[str, Any]) -> Any:
    engine = role_engine(engine, role, precision, device)  # a role the backend hands to another engine
    check(engine, role, precision, device)
    decl = backend(engine)
    if decl is not None:
        decl.require()
    loader = getattr(_module(engine), _LOADERS[role], None)
    if loader is None:
        raise EngineUnavailable(f"the {engine} engine has no {role} role")
    return loader(model, precision=precision, device=device, **opts)


def load_classifier(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> ClassifierBase:
    """``engine``'s classifier of ``model``, with every member of the contract (defaults where the backend
    implements only the :class:`~breaknli_fast.engines.base.Classifier` protocol)."""
    return as_classifier(_load(engine, CLASSIFIER, model, precision, device, opts))


def load_generator(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> GeneratorBase:
    """``engine``'s generator of ``model``, with every member of the contract (defaults where the backend
    implements only the :class:`~breaknli_fast.engines.base.Generator` protocol)."""
    return as_generator(_load(engine, GENERATOR, model, precision, device, opts))


def load_mask_filler(engine: str, model: str, precision: str = "fp32", device: str = "cpu",
                     **opts: Any) -> MaskFillerBase:
    """``engine``'s mask filler (masked language model) of ``model``, with every member of the contract; a
    backend without the role raises :class:`EngineUnavailable`."""
    return as_mask_filler(_load(engine, MASK_FILLER, model, precision, device, opts))
