"""Write a fleet stack of N reference servers: Pulumi.prod.yaml's host, storage and deployment written once
under vllm-fleet:defaults, then N hosts that give only their name and address and N deployments that give
only their name and host (every host gets its storage from the defaults; MiniMax stays kept on disk).

    .venv/bin/python -m scripts.fleet_stack 1024 > Pulumi.fleet1024.yaml
    pulumi stack init fleet1024
    VLLM_FLEET_OFFLINE=1 PULUMI_SKIP_CHECKPOINTS=true pulumi preview --stack fleet1024

`make bench ARGS=fleet` previews the stacks this writes. Every host shares prod's placeholder hostKey here;
a real fleet gives each host its own (see the README's "A fleet: many hosts in one stack").
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path
from typing import Any

import yaml

from models.loader import NAMESPACE, read_stack_file

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "Pulumi.prod.yaml"


def fleet_values(hosts: int, max_unavailable: int = 8, reference: Path = REFERENCE) -> dict[str, Any]:
    """The `vllm-fleet:` values of the fleet (namespace stripped), as the loader takes them."""
    raw = read_stack_file(reference)
    (host,), (storage,), (deployment,) = raw.pop("hosts"), raw.pop("storage"), raw.pop("deployments")
    first = ipaddress.ip_address(host.pop("address"))
    host.pop("name")
    storage = {k: v for k, v in storage.items() if k not in ("name", "host")}
    deployment = {k: v for k, v in deployment.items() if k not in ("name", "host")}
    # The replicas of one model roll out as a group: maxUnavailable hosts swap at a time.
    deployment["rollout"] = {"group": "kimi", "maxUnavailable": min(max_unavailable, max(1, hosts))}
    width = max(2, len(str(hosts)))
    names = [f"gpu-{i + 1:0{width}d}" for i in range(hosts)]
    return {
        # Not the reference server's open access (its clients' own decision): a fleet is served with API keys,
        # which the bench and the tests set as a secret.
        **{k: v for k, v in raw.items() if k not in ("models", "access")},
        "defaults": {"host": host, "storage": storage, "deployment": deployment},
        "hosts": [{"name": name, "address": str(first + i)} for i, name in enumerate(names)],
        "models": raw["models"],
        "deployments": [{"name": f"kimi-{name.removeprefix('gpu-')}", "host": name} for name in names],
    }


def fleet_stack(hosts: int, max_unavailable: int = 8) -> str:
    """The fleet as a `Pulumi.<stack>.yaml`."""
    values = fleet_values(hosts, max_unavailable)
    header = (
        f"# {hosts} reference servers (scripts/fleet_stack.py from Pulumi.prod.yaml): each serves Kimi-K2.5 on its\n"
        "# eight GPUs and keeps MiniMax-M2.5 on disk; what they share is written once, in vllm-fleet:defaults.\n"
    )
    document = {"config": {f"{NAMESPACE}:{k}": v for k, v in values.items()}}
    return header + yaml.safe_dump(document, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("hosts", type=int, help="how many servers")
    parser.add_argument("--max-unavailable", type=int, default=8, help="hosts that swap at a time (default 8)")
    args = parser.parse_args(argv)
    sys.stdout.write(fleet_stack(args.hosts, args.max_unavailable))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
