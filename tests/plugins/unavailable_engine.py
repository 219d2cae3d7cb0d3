"""An engine that never loads on this machine (as TensorRT where it is not installed): loaders only, each raising
the one-line EngineUnavailable. The bench skips it, reports why, and a --strict bench fails."""

from breaknli_fast.engines.backend import EngineUnavailable


def load_classifier(model, precision="fp32", device="cpu", **opts):
    raise EngineUnavailable("the unavailable engine needs a library this machine lacks (tests/plugins)")


load_generator = load_classifier
