"""Moving old state to pulumi-command: the old dynamic steps leave the state, everything else stays."""

from __future__ import annotations

import copy
import json
import sys

from sandbox.processes import run_captured
from scripts.forget_dynamic_steps import DYNAMIC_TYPE, forget_dynamic_steps
from tests.support.paths import ROOT

STACK = "urn:pulumi:prod::vllm-fleet::pulumi:pulumi:Stack::vllm-fleet-prod"
HOST = "urn:pulumi:prod::vllm-fleet::vllm-fleet:index:GpuHost::gpu-01"
PROVIDER = "urn:pulumi:prod::vllm-fleet::pulumi:providers:pulumi-python::default"
PREFLIGHT = f"urn:pulumi:prod::vllm-fleet::vllm-fleet:index:GpuHost${DYNAMIC_TYPE}::gpu-01-preflight"
TOOLS = f"urn:pulumi:prod::vllm-fleet::vllm-fleet:index:GpuHost${DYNAMIC_TYPE}::gpu-01-tools"


def old_export() -> dict[str, object]:
    return {
        "version": 3,
        "deployment": {
            "manifest": {"time": "2026-11-30T00:00:00Z"},
            "secrets_providers": {"type": "passphrase", "state": {"salt": "v1:x"}},
            "resources": [
                {"urn": STACK, "type": "pulumi:pulumi:Stack", "custom": False},
                {"urn": HOST, "type": "vllm-fleet:index:GpuHost", "custom": False, "parent": STACK},
                {"urn": PROVIDER, "type": "pulumi:providers:pulumi-python", "custom": True},
                {"urn": PREFLIGHT, "type": DYNAMIC_TYPE, "custom": True, "parent": HOST, "provider": PROVIDER},
                {
                    "urn": TOOLS,
                    "type": DYNAMIC_TYPE,
                    "custom": True,
                    "parent": HOST,
                    "dependencies": [PREFLIGHT],
                    "propertyDependencies": {"connection": [PREFLIGHT]},
                },
            ],
        },
    }


def test_drops_dynamic_steps_and_their_provider_only() -> None:
    export = old_export()
    before = copy.deepcopy(export)
    result, dropped = forget_dynamic_steps(export)
    assert export == before, "the input is left as it was"
    assert sorted(dropped) == sorted([PROVIDER, PREFLIGHT, TOOLS])
    deployment = result["deployment"]
    assert [r["urn"] for r in deployment["resources"]] == [STACK, HOST]
    assert deployment["secrets_providers"] == before["deployment"]["secrets_providers"]  # type: ignore[index]


def test_leaves_current_state_unchanged() -> None:
    export = old_export()
    export["deployment"]["resources"] = export["deployment"]["resources"][:2]  # type: ignore[index]
    result, dropped = forget_dynamic_steps(export)
    assert dropped == [] and result == export


def test_command_line_reads_stdin_and_names_what_it_dropped() -> None:
    result = run_captured(
        [sys.executable, str(ROOT / "scripts" / "forget_dynamic_steps.py")], input=json.dumps(old_export()), check=True
    )
    assert [r["urn"] for r in json.loads(result.stdout)["deployment"]["resources"]] == [STACK, HOST]
    assert f"dropped {PREFLIGHT}" in result.stderr and "3 dynamic-provider resources dropped" in result.stderr
