"""The rules of every remote step, on the real engine and the real pulumi-command provider against the
sandbox's sshd: a wrong pinned host key refuses the step before any command runs, and a step that runs
past its time limit is stopped on the host."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("sandbox")

MARKER_DIR = "/run/vllm-fleet-step-tests"


def sandbox_host(host_key: str | None) -> dict[str, Any]:
    host: dict[str, Any] = {
        "name": "sandbox",
        "address": "127.0.0.1",
        "port": 2222,
        "gpus": {"count": 0},
        "dialAttempts": 1,
        "dialTimeoutSeconds": 5,
    }
    if host_key is not None:
        host["hostKey"] = host_key
    return host


def one_step(tmp_path: Path, host: dict[str, Any], create: str, timeout_seconds: int) -> auto.Stack:
    work = engine.project_copy(tmp_path / "project")
    (work / "__main__.py").write_text((ROOT / "tests" / "programs" / "one_step.py").read_text())
    stack = engine.stack(work, tmp_path / "state", "steps")
    stack.set_config("onestep:host", auto.ConfigValue(value=json.dumps(host)))
    stack.set_config("onestep:keyFile", auto.ConfigValue(value=str(sandbox_env.SSH_KEY)))
    stack.set_config("onestep:create", auto.ConfigValue(value=create))
    stack.set_config("onestep:timeoutSeconds", auto.ConfigValue(value=str(timeout_seconds)))
    return stack


def sandbox_host_key() -> str:
    """The sandbox's host key as a `type key` line, read on the host itself."""
    return " ".join(sandbox_env.on_host("cat /etc/ssh/ssh_host_ed25519_key.pub").split()[0:2])


def other_host_key(tmp_path: Path) -> str:
    key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return " ".join(key.with_suffix(".pub").read_text().split()[0:2])


def marker_script(name: str, before: str = "") -> str:
    marker = shlex.quote(f"{MARKER_DIR}/{name}")
    return f"#!/usr/bin/env bash\nset -euo pipefail\n{before}mkdir -p {MARKER_DIR}\ntouch {marker}\necho ran\n"


def marker_exists(name: str) -> bool:
    return sandbox_env.on_host(f"test -e {MARKER_DIR}/{name} && echo yes || echo no").strip() == "yes"


def test_pinned_host_key_lets_the_step_run_and_a_wrong_one_refuses_it(tmp_path: Path) -> None:
    sandbox_env.on_host(f"rm -rf {MARKER_DIR}")
    right = one_step(tmp_path / "right", sandbox_host(sandbox_host_key()), marker_script("right-key"), 60)
    assert right.up(on_output=print).outputs["stdout"].value == "ran"
    assert marker_exists("right-key")
    right.destroy()

    wrong = one_step(tmp_path / "wrong", sandbox_host(other_host_key(tmp_path)), marker_script("wrong-key"), 60)
    started = time.monotonic()
    with pytest.raises(auto.CommandError) as failure:
        wrong.up(on_output=print)
    assert "host key mismatch" in str(failure.value)
    assert time.monotonic() - started < 60
    assert not marker_exists("wrong-key"), "a command ran on a host whose key was not the pinned one"


def test_a_step_past_its_time_limit_is_stopped_on_the_host(tmp_path: Path) -> None:
    sandbox_env.on_host(f"rm -rf {MARKER_DIR}")
    slow = one_step(tmp_path, sandbox_host(None), marker_script("too-late", before="sleep 300\n"), 3)
    started = time.monotonic()
    with pytest.raises(auto.CommandError) as failure:
        slow.up(on_output=print)
    elapsed = time.monotonic() - started
    assert "vllm-fleet-probe-step: stopped by its time limit of 3 s" in str(failure.value)
    assert elapsed < 30, elapsed
    # Nothing of the step lives on: no sleeping script, no marker written after the limit.
    assert sandbox_env.on_host("pgrep -fc '[s]leep 300' || true").strip() == "0"
    assert not marker_exists("too-late")
