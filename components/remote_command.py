"""RemoteCommand: run a step's script on a host over SSH, as a Pulumi dynamic resource.

It stands where pulumi-command's `remote.Command` would: the Go module proxy refuses the
pulumi-command provider at every version and its PyPI wheel ships no binary, so no command provider
can be installed here (scripts/build-engine.sh says what was tried). It keeps that resource's model
and mends its known weak points (shared/REFERENCE.md section 2):
- `create` runs on create; a change of `create` or `stdin` runs it again in place; a change of host,
  port or user replaces the resource; `delete` runs on delete. A change of `delete` alone is stored
  without running anything. There is no read: `pulumi refresh` cannot see drift on a host.
- The SSH client is the host's OpenSSH, so connection attempts and their timeout are bounded
  (`ConnectionAttempts`, `ConnectTimeout`) and a dead connection is noticed (`ServerAliveInterval`).
- Every step has its own time limit (`timeoutSeconds`): the engine's custom timeouts do not reach
  dynamic providers.
- Secrets travel on stdin only; nothing is passed through the remote environment (no AcceptEnv).
- Output lines are streamed to the engine as they come, so `pulumi up` shows progress of long steps.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

# Inputs whose change re-runs `create`; a change of these connection fields replaces the resource.
RERUN_KEYS = ("create", "stdin")
REPLACE_CONNECTION_KEYS = ("host", "port", "user")
# Outputs are kept in the state; the end of a long log is what a user needs from it.
MAX_OUTPUT_CHARS = 64_000


class RemoteCommandError(Exception):
    pass


def _engine_logger() -> Callable[[str], None]:
    """Send lines to the engine's log (shown by `pulumi up`); the provider gets its address as argv[1]."""
    address = sys.argv[1] if len(sys.argv) > 1 and ":" in sys.argv[1] else None
    if address is None:
        return lambda line: None
    try:
        import grpc  # type: ignore[import-untyped]
        from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc

        stub = engine_pb2_grpc.EngineStub(grpc.insecure_channel(address))
    except Exception:
        return lambda line: None

    def send(line: str) -> None:
        with contextlib.suppress(Exception):
            stub.Log(engine_pb2.LogRequest(severity=engine_pb2.INFO, message=line))

    return send


def ssh_command(connection: Mapping[str, Any], key_file: str, known_hosts: str, command: str) -> list[str]:
    host_key = connection.get("hostKey")
    options = [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={int(connection['dialTimeoutSeconds'])}",
        "-o", f"ConnectionAttempts={int(connection['dialAttempts'])}",
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=8",
        "-o", "IdentitiesOnly=yes",
        "-o", "LogLevel=ERROR",
        "-o", f"UserKnownHostsFile={known_hosts}",
        # Without a pinned host key the host is trusted on first sight, as pulumi-command does.
        "-o", "StrictHostKeyChecking=" + ("yes" if host_key else "no"),
    ]  # fmt: skip
    return [
        "ssh", *options, "-i", key_file, "-p", str(int(connection["port"])),
        f"{connection['user']}@{connection['host']}", command,
    ]  # fmt: skip


def run_remote(
    connection: Mapping[str, Any],
    command: str,
    stdin: str | None,
    timeout: float,
    label: str,
    log: Callable[[str], None],
) -> tuple[str, str]:
    """Run `command` on the host; stream its lines to `log`; return (stdout, stderr) or raise."""
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-ssh-") as private:
        key_file = os.path.join(private, "key")
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            key = str(connection["privateKey"])
            handle.write(key if key.endswith("\n") else key + "\n")
        known_hosts = os.path.join(private, "known_hosts")
        with open(known_hosts, "w") as handle:
            if connection.get("hostKey"):
                address = (
                    connection["host"]
                    if int(connection["port"]) == 22
                    else f"[{connection['host']}]:{connection['port']}"
                )
                handle.write(f"{address} {connection['hostKey']}\n")
        process = subprocess.Popen(
            ssh_command(connection, key_file, known_hosts, command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        collected: dict[str, list[str]] = {"stdout": [], "stderr": []}

        def pump(name: str, stream: Any) -> None:
            for line in stream:
                collected[name].append(line)
                log(f"[{label}] {line.rstrip()}")

        readers = [
            threading.Thread(target=pump, args=(n, s), daemon=True)
            for n, s in (("stdout", process.stdout), ("stderr", process.stderr))
        ]
        for reader in readers:
            reader.start()
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write(stdin or "")
            process.stdin.close()
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise RemoteCommandError(
                    f"{label}: no result after {timeout:g} s (timeoutSeconds); the step was stopped"
                )
            time.sleep(0.1)
        for reader in readers:
            reader.join(timeout=5)
    stdout, stderr = "".join(collected["stdout"]), "".join(collected["stderr"])
    if process.returncode == 255 and not stdout:
        raise RemoteCommandError(
            f"{label}: cannot reach {connection['user']}@{connection['host']}:{connection['port']} over SSH "
            f"({connection['dialAttempts']} attempts of {connection['dialTimeoutSeconds']} s): {stderr.strip()[-500:]}"
        )
    if process.returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-60:]) or "\n".join(stdout.strip().splitlines()[-20:])
        raise RemoteCommandError(f"{label} failed on {connection['host']} (exit {process.returncode}):\n{tail}")
    return stdout[-MAX_OUTPUT_CHARS:], stderr[-MAX_OUTPUT_CHARS:]


class RemoteCommandProvider(dynamic.ResourceProvider):
    def _run(self, props: Mapping[str, Any], script_key: str) -> dict[str, Any]:
        stdout, stderr = run_remote(
            props["connection"],
            props[script_key],
            props.get("stdin"),
            float(props["timeoutSeconds"]),
            props["label"] + ("" if script_key == "create" else f" ({script_key})"),
            _engine_logger(),
        )
        return {**props, "stdout": stdout, "stderr": stderr}

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_=props["label"], outs=self._run(props, "create"))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changes = [k for k in ("create", "delete", "stdin", "connection") if olds.get(k) != news.get(k)]
        old_conn, new_conn = olds.get("connection") or {}, news.get("connection") or {}
        replaces = ["connection"] if any(old_conn.get(k) != new_conn.get(k) for k in REPLACE_CONNECTION_KEYS) else []
        return dynamic.DiffResult(changes=bool(changes), replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        if any(olds.get(k) != news.get(k) for k in RERUN_KEYS):
            return dynamic.UpdateResult(outs=self._run(news, "create"))
        # Only `delete` or credentials changed: remember them, run nothing.
        return dynamic.UpdateResult(outs={**news, "stdout": olds.get("stdout", ""), "stderr": olds.get("stderr", "")})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        if props.get("delete"):
            self._run(props, "delete")


class RemoteCommand(dynamic.Resource):
    """A script run on a host over SSH (see the module docstring for its update rules)."""

    stdout: pulumi.Output[str]
    stderr: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        create: str,
        delete: str | None,
        stdin: pulumi.Input[str] | None,
        timeout_seconds: int,
        opts: pulumi.ResourceOptions,
        summary: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            RemoteCommandProvider(),
            name,
            {
                "label": name,
                "connection": connection,
                "create": create,
                "delete": delete,
                "stdin": stdin,
                "timeoutSeconds": timeout_seconds,
                # What the script does, in fields `pulumi preview --diff` shows whole (long scripts are cut).
                "summary": summary or {},
                "stdout": None,
                "stderr": None,
            },
            opts,
        )
