"""The one GPU-holder rule (host/judgement.holder_verdict): who holds a GPU the deployment's engine gets,
and whether it may be stopped. The preview's and the swap's judgement and the GPU-release guard at every
engine start read this one table; it is tested here, once, case by case."""

from __future__ import annotations

import pytest

from host.contract import ProcessUnit
from host.judgement import MAY_STOP, Holder, holder_verdict

OWN = "vllm-chat.service"


def ours(unit: str) -> bool:
    return unit == OWN


@pytest.mark.parametrize(
    ("unit", "foreign", "holder", "may_stop"),
    [
        # The deployment's own engine (or a unit it takes over), running or not: the swap stops it.
        (ProcessUnit(OWN, "active", True, "dev.chat"), "refuse", Holder.OWN, True),
        (ProcessUnit(OWN, "inactive", True, "dev.chat"), "refuse", Holder.OWN, True),
        # Another deployment's unit: never while it runs or loads; what it left once it stopped, always.
        (ProcessUnit("vllm-other.service", "active", True, "prod.other"), "stop", Holder.DEPLOYMENT, False),
        (ProcessUnit("vllm-other.service", "activating", True, "prod.other"), "stop", Holder.DEPLOYMENT, False),
        (ProcessUnit("vllm-other.service", "failed", True, "prod.other"), "refuse", Holder.LEFTOVER, True),
        # A running unit vllm-fleet does not manage (hand-made vLLM or anything else): never, whatever
        # foreignGpuProcesses says; name it in replaces to take it over.
        (ProcessUnit("vllm-legacy.service", "active", False), "stop", Holder.HAND_MADE, False),
        (ProcessUnit("jupyter.service", "active", False), "stop", Holder.HAND_MADE, False),
        # No unit, or one that no longer runs: foreign, stopped only with foreignGpuProcesses: stop.
        (None, "refuse", Holder.FOREIGN, False),
        (None, "stop", Holder.FOREIGN, True),
        (ProcessUnit("vllm-legacy.service", "inactive", False), "refuse", Holder.FOREIGN, False),
    ],
)
def test_the_gpu_holder_table(unit: ProcessUnit | None, foreign: str, holder: Holder, may_stop: bool) -> None:
    verdict = holder_verdict(unit, ours, foreign)
    assert (verdict.holder, verdict.may_stop) == (holder, may_stop)


def test_the_table_names_every_kind_of_holder() -> None:
    assert set(MAY_STOP) == set(Holder)
