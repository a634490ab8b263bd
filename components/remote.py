"""The one way this project runs a step on a host, so every remote command follows the same rules.

Rules (REFERENCE section 2, pulumi-command behaviour):
- bounded connection: `dial_error_limit` attempts of `per_dial_timeout` seconds (the host's config),
  never the provider's default of 10 x 15 s;
- no previous output in the environment: it needs the server's AcceptEnv and breaks on large output;
- secrets only on stdin, which Pulumi stores encrypted; outputs of a step that receives secrets are
  marked secret as well, in case a tool echoes its input;
- custom timeouts on the child that does the long work (they are not inherited from components);
- `delete_before_replace` where the step owns a singleton on the host (a unit name, a port, GPUs).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components.render import remote_invocation
from models.config import Host


@dataclass(frozen=True)
class Target:
    """Where a step runs: the host's config and its connection (the private key is a secret)."""

    host: Host
    connection: command.remote.ConnectionArgs


def connect(host: Host, private_key: pulumi.Input[str]) -> Target:
    return Target(
        host=host,
        connection=command.remote.ConnectionArgs(
            host=host.address,
            port=host.port,
            user=host.user,
            private_key=pulumi.Output.secret(private_key),
            host_key=host.host_key,
            dial_error_limit=host.dial_attempts,
            per_dial_timeout=host.dial_timeout_seconds,
        ),
    )


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
) -> command.remote.Command:
    """A remote command running a rendered script (see components/render.py) over SSH."""
    carries_secret = stdin is not None
    return command.remote.Command(
        name,
        connection=target.connection,
        create=remote_invocation(create, name),
        delete=remote_invocation(delete, f"{name}-delete") if delete is not None else None,
        stdin=pulumi.Output.secret(stdin) if stdin is not None else None,
        add_previous_output_in_env=False,
        logging=command.remote.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=depends_on or [],
            delete_before_replace=owns_singleton,
            custom_timeouts=pulumi.CustomTimeouts(
                create=f"{timeout_minutes}m", update=f"{timeout_minutes}m", delete=f"{max(10, timeout_minutes // 4)}m"
            ),
            additional_secret_outputs=["stdout", "stderr"] if carries_secret else None,
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
