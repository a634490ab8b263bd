"""components/remote.py declares pulumi-command's resources without the package's generated classes: what
it sends the engine must be what pulumi_command.remote.Command and .CopyToRemote send for the same step.
Both are registered under Pulumi's mocks and their RegisterResource requests compared field by field."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]
from pulumi.runtime.settings import get_monitor

from components import command_provider
from components.remote import CommandInputs, Connection, CopyInputs, RemoteCommand, RemoteCopy

# Importing pulumi_command.remote imports its deprecated CopyFile as well, which warns; not ours to fix.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import pulumi_command
    from pulumi_command import remote

    _ = remote.Command  # the package imports its submodules lazily: here, inside the filter

# Fields the two declarations differ in by nature: their names (hence URNs and aliases) and where in the
# source they were made.
PER_DECLARATION = {"name", "sourcePosition", "stackTrace", "aliases", "aliasSpecs"}


class NoProviderMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


@pytest.fixture
def requests() -> dict[str, dict[str, Any]]:
    """Every RegisterResource request of the test's resources, by resource name, as JSON."""
    pulumi.runtime.set_mocks(NoProviderMocks(), project="parity", stack="test", preview=False)
    monitor = get_monitor()
    assert monitor is not None
    recorded: dict[str, dict[str, Any]] = {}
    register = monitor.RegisterResource

    def recording(request: Any) -> Any:
        recorded[request.name] = json_format.MessageToDict(request)
        return register(request)

    monitor.RegisterResource = recording
    return recorded


def without_names(request: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in request.items() if key not in PER_DECLARATION}


def snake_case(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Our inputs, by the engine's camelCase names, as the generated classes' keyword arguments: the same
    step declared both ways."""
    return {re.sub(r"([A-Z])", r"_\1", key).lower(): value for key, value in inputs.items()}


def typed_connection(host_key: str | None) -> remote.ConnectionArgs:
    return remote.ConnectionArgs(**snake_case(connection(host_key)))


def connection(host_key: str | None) -> Connection:
    ours = Connection(
        host="10.0.0.5",
        port=2222,
        user="root",
        privateKey=pulumi.Output.secret("-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n"),
        dialErrorLimit=3,
        perDialTimeout=7,
    )
    if host_key is not None:
        ours["hostKey"] = host_key
    return ours


def step_options(cordoned: bool, secret: bool) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(
        delete_before_replace=True,
        ignore_changes=["create", "connection"] if cordoned else None,
        additional_secret_outputs=["stdin", "stdout", "stderr"] if secret else [],
        custom_timeouts=pulumi.CustomTimeouts(create="330s", update="330s", delete="330s"),
    )


@pytest.mark.parametrize(
    ("host_key", "stdin", "delete", "logged", "cordoned"),
    [
        (None, None, "rm -f /etc/x", True, False),
        ("ssh-ed25519 AAAAC3Nza", "api-key", None, False, True),
    ],
)
@pulumi.runtime.test  # type: ignore[untyped-decorator]
def test_a_step_is_registered_as_the_generated_command_class_registers_it(
    requests: dict[str, dict[str, Any]],
    host_key: str | None,
    stdin: str | None,
    delete: str | None,
    logged: bool,
    cordoned: bool,
) -> pulumi.Output[Any]:
    inputs = CommandInputs(
        connection=connection(host_key),
        create="echo hello",
        delete=delete,
        stdin=pulumi.Output.secret(stdin) if stdin is not None else None,
        addPreviousOutputInEnv=False,
        logging="stdoutAndStderr" if logged else "none",
        triggers=["10.0.0.5", 2222, "root"],
    )
    typed = remote.Command(
        "typed",
        **{
            **snake_case(inputs),
            "connection": typed_connection(host_key),
            "logging": remote.Logging.STDOUT_AND_STDERR if logged else remote.Logging.NONE,
        },
        opts=step_options(cordoned, stdin is not None),
    )
    ours = RemoteCommand("ours", inputs, step_options(cordoned, stdin is not None))

    def compare(_: Any) -> None:
        assert requests["ours"]["type"] == "command:remote:Command"
        assert requests["ours"]["version"] == command_provider.plugin_version() == "1.2.1"
        assert without_names(requests["ours"]) == without_names(requests["typed"])

    return pulumi.Output.all(typed.stdout, ours.stdout, ours.stderr).apply(compare)


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def test_the_copy_is_registered_as_the_generated_copy_class_registers_it(
    requests: dict[str, dict[str, Any]], tmp_path: Path
) -> pulumi.Output[Any]:
    archive = tmp_path / "package.pyz"
    archive.write_bytes(b"PK")
    inputs = CopyInputs(
        connection=connection(None),
        source=pulumi.FileAsset(str(archive)),
        remotePath="/usr/local/lib/vllm-fleet/.incoming/x.pyz",
        triggers=["10.0.0.5", 2222, "root"],
    )
    typed = remote.CopyToRemote(
        "typed",
        **{**snake_case(inputs), "connection": typed_connection(None)},
        opts=pulumi.ResourceOptions(ignore_changes=None),
    )
    ours = RemoteCopy("ours", inputs, pulumi.ResourceOptions(ignore_changes=None))

    def compare(_: Any) -> None:
        assert requests["ours"]["type"] == "command:remote:CopyToRemote"
        assert without_names(requests["ours"]) == without_names(requests["typed"])

    return pulumi.Output.all(typed.urn, ours.urn).apply(compare)


def test_the_provider_version_is_the_one_the_package_names() -> None:
    assert command_provider.plugin_version() == pulumi_command._utilities.get_version()  # type: ignore[no-untyped-call]
