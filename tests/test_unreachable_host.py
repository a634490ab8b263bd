"""Issue: unreachable host. `pulumi preview` and `pulumi up` fail within a bound, naming the host,
whether nothing listens on its SSH port or something accepts and never answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from sandbox.processes import free_port

pytestmark = pytest.mark.usefixtures("pulumi_engine")

# The program's probe waits at most 5 s to connect and 5 s for the SSH banner; engine start-up and the
# Python program add a few seconds.
BOUND_SECONDS = 30


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says anything: a hung sshd or a black hole."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def stack_for(tmp_path: Path, port: int) -> auto.Stack:
    raw = sandbox_env.dev_config()
    raw["hosts"][0]["port"] = port
    key = tmp_path / "key"
    key.write_text("not used: the host is never reached\n")
    raw["sshPrivateKeyFile"] = str(key)
    text = yaml.safe_dump({"config": {f"vllm-fleet:{k}": v for k, v in raw.items()}})
    work = engine.project_copy(tmp_path / "project", {"Pulumi.down.yaml": text})
    return engine.stack(work, tmp_path / "state", "down")


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_preview_and_up_fail_fast_naming_the_host(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    port = free_port() if kind == "refused" else request.getfixturevalue("silent_port")
    stack = stack_for(tmp_path, port)
    for operation in (stack.preview, stack.up):
        started = time.monotonic()
        with pytest.raises(auto.CommandError) as caught:
            operation()
        elapsed = time.monotonic() - started
        message = str(caught.value)
        assert f"host 'sandbox' (root@127.0.0.1:{port}, vllm-fleet:hosts) is unreachable" in message, message
        assert elapsed < BOUND_SECONDS, f"{operation.__name__} took {elapsed:.1f} s"
    # No step was recorded: the failure came before any. The stack itself may be, and the command provider.
    resources = (stack.export_stack().deployment or {}).get("resources") or []
    assert {r["type"] for r in resources} <= {"pulumi:pulumi:Stack", "pulumi:providers:command"}, resources
