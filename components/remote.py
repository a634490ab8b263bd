"""The one way this project runs a step on a host, so every remote command follows the same rules.

Every step is a `pulumi_command.remote.Command` (pulumi-command v1.2.1). Its rules, each through a
feature of the provider or of the host (shared/REFERENCE.md section 2 lists where remote commands go
wrong):
- the host key is pinned when the host config has one (`connection.hostKey`): a host that shows another
  key is refused before any command runs;
- bounded connection: `dialErrorLimit` attempts of `perDialTimeout` seconds, from the host config;
- nothing passed through the remote environment (it needs the server's AcceptEnv), and no previous
  output either (`addPreviousOutputInEnv: false`);
- secrets only on stdin; the connection (it holds the key) is secret in the provider's schema, the stdin
  is a secret input, and the stdout/stderr of a step that receives secrets are secret outputs;
- a time limit on every step. pulumi-command 1.2.1 ignores the engine's `customTimeouts` (its Create,
  Update and Delete never read the request's timeout), so the limit is enforced on the host by
  coreutils `timeout` around the step's script (render/scripts.py, remote_invocation); `customTimeouts` carries the
  same value, so the engine and `pulumi stack export` state it too;
- `delete_before_replace` where the step owns a singleton on the host (a unit name, a port, GPUs);
- the host's identity (address, port, user) in `triggers`: a step moved to another host is replaced
  (delete on the old host, create on the new), while a new private key only re-runs the idempotent script.
- the output of long steps is streamed by the provider as status lines while they run (download %,
  load wait), so `pulumi up` shows progress.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components import cordon
from models.config import Host
from render.scripts import remote_invocation

# Seconds a step gets after its time limit's TERM before it is killed.
KILL_AFTER_SECONDS = 30
# The steps declared on each cordoned host, checked against the state once the program has declared all.
CORDONED_STEPS: dict[str, set[str]] = {}


@dataclass(frozen=True)
class Target:
    """Where a step runs: the host's config and its connection (secret in the provider's schema)."""

    host: Host
    connection: remote.ConnectionArgs


def connect(host: Host, private_key: pulumi.Input[str]) -> Target:
    connection = remote.ConnectionArgs(
        host=host.address,
        port=host.port,
        user=host.user,
        private_key=pulumi.Output.secret(private_key),
        host_key=host.host_key,
        dial_error_limit=host.dial_attempts,
        per_dial_timeout=host.dial_timeout_seconds,
    )
    return Target(host=host, connection=connection)


def remote_step(
    name: str,
    target: Target,
    *,
    create: str,
    delete: str | None = None,
    stdin: pulumi.Input[str] | None = None,
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
    timeout_seconds: int = 600,
    owns_singleton: bool = False,
    log_output: bool = True,
) -> remote.Command:
    """A remote command running a rendered script (render/steps.py) over SSH.

    `log_output=False` keeps a step's output off the terminal (it is still stored, as a secret when the
    step receives secrets); for steps whose output is not worth streaming.
    """
    carries_secret = stdin is not None
    host = target.host
    if host.cordon:
        cordon.check_step(host, name)
        CORDONED_STEPS.setdefault(host.name, set()).add(name)
    return remote.Command(
        name,
        connection=target.connection,
        create=remote_invocation(create, name, timeout_seconds, KILL_AFTER_SECONDS),
        delete=(
            remote_invocation(delete, f"{name}-delete", timeout_seconds, KILL_AFTER_SECONDS)
            if delete is not None
            else None
        ),
        stdin=pulumi.Output.secret(stdin) if stdin is not None else None,
        add_previous_output_in_env=False,
        logging=remote.Logging.STDOUT_AND_STDERR if log_output else remote.Logging.NONE,
        triggers=[host.address, host.port, host.user],
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=depends_on or [],
            delete_before_replace=owns_singleton,
            # On a cordoned host the state's inputs stand, whatever the program now renders: no step runs.
            ignore_changes=cordon.COMMAND_INPUTS if host.cordon else None,
            # The provider echoes its inputs as outputs; stdin is named too, so an update that changes it (a
            # rotated API key) stores and logs it as a secret as well.
            additional_secret_outputs=["stdin", "stdout", "stderr"] if carries_secret else [],
            custom_timeouts=pulumi.CustomTimeouts(
                create=f"{timeout_seconds + KILL_AFTER_SECONDS}s",
                update=f"{timeout_seconds + KILL_AFTER_SECONDS}s",
                delete=f"{timeout_seconds + KILL_AFTER_SECONDS}s",
            ),
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


# Hosts probed at once: each probe is one socket waiting on the network, so a fleet's probes take about
# as long as its slowest host's, not the sum of them.
PROBE_WORKERS = 64


def probe_all(hosts: Sequence[Host], timeout: float = 5.0) -> None:
    """Probe every host at once; one HostUnreachable naming each host that failed, in config order."""

    def one(host: Host) -> str | None:
        try:
            probe_ssh(host, timeout)
        except HostUnreachable as error:
            return str(error)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_WORKERS, len(hosts)))) as pool:
        failures = [message for message in pool.map(one, hosts) if message is not None]
    if failures:
        raise HostUnreachable("\n".join(failures))
