"""The graph floor of `make bench ARGS=noop`: a Pulumi program that declares exactly the resources of a
deployed stack, read back from the stack's exported state (graph.json beside it), and does nothing else:
no config models, no checks, no rendering, no typed provider classes. Each resource gets the type, name,
parent, dependencies, inputs, options and (for components) outputs the state holds, and the program takes
the SDK changes of vllm-fleet's own (controller/sdk.py's install). So its no-op costs
what the engine and the SDK need for this graph of resources; what vllm-fleet's program costs beyond it
is its own Python. The bench checks that its preview is a no-op before it times it.

Run by the bench as the `__main__.py` of a project named like vllm-fleet's, on the same stack;
VLLM_FLEET_BENCH_ROOT names the checkout whose controller/sdk.py it uses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pulumi

ROOT = Path(os.environ["VLLM_FLEET_BENCH_ROOT"])
sys.path.insert(0, str(ROOT))

from controller import sdk  # noqa: E402

sdk.install()

# The special keys of Pulumi's state format (sdk/go/common/resource/sig): a secret and an asset.
SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"


def value(state_value: Any) -> Any:
    """A property of the exported state (`--show-secrets`) as the program would pass it."""
    if isinstance(state_value, dict):
        if state_value.get(SIG) == SECRET_SIG:
            return pulumi.Output.secret(value(json.loads(state_value["plaintext"])))
        if state_value.get(SIG) == ASSET_SIG:
            # The project's assets are paths relative to its folder (render/host_bundle.archive_file).
            return pulumi.FileAsset(str(ROOT / state_value["path"]))
        return {key: value(item) for key, item in state_value.items()}
    if isinstance(state_value, list):
        return [value(item) for item in state_value]
    return state_value


class Component(pulumi.ComponentResource):
    def __init__(self, type_: str, name: str, opts: pulumi.ResourceOptions) -> None:
        super().__init__(type_, name, None, opts)


def provider_version(provider_urn: str) -> str:
    """The default provider's version from its name (`default_1_2_1` -> 1.2.1)."""
    return provider_urn.split("::")[-2].removeprefix("default_").replace("_", ".")


def replay(graph: list[dict[str, Any]]) -> None:
    declared: dict[str, pulumi.Resource] = {}
    components: list[tuple[Component, dict[str, Any]]] = []
    for resource in graph:
        name = resource["urn"].split("::")[-1]
        if resource["type"] == "pulumi:pulumi:Stack":
            for key, output in (resource.get("outputs") or {}).items():
                pulumi.export(key, value(output))
            continue
        timeouts = resource.get("customTimeouts") or {}
        opts = pulumi.ResourceOptions(
            parent=declared.get(resource.get("parent", "")),
            depends_on=[declared[urn] for urn in resource.get("dependencies") or []],
            additional_secret_outputs=resource.get("additionalSecretOutputs"),
            replace_on_changes=resource.get("replaceOnChanges"),
            custom_timeouts=pulumi.CustomTimeouts(**{verb: f"{seconds}s" for verb, seconds in timeouts.items()})
            if timeouts
            else None,
            version=provider_version(resource["provider"]) if resource.get("provider") else None,
        )
        if resource["custom"]:
            declared[resource["urn"]] = pulumi.CustomResource(
                resource["type"], name, value(resource.get("inputs") or {}), opts
            )
        else:
            component = Component(resource["type"], name, opts)
            declared[resource["urn"]] = component
            components.append((component, resource.get("outputs") or {}))
    for component, outputs in components:
        component.register_outputs(value(outputs))


# In the state's order, which puts every parent and dependency before the resources that name them.
replay(
    [
        resource
        for resource in json.loads(Path("graph.json").read_text(encoding="utf-8"))["deployment"]["resources"]
        if not resource["type"].startswith("pulumi:providers:")
    ]
)
