"""Drift, from a host's survey, as the preview counts it into the step that repairs it and as `make status`
says it (controller/drift.py): one rule for both, on the contract's Survey."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from controller import checks, drift
from host.contract import MODEL_CHANGED, MODEL_NO_MANIFEST, MODEL_VERIFIED, Survey
from models.loader import parse_stack_config
from render import report
from render.units import render_unit


def surveyed(dev_raw: dict[str, Any], **unit: Any) -> tuple[Any, Survey]:
    """The dev stack's deployment and a survey of its host where it serves as the stack applied it, its
    unit's facts overridden by `unit`."""
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    digest = hashlib.sha256(render_unit(rd, "dev").text.encode()).hexdigest()
    facts = {
        "name": rd.unit_name,
        "activeState": "active",
        "enabled": True,
        "managed": True,
        "owner": "dev.chat",
        "sha256": digest,
        "stagedSha256": digest,
        "envMatchesStaged": True,
        **unit,
    }
    models = {rd.model_path: {"dir": rd.model_path, "state": MODEL_VERIFIED, "repairs": {"dev": 1}}}
    return rd, Survey.from_dict(
        {"units": [facts], "active": {"dev.chat": {"unit": rd.unit_name, "repairs": 4}}, "models": models}
    )


@pytest.mark.parametrize(
    ("unit", "said"),
    [
        ({"activeState": "inactive"}, "vllm-tiny-chat-a.service is inactive: it serves nothing"),
        ({"activeState": "failed"}, "vllm-tiny-chat-a.service is failed: it serves nothing"),
        (
            {"activeState": "activating", "subState": "auto-restart"},
            "vllm-tiny-chat-a.service is activating (auto-restart): it serves nothing",
        ),
        ({"sha256": "e" * 64}, "vllm-tiny-chat-a.service was edited on the host (sha256 eeeeeeeeeeee"),
        ({"enabled": False}, "vllm-tiny-chat-a.service is not enabled: a reboot would not start it"),
        (
            {"envMatchesStaged": False},
            "vllm-tiny-chat-a.service's environment file differs from the one the stack staged",
        ),
    ],
)
def test_unit_drift_re_runs_the_activation_and_make_status_says_the_same(
    dev_raw: dict[str, Any], unit: dict[str, Any], said: str
) -> None:
    rd, found = surveyed(dev_raw, **unit)
    count, problems = drift.activation_repairs("dev", rd, found)
    assert count == 5 and len(problems) == 1 and problems[0].startswith(said), problems
    assert drift.drift(drift.Applied.from_status_entry(report.spec(rd, "dev")), found) == problems


def test_what_serves_as_applied_is_no_drift_loading_included(dev_raw: dict[str, Any]) -> None:
    for state in ("active", "activating"):
        rd, found = surveyed(dev_raw, activeState=state)
        assert drift.activation_repairs("dev", rd, found) == (4, [])
        assert drift.drift(drift.applied(rd, "dev"), found) == []


def test_an_edit_is_judged_against_the_staged_unit_not_a_new_config(dev_raw: dict[str, Any]) -> None:
    """The stack's config changed (its unit renders differently), the host's unit is what was staged: the
    activation runs for the change, and no hand edit is said."""
    rd, found = surveyed(dev_raw, sha256="a" * 64, stagedSha256="a" * 64)
    assert drift.activation_repairs("dev", rd, found) == (4, [])


def test_a_unit_gone_from_the_host_is_drift_but_a_pending_swap_or_first_deployment_is_not(
    dev_raw: dict[str, Any],
) -> None:
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    gone = Survey.from_dict({"active": {"dev.chat": {"unit": rd.unit_name, "repairs": 2}}})
    assert drift.activation_repairs("dev", rd, gone) == (3, [f"{rd.unit_name} is missing from the host"])
    other = Survey.from_dict({"active": {"dev.chat": {"unit": "vllm-before.service", "repairs": 2}}})
    assert drift.activation_repairs("dev", rd, other) == (2, [])
    assert drift.activation_repairs("dev", rd, Survey()) == (0, [])


@pytest.mark.parametrize(
    ("files", "count", "said"),
    [
        ({"state": MODEL_VERIFIED, "repairs": {"dev": 2, "e2e": 7}}, 2, None),
        (
            {"state": MODEL_CHANGED, "changed": ["model-00002-of-00003.safetensors"], "repairs": {"dev": 2}},
            3,
            "model files in /shared/tiny-chat-a: changed: model-00002-of-00003.safetensors",
        ),
        (
            {"state": "incomplete download", "repairs": {"e2e": 7}},
            1,
            "model files in /shared/tiny-chat-a: incomplete download",
        ),
        # Deleted whole (or never downloaded): the count kept in the host's state still goes one up.
        ({"state": MODEL_NO_MANIFEST, "repairs": {"dev": 2}}, 3, "model files in /shared/tiny-chat-a: no manifest"),
    ],
)
def test_model_files_that_differ_from_what_was_verified_re_run_the_stacks_download_step(
    files: dict[str, Any], count: int, said: str | None
) -> None:
    found = Survey.from_dict({"models": {"/shared/tiny-chat-a": {"dir": "/shared/tiny-chat-a", **files}}})
    assert drift.download_repairs("dev", "/shared/tiny-chat-a", found) == (count, said)
    assert drift.download_repairs("dev", "/shared/other", found) == (0, None)  # not asked about


def test_the_survey_checks_every_download_directory_of_each_host(dev_raw: dict[str, Any]) -> None:
    assert checks.model_dirs(parse_stack_config(dev_raw)) == {"sandbox": ["/shared/tiny-chat-a"]}


def test_gpu_holders_of_other_units_are_drift_for_make_status(dev_raw: dict[str, Any]) -> None:
    rd, found = surveyed(dev_raw)
    held = Survey.from_dict(
        {
            **found.to_dict(),
            "gpuHolders": [
                {"pid": 7, "gpus": [1], "unit": None},
                {"pid": 8, "gpus": [0], "unit": rd.unit_name, "unitState": "active", "unitManaged": True},
            ],
        }
    )
    assert drift.drift(drift.applied(rd, "dev"), held) == ["PID 7 of no unit holds GPU(s) 1 of the deployment"]
