"""A measurement for the runner's tests: it measures nothing, writes its arguments back (and whether its process
got OMP_WAIT_POLICY from the environment, as a user sets it), fails on request, and renders a section of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Chapter, Measurement, Section, option
from breaknli_fast.suite.format import of_kind


@dataclass
class EchoConfig:
    n: int = option(1, min=0, max=1000, help="the number written back")
    fail: bool = option(False, help="refuse to measure (a one-line error)")


@dataclass
class EchoPayload:
    n: int | None = None
    omp_from_environment: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Echo(Measurement):
    name = "echo"
    summary = "writes its arguments back (tests)"
    kind = "echo"
    config_class = EchoConfig
    payload_class = EchoPayload

    def run(self, config: EchoConfig, recorder: Any) -> EchoPayload:
        if config.fail:
            raise UserError("echo: asked to fail")
        import breaknli_fast

        return EchoPayload(n=config.n, omp_from_environment="OMP_WAIT_POLICY" in breaknli_fast.USER_SET_ENV)


Echo.chapters = (Chapter("8", "8. Echoes", order=120),)
Echo.sections = (Section("8/echo", "The numbers written back", "an echo", of_kind("echo"), 10,
                         render=lambda doc: f"n = {doc.payload.n}"),)
