"""Drop the remote steps of vllm-fleet's old dynamic provider from an exported stack state.

Before pulumi-command, every remote step was a `pulumi-python:dynamic:Resource`. The current program
makes the same steps as `command:remote:Command`, so on old state the engine would create the new steps
and then delete the old ones, running their delete scripts (stopping the served model) through a
provider that no longer exists. Removing the old steps from the state first, without running anything,
lets the next `pulumi up` run each step's idempotent script once: it finds the model downloaded and
verified and the unit serving, and changes nothing on the host.

    pulumi stack export --stack prod --file prod-state-backup.json
    python scripts/forget_dynamic_steps.py < prod-state-backup.json > prod-state.json
    pulumi stack import --stack prod --file prod-state.json

Reads an export on stdin, writes it on stdout, and names what it dropped on stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any

DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"
DYNAMIC_PROVIDER_TYPE = "pulumi:providers:pulumi-python"


def forget_dynamic_steps(export: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The export without the dynamic steps and their provider, and the URNs that were dropped."""
    result = json.loads(json.dumps(export))  # a copy: the caller's export stays as it was
    resources = result.get("deployment", {}).get("resources") or []
    dropped = [r["urn"] for r in resources if r.get("type") in (DYNAMIC_TYPE, DYNAMIC_PROVIDER_TYPE)]
    kept = [r for r in resources if r["urn"] not in dropped]
    for resource in kept:
        for key in ("dependencies", "parent"):
            value = resource.get(key)
            if isinstance(value, list):
                resource[key] = [urn for urn in value if urn not in dropped]
        for name, urns in list((resource.get("propertyDependencies") or {}).items()):
            resource["propertyDependencies"][name] = [urn for urn in urns if urn not in dropped]
    if resources:
        result["deployment"]["resources"] = kept
    return result, dropped


def main() -> int:
    export = json.load(sys.stdin)
    result, dropped = forget_dynamic_steps(export)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    for urn in dropped:
        print(f"dropped {urn}", file=sys.stderr)
    print(f"{len(dropped)} dynamic-provider resources dropped; nothing on any host was touched", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
