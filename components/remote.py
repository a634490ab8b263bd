"""The one way this project runs a step on a host, so every remote command follows the same rules.

Every step is a `command:remote:Command` of the pulumi-command provider (v1.2.1), but one per host: the
host package's archive is a `command:remote:CopyToRemote` (`remote_copy`, over SFTP), which shares the
connection, the triggers and the cordon's rules below. Both are declared as the provider's generated
Python classes declare them (RemoteCommand, RemoteCopy: the same type, inputs, version and options), not
through those classes: importing them costs ~10 ms and each of their resources resolves its class's type
hints again, in every program run, and a no-op `pulumi up` runs the program twice (bench, no-op).
tests/test_remote_parity.py holds them to what the generated classes send. A Command's rules, each
through a feature of the provider or of the host (shared/REFERENCE.md section 2 lists where remote
commands go wrong):
- the host key is pinned when the host has one (`connection.hostKey`: its own hostKey, else its key of
  vllm-fleet:knownHostsFile, controller/known_hosts.py): a host that shows another key is refused before
  any command runs. pulumi-command pins it with `ssh.FixedHostKey` and offers the server that key's type
  alone (an RSA key as `ssh-rsa`, SHA-1 signatures, which OpenSSH 8.8 and later refuse by default);
- the connection is not among the triggers: a new pinned key (a rotation) or a new private key updates
  each step (pulumi-command replaces on `triggers` alone), which runs its idempotent script once more over
  the new connection and finds nothing to do; it never replaces a step, whose delete would run;
- bounded connection: `dialErrorLimit` attempts of `perDialTimeout` seconds, from the host config;
- nothing passed through the remote environment (it needs the server's AcceptEnv), and no previous
  output either (`addPreviousOutputInEnv: false`);
- secrets only on stdin; the connection (it holds the key) is secret in the provider's schema, the stdin
  is a secret input, and the stdout/stderr of a step that receives secrets are secret outputs;
- a time limit on every step. pulumi-command 1.2.1 ignores the engine's `customTimeouts` (its Create,
  Update and Delete never read the request's timeout), so the limit is enforced on the host by the
  host's `step` tool that runs the step (coreutils `timeout` for the scripts sent whole before the tools
  exist; render.remote_invocation); `customTimeouts` carries the same value, so the engine and
  `pulumi stack export` state it too;
- a short command: a step is one call of the host's `step` tool with its parameters (its script is the
  host package's, host/steps/), so what the provider echoes back when a step fails is those few lines
  and the step's own output, whose last lines say why;
- `delete_before_replace` where the step owns a singleton on the host (a unit name, a port, GPUs);
- the host's identity (address, port, user) in `triggers`: a step moved to another host is replaced
  (delete on the old host, create on the new).
- the output of long steps is streamed by the provider as status lines while they run (download %,
  load wait), so `pulumi up` shows progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol, TypedDict

import pulumi

from components.command_provider import plugin_version
from models.hosts import Host
from render.scripts import remote_invocation

# Seconds a step gets after its time limit's TERM before it is killed.
KILL_AFTER_SECONDS = 30
# Every input of pulumi-command's remote.Command, as the engine names them: on a cordoned host each is ignored.
COMMAND_INPUTS = [
    "connection",
    "create",
    "update",
    "delete",
    "environment",
    "stdin",
    "triggers",
    "logging",
    "addPreviousOutputInEnv",
]


# Every input of pulumi-command's remote.CopyToRemote, as the engine names them.
COPY_INPUTS = ["connection", "source", "remotePath", "triggers"]


class Connection(TypedDict):
    """A step's `connection` as the provider takes it (its ConnectionArgs, by the engine's names)."""

    host: str
    port: int
    user: str
    privateKey: pulumi.Input[str]
    dialErrorLimit: int
    perDialTimeout: int
    hostKey: NotRequired[str]


class CommandInputs(TypedDict):
    """The inputs of a `command:remote:Command` that steps set, by the engine's names."""

    connection: pulumi.Input[Connection]
    create: str
    delete: str | None
    stdin: pulumi.Input[str] | None
    addPreviousOutputInEnv: bool
    logging: Literal["stdoutAndStderr", "none"]
    triggers: list[str | int]


class CopyInputs(TypedDict):
    """The inputs of a `command:remote:CopyToRemote`, by the engine's names."""

    connection: pulumi.Input[Connection]
    source: pulumi.Asset
    remotePath: str
    triggers: list[str | int]


def provider_options(opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    """A step's options with what pulumi-command's generated classes add to every resource of theirs: the
    provider's version (the engine keys its default provider by it), the connection as a secret output
    (it holds the key) and a replacement when the triggers change (a step moved to another host)."""
    version = plugin_version()
    if version is None:
        raise RuntimeError("the pulumi_command package is missing from the program's virtualenv; run `make setup`")
    return pulumi.ResourceOptions.merge(
        opts,
        pulumi.ResourceOptions(
            version=version, additional_secret_outputs=["connection"], replace_on_changes=["triggers[*]"]
        ),
    )


class RemoteCommand(pulumi.CustomResource):
    """A step: pulumi-command's `command:remote:Command`, declared as pulumi_command.remote.Command does."""

    if TYPE_CHECKING:  # set by the SDK from the provider's outputs; no annotation for it to resolve at run time
        stdout: pulumi.Output[str]
        stderr: pulumi.Output[str]

    def __init__(self, name: str, inputs: CommandInputs, opts: pulumi.ResourceOptions) -> None:
        # Its outputs beside its inputs, as the generated class names them, so the SDK makes their attributes.
        properties: dict[str, Any] = {
            **inputs,
            "connection": pulumi.Output.secret(inputs["connection"]),
            "stdout": None,
            "stderr": None,
        }
        super().__init__("command:remote:Command", name, properties, provider_options(opts))


class RemoteCopy(pulumi.CustomResource):
    """A file copied to a host: pulumi-command's `command:remote:CopyToRemote`, declared as
    pulumi_command.remote.CopyToRemote does."""

    def __init__(self, name: str, inputs: CopyInputs, opts: pulumi.ResourceOptions) -> None:
        properties: dict[str, Any] = {**inputs, "connection": pulumi.Output.secret(inputs["connection"])}
        super().__init__("command:remote:CopyToRemote", name, properties, provider_options(opts))


class StepLedger(Protocol):
    """Where each step declared on a cordoned host is told (controller/cordon.py's CordonedSteps): it
    refuses a step the host does not have yet, and keeps the name for the check of removals at the end."""

    def declare(self, host: Host, name: str, create: str | None = None, spans: str | None = None) -> None: ...


@dataclass(frozen=True)
class Target:
    """Where a step runs: the host's config, its connection (secret in the provider's schema) and the
    ledger its steps are declared to when the host is cordoned."""

    host: Host
    connection: Connection
    cordoned: StepLedger


def host_triggers(host: Host) -> list[str | int]:
    """A step's `triggers`: the host's identity, which replaces the step when it moves to another host and
    by which controller/cordon.py finds a host's steps in the state."""
    return [host.address, host.port, host.user]


def connect(host: Host, private_key: pulumi.Input[str], cordoned: StepLedger) -> Target:
    connection = Connection(
        host=host.address,
        port=host.port,
        user=host.user,
        privateKey=pulumi.Output.secret(private_key),
        dialErrorLimit=host.dial_attempts,
        perDialTimeout=host.dial_timeout_seconds,
    )
    if host.host_key is not None:
        connection["hostKey"] = host.host_key
    return Target(host=host, connection=connection, cordoned=cordoned)


class StepOptions(TypedDict):
    """What a step is made of besides its name, host and parent (what remote_step's keywords mean)."""

    create: str
    delete: NotRequired[str | None]
    stdin: NotRequired[pulumi.Input[str] | None]
    depends_on: NotRequired[list[pulumi.Resource] | None]
    timeout_seconds: NotRequired[int]
    owns_singleton: NotRequired[bool]
    log_output: NotRequired[bool]
    spans: NotRequired[str | None]


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
    spans: str | None = None,
) -> RemoteCommand:
    """A remote command running a rendered script (see render/) over SSH (a component makes its steps
    with components/component.FleetComponent.add_step, which names and parents them).

    `log_output=False` keeps a step's output off the terminal (it is still stored, as a secret when the
    step receives secrets); for steps whose output is not worth streaming. `spans` names the node of a
    model across hosts that the step serves: on a cordoned host such a step may not change.
    """
    carries_secret = stdin is not None
    host = target.host
    invocation = remote_invocation(create, name, timeout_seconds, KILL_AFTER_SECONDS)
    if host.cordon:
        target.cordoned.declare(host, name, invocation, spans)
    return RemoteCommand(
        name,
        CommandInputs(
            connection=target.connection,
            create=invocation,
            delete=(
                remote_invocation(delete, f"{name}-delete", timeout_seconds, KILL_AFTER_SECONDS)
                if delete is not None
                else None
            ),
            stdin=pulumi.Output.secret(stdin) if stdin is not None else None,
            addPreviousOutputInEnv=False,
            logging="stdoutAndStderr" if log_output else "none",
            triggers=host_triggers(host),
        ),
        step_options(
            host,
            parent,
            depends_on,
            COMMAND_INPUTS,
            delete_before_replace=owns_singleton,
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


def step_options(
    host: Host,
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None,
    inputs: list[str],
    **options: Any,
) -> pulumi.ResourceOptions:
    """The options every step has: its parent, the steps it waits for, and on a cordoned host its `inputs`
    as the state has them, whatever the program now renders (so no step runs); `options` add the rest."""
    return pulumi.ResourceOptions(
        parent=parent,
        depends_on=depends_on or [],
        ignore_changes=inputs if host.cordon else None,
        **options,
    )


def remote_copy(
    name: str,
    target: Target,
    *,
    source: str,
    remote_path: str,
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
) -> RemoteCopy:
    """A file of the controller (`source`, a path) copied to `remote_path` on the host over SFTP, as the
    connection's user. Its input is the file's digest, not its content: the engine hashes the file on
    every run and the step copies again only when the digest or the path changes. pulumi-command writes
    in place and never deletes, so the step that reads the file checks it and removes old copies."""
    host = target.host
    if host.cordon:
        target.cordoned.declare(host, name)
    return RemoteCopy(
        name,
        CopyInputs(
            connection=target.connection,
            source=pulumi.FileAsset(source),
            remotePath=remote_path,
            triggers=host_triggers(host),
        ),
        step_options(host, parent, depends_on, COPY_INPUTS),
    )
