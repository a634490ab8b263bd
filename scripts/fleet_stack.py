"""Write a fleet stack of N reference servers: Pulumi.prod.yaml's host, storage and deployment written once
under vllm-fleet:defaults, then N hosts that give only their name and address and N deployments that give
only their name and host (every host gets its storage from the defaults; MiniMax stays kept on disk), and
beside it the known_hosts file that vllm-fleet:knownHostsFile names: each host's own ed25519 key, as
`ssh-keyscan -t ed25519` prints it (a distinct real key per host, derived from its name: scripts/host_keys.py).

    .venv/bin/python -m scripts.fleet_stack 1024 fleet1024     # Pulumi.fleet1024.yaml, known_hosts.fleet1024
    pulumi stack init fleet1024
    VLLM_FLEET_OFFLINE=1 PULUMI_SKIP_CHECKPOINTS=true pulumi preview --stack fleet1024

`make bench ARGS=fleet` previews the stacks this writes. `--hashed` writes the names hashed, as
`ssh-keygen -H` would (HashKnownHosts).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import ipaddress
import sys
from pathlib import Path
from typing import Any

import yaml

from models.host_keys import lookup_name
from models.loader import NAMESPACE, read_stack_file
from scripts.host_keys import host_seed, openssh_public_key

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "Pulumi.prod.yaml"


def known_hosts_name(stack: str) -> str:
    """The known_hosts file of a stack, beside its stack file."""
    return f"known_hosts.{stack}"


def fleet_values(
    hosts: int, max_unavailable: int = 8, reference: Path = REFERENCE, known_hosts_file: str = "known_hosts.fleet"
) -> dict[str, Any]:
    """The `vllm-fleet:` values of the fleet (namespace stripped), as the loader takes them."""
    raw = read_stack_file(reference)
    (host,), (storage,), (deployment,) = raw.pop("hosts"), raw.pop("storage"), raw.pop("deployments")
    first = ipaddress.ip_address(host.pop("address"))
    host.pop("name")
    # Each host's key is its own line of the known_hosts file, not prod's placeholder shared by all.
    host.pop("hostKey", None)
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
        "knownHostsFile": known_hosts_file,
        "models": raw["models"],
        "deployments": [{"name": f"kimi-{name.removeprefix('gpu-')}", "host": name} for name in names],
    }


def hashed_name(name: str) -> str:
    """`|1|salt|hash` as `ssh-keygen -H` writes it (HMAC-SHA1 of the name), the salt derived from the name."""
    salt = hashlib.sha1(f"vllm-fleet paper fleet salt\0{name}".encode()).digest()
    digest = hmac.digest(salt, name.encode(), "sha1")
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def known_hosts(values: dict[str, Any], hashed: bool = False) -> str:
    """The fleet's known_hosts file: one ed25519 line per host, its key derived from its name."""
    lines = ["# The fleet's SSH host keys (scripts/fleet_stack.py): one real ed25519 key per host, made for the bench"]
    port = values["defaults"]["host"].get("port", 22)
    for host in values["hosts"]:
        name = lookup_name(host["address"], host.get("port", port))
        lines.append(f"{hashed_name(name) if hashed else name} {openssh_public_key(host_seed(host['name']))}")
    return "\n".join(lines) + "\n"


def fleet_files(hosts: int, stack: str, max_unavailable: int = 8, hashed: bool = False) -> dict[str, str]:
    """The stack file and its known_hosts file, by their names in the project."""
    values = fleet_values(hosts, max_unavailable, known_hosts_file=known_hosts_name(stack))
    header = (
        f"# {hosts} reference servers (scripts/fleet_stack.py from Pulumi.prod.yaml): each serves Kimi-K2.5 on its\n"
        "# eight GPUs and keeps MiniMax-M2.5 on disk; what they share is written once, in vllm-fleet:defaults,\n"
        f"# and their SSH host keys are in {known_hosts_name(stack)}.\n"
    )
    document = {"config": {f"{NAMESPACE}:{k}": v for k, v in values.items()}}
    return {
        f"Pulumi.{stack}.yaml": header + yaml.safe_dump(document, sort_keys=False, width=120),
        known_hosts_name(stack): known_hosts(values, hashed),
    }


def fleet_stack(hosts: int, max_unavailable: int = 8, stack: str = "fleet") -> str:
    """The fleet as a `Pulumi.<stack>.yaml` (its known_hosts file: fleet_files)."""
    return fleet_files(hosts, stack, max_unavailable)[f"Pulumi.{stack}.yaml"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("hosts", type=int, help="how many servers")
    parser.add_argument("stack", help="the stack's name: writes Pulumi.STACK.yaml and known_hosts.STACK")
    parser.add_argument("--max-unavailable", type=int, default=8, help="hosts that swap at a time (default 8)")
    parser.add_argument("--hashed", action="store_true", help="hash the names in known_hosts (ssh-keygen -H)")
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where to write them (default: here)")
    args = parser.parse_args(argv)
    for name, text in fleet_files(args.hosts, args.stack, args.max_unavailable, args.hashed).items():
        (args.dir / name).write_text(text)
        print(f"wrote {args.dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
