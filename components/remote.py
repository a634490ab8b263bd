"""The one way this project runs a step on a host, so every remote command follows the same rules.

Rules (shared/REFERENCE.md section 2 lists where remote commands go wrong):
- bounded connection: `dialAttempts` attempts of `dialTimeoutSeconds` seconds (the host's config),
  and SSH keepalives, so a host that goes away mid-step is noticed;
- nothing passed through the remote environment (it needs the server's AcceptEnv);
- secrets only on stdin, stored encrypted; the connection (it holds the key) and the stdin are secret
  outputs, and so are stdout and stderr of a step that receives secrets, in case a tool echoes them;
- a time limit on every step, sized by the caller for its long work (the engine's custom timeouts do
  not reach dynamic providers, so the provider enforces it);
- `delete_before_replace` where the step owns a singleton on the host (a unit name, a port, GPUs).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import pulumi

from components.remote_command import RemoteCommand
from components.render import remote_invocation
from models.config import Host


@dataclass(frozen=True)
class Target:
    """Where a step runs: the host's config and its connection (a secret: it holds the private key)."""

    host: Host
    connection: pulumi.Output[dict[str, Any]]


def connect(host: Host, private_key: pulumi.Input[str]) -> Target:
    connection = pulumi.Output.from_input(private_key).apply(
        lambda key: {
            "host": host.address,
            "port": host.port,
            "user": host.user,
            "privateKey": key,
            "hostKey": host.host_key,
            "dialAttempts": host.dial_attempts,
            "dialTimeoutSeconds": host.dial_timeout_seconds,
        }
    )
    return Target(host=host, connection=pulumi.Output.secret(connection))


def remote_step(
    name: str,
    target: Target,
    *,
    create: str,
    delete: str | None = None,
    stdin: pulumi.Input[str] | None = None,
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
    timeout_minutes: int = 10,
    owns_singleton: bool = False,
    summary: dict[str, Any] | None = None,
) -> RemoteCommand:
    """A remote command running a rendered script (see components/render.py) over SSH."""
    carries_secret = stdin is not None
    return RemoteCommand(
        name,
        connection=target.connection,
        create=remote_invocation(create, name),
        delete=remote_invocation(delete, f"{name}-delete") if delete is not None else None,
        stdin=pulumi.Output.secret(stdin) if stdin is not None else None,
        timeout_seconds=timeout_minutes * 60,
        summary=summary,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=depends_on or [],
            delete_before_replace=owns_singleton,
            additional_secret_outputs=["connection", "stdin", *(["stdout", "stderr"] if carries_secret else [])],
        ),
    )


class HostUnreachable(Exception):
    pass


def probe_ssh(host: Host, timeout: float = 5.0) -> str:
    """Open a TCP connection to the host's SSH port and read its banner (no login, no session).

    Runs while the program is evaluated, in `pulumi preview` too, so an unreachable host fails the
    preview within `timeout` seconds with its name, instead of a step hanging in dial retries later.
    """
    try:
        with socket.create_connection((host.address, host.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256).decode(errors="replace").strip()
    except OSError as error:
        raise HostUnreachable(
            f"host {host.name!r} ({host.user}@{host.address}:{host.port}, vllm-fleet:hosts) is unreachable: "
            f"{error.__class__.__name__}: {error or 'timed out'} after at most {timeout:g} s. Check that it is up "
            "and that the address and port are right."
        ) from None
    if not banner.startswith("SSH-"):
        raise HostUnreachable(
            f"host {host.name!r} ({host.address}:{host.port}) answered, but not as an SSH server: {banner[:60]!r}"
        )
    return banner
