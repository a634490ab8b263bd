"""Faults injected for real on the sandbox, through the mirror or with real processes, and what the user
is left with. The tests run in file order on one stack ("faults"), after test_e2e.py released the GPU."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from sandbox.sandbox_env import on_host, served_ids
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "faults"
ENDPOINT = sandbox_env.api_url(sandbox_env.E2E_PORT)
PYTHON = "/opt/vllm-env/bin/python3"
MODEL_SYNC = f"{PYTHON} /usr/local/lib/vllm-fleet/model-sync"
SHARD = "model-00002-of-00003.safetensors"


class Faults(SandboxStack):
    def configure(
        self,
        model: str,
        *,
        extra_models: dict[str, Any] | None = None,
        stack: str = STACK,
        gpus: list[int] | None = None,
        port: int = sandbox_env.E2E_PORT,
        storage: dict[str, Any] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> auto.Stack:
        text = sandbox_env.e2e_stack_file(model, gpus=gpus, port=port, extra_models=extra_models)
        doc = yaml.safe_load(text)
        if storage:
            doc["config"]["vllm-fleet:storage"][0].update(storage)
        if overrides:
            doc["config"]["vllm-fleet:deployments"][0]["overrides"] = overrides
        # These tests leave hand-started engines holding a GPU on purpose; the guard may stop them.
        doc["config"]["vllm-fleet:deployments"][0]["foreignGpuProcesses"] = "stop"
        return self.select(doc, name=stack)

    def up(self, stack: auto.Stack, **kwargs: Any) -> auto.UpResult:
        return stack.up(on_output=self.output.append, **kwargs)

    def tear_down(self) -> None:
        sandbox_env.mirror("/_mirror/faults", "DELETE")
        for name in ("intruder", STACK):
            with contextlib.suppress(auto.CommandError):
                self.destroy(self.configure("e2e-tiny-a", stack=name))


faults = module_state(lambda tmp: Faults(tmp, STACK))


def gets_by_file(stats: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in sandbox_env.resolve_requests(stats):
        if entry["method"] == "GET":
            name = entry["path"].rsplit("/", 1)[-1]
            counts[name] = counts.get(name, 0) + 1
    return counts


def test_download_survives_a_reset_connection(faults: Faults) -> None:
    """The mirror resets the connection in the middle of a shard; `pulumi up` still completes, every
    file verifies, no partial file is left, and complete files are not fetched again."""
    on_host("rm -rf /shared/e2e-tiny-a")
    sandbox_env.mirror("/_mirror/reset-stats", "POST", {})
    sandbox_env.add_fault(
        {
            "path_glob": f"*/tiny-chat-a/resolve/*/{SHARD}",
            "method": "GET",
            "drop_after_bytes": 40000,
            "drop_mode": "reset",
            "times": 1,
        },
    )
    stack = faults.configure("e2e-tiny-a")
    result = faults.up(stack)
    assert result.summary.result == "succeeded"
    counts = gets_by_file(sandbox_env.mirror("/_mirror/stats"))
    assert counts[SHARD] == 2, counts  # the reset one, then once more
    assert all(n == 1 for name, n in counts.items() if name != SHARD), counts
    assert on_host("find /shared/e2e-tiny-a -name '*.incomplete' | wc -l").strip() == "0"
    assert "verified" in on_host(f"{MODEL_SYNC} verify --dir /shared/e2e-tiny-a")
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]


def test_corrupted_file_is_caught_and_only_it_is_fetched_again(faults: Faults) -> None:
    target = "/shared/e2e-tiny-a/model-00001-of-00003.safetensors"
    on_host(
        f"{PYTHON} -c \"f=open('{target}','r+b'); f.seek(5000); b=f.read(1); f.seek(5000); f.write(bytes([b[0]^1]))\""
    )
    # Before any service loads the model: the unit's ExecStartPre refuses the changed file.
    on_host("systemctl restart vllm-e2e-tiny-a.service", check=False)
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service", check=False).strip() != "active"
    journal = on_host("journalctl -u vllm-e2e-tiny-a.service -n 30 --no-pager -o cat")
    assert "changed since they were verified: model-00001-of-00003.safetensors" in journal
    # ... and its advice works as written: `pulumi up` where the stack is deployed from. Its download step
    # fetches exactly that file again (the survey saw it changed) and its activation starts the unit again.
    assert "Run `pulumi up` where the stack is deployed from: its download step fetches them again" in journal
    report = on_host(f"{MODEL_SYNC} verify --dir /shared/e2e-tiny-a 2>&1", check=False)
    assert "corrupt or missing: model-00001-of-00003.safetensors" in report
    sandbox_env.mirror("/_mirror/reset-stats", "POST", {})
    assert faults.up(faults.configure("e2e-tiny-a")).summary.result == "succeeded"
    assert gets_by_file(sandbox_env.mirror("/_mirror/stats")) == {"model-00001-of-00003.safetensors": 1}
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    assert "verified" in on_host(f"{MODEL_SYNC} verify --dir /shared/e2e-tiny-a")


def test_launch_the_hosts_vllm_rejects_fails_before_the_stop(faults: Faults) -> None:
    """A flag the sandbox's vLLM does not know is refused by vllm-args-check in the unit step, while the
    old model keeps serving: it is never stopped."""
    since = on_host("systemctl show -p ActiveEnterTimestampMonotonic --value vllm-e2e-tiny-a.service").strip()
    stack = faults.configure(
        "e2e-tiny-b", overrides={"extraArgs": ["--enforce-eager", "--dtype", "float32", "--no-such-flag"]}
    )
    with pytest.raises(auto.CommandError) as caught:
        faults.up(stack)
    message = str(caught.value)
    assert "on this host rejects the launch of vllm-e2e-tiny-b.service" in message, message[-3000:]
    assert "--no-such-flag (from vllm-fleet:deployments[chat].overrides.extraArgs)" in message
    assert "unrecognized arguments: --no-such-flag" in message
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    assert on_host("systemctl show -p ActiveEnterTimestampMonotonic --value vllm-e2e-tiny-a.service").strip() == since
    # The swap's steps are still pending: the unit and the activation (which reports once it serves).
    preview = stack.preview()
    assert preview.change_summary.get(auto.OpType.UPDATE) == 2, preview.change_summary


def test_swap_that_cannot_start_rolls_back(faults: Faults) -> None:
    """A launch vLLM parses but cannot start (a context longer than the model's) fails after the stop:
    the host puts the old unit back and the step fails with the new unit's journal tail."""
    stack = faults.configure("e2e-tiny-b", overrides={"maxModelLen": 1_000_000})
    started = time.monotonic()
    with pytest.raises(auto.CommandError) as caught:
        faults.up(stack)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert elapsed < 300, elapsed  # startTimeoutSeconds of the dev stack, plus the rollback
    assert "rolled back: vllm-e2e-tiny-a.service serves again" in message, message[-4000:]
    assert "max_model_len" in message, message[-4000:]  # the new unit's journal tail
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    assert on_host("systemctl is-enabled vllm-e2e-tiny-b.service 2>&1 || true").strip() != "enabled"
    # The failed change is still pending: the serving step, which reports too (the staged unit and the
    # download succeeded).
    preview = stack.preview()
    assert preview.change_summary.get(auto.OpType.UPDATE) == 1, preview.change_summary
    assert "chat-serving" in preview.stdout


def test_guard_stops_an_engine_that_outlived_its_server(faults: Faults) -> None:
    """A hand-started vLLM on GPU 3 whose API server is killed with SIGKILL leaves its engine core (with
    its worker inside: multiprocessing off, as the tiny models run) holding the GPU; the next start's
    guard finds and stops it within its bound."""
    on_host(
        "mkdir -p /tmp/stray; cd /tmp/stray; CUDA_VISIBLE_DEVICES=3 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0 TMPDIR=/tmp/stray "
        f"setsid nohup {PYTHON} -m vllm.entrypoints.openai.api_server --model /shared/e2e-tiny-a --port 8011 "
        "--enforce-eager --dtype float32 --max-model-len 256 > stray.log 2>&1 < /dev/null & echo $! > stray.pid"
    )
    on_host("for i in $(seq 1 120); do curl -sf 127.0.0.1:8011/health && break; sleep 1; done", timeout=200)
    on_host("kill -9 $(cat /tmp/stray/stray.pid)")
    # Engine processes outside any vLLM unit (a `make up` deployment may run beside this test).
    survivors = on_host("for p in $(pgrep -f '^VLLM::'); do grep -q 'vllm-' /proc/$p/cgroup || echo $p; done").split()
    assert survivors, "the engine core should outlive its SIGKILLed server (REFERENCE: the zombie case)"
    stack = faults.configure("e2e-tiny-b")  # the swap the previous test could not make, now fixed
    faults.output.clear()
    result = faults.up(stack)
    assert result.summary.result == "succeeded"
    log = "\n".join(faults.output)
    assert re.search(
        r"stopping stray GPU holders \[[0-9, ]+\] on GPUs 1", log
    ) or "stopping stray GPU holders" in on_host("journalctl -u vllm-e2e-tiny-b.service --no-pager -o cat")
    for pid in survivors:
        assert on_host(f"test -e /proc/{pid} || echo gone").strip() == "gone", pid
    assert served_ids(ENDPOINT) == ["e2e-tiny-b"]


def test_reboot_comes_back_ready_without_pulumi(faults: Faults) -> None:
    sandbox_env.reboot_until(lambda: served_ids(ENDPOINT) == ["e2e-tiny-b"], 240, every=2)
    assert served_ids(ENDPOINT) == ["e2e-tiny-b"]
    faults.configure("e2e-tiny-b").preview(expect_no_changes=True)


def test_disk_space_is_checked_before_any_byte(faults: Faults) -> None:
    extra = {"e2e-tiny-c": {"preset": "tiny-chat-b", "dir": "e2e-tiny-c", "revision": "main", "keep": False}}
    # The declared capacity passes validation; the margin is more than the sandbox's disk has free.
    stack = faults.configure("e2e-tiny-c", extra_models=extra, storage={"capacityGb": 100000, "freeMarginGb": 99990})
    sandbox_env.mirror("/_mirror/reset-stats", "POST", {})
    with pytest.raises(auto.CommandError) as caught:
        faults.up(stack)
    message = str(caught.value)
    assert re.search(
        r"not enough space for acme/tiny-chat-b@\w+ in /shared/e2e-tiny-c: it needs [0-9.]+ GB more, "
        r"the filesystem has [0-9.]+ GB free and the margin is 99990 GB",
        message,
    ), message
    assert gets_by_file(sandbox_env.mirror("/_mirror/stats")) == {}
    assert served_ids(ENDPOINT) == ["e2e-tiny-b"]
    assert on_host("systemctl is-active vllm-e2e-tiny-b.service").strip() == "active"


def test_controller_killed_mid_download(faults: Faults) -> None:
    """`pulumi up` is killed (the whole process group, as a lost laptop would) in the middle of a
    download; the next `pulumi up` (after `pulumi cancel` and clearing the pending create the engine
    recorded) completes, every file verifies, and no partial file is left."""
    extra = {"e2e-tiny-c": {"preset": "tiny-chat-b", "dir": "e2e-tiny-c", "revision": "main", "keep": False}}
    stack = faults.configure("e2e-tiny-c", extra_models=extra)
    on_host("rm -rf /shared/e2e-tiny-c")
    sandbox_env.mirror("/_mirror/config", "POST", {"rate_limit_bytes_per_s": 20000})
    env = engine.engine_env(faults.backend)
    try:
        with engine.up_killed_on_exit(faults.work, env, STACK, stdout=subprocess.PIPE) as process:
            assert process.stdout is not None
            deadline = time.monotonic() + 180
            for line in process.stdout:
                if "running: /opt/vllm-env/bin/hf download acme/tiny-chat-b" in line or time.monotonic() > deadline:
                    break
            time.sleep(3)
            assert on_host("find /shared/e2e-tiny-c -name '*.incomplete' | wc -l").strip() != "0", "not mid-download"
    finally:
        sandbox_env.mirror("/_mirror/config", "POST", {"rate_limit_bytes_per_s": 0})
    # What docs/troubleshooting.md tells a user to do after a killed `pulumi up`: drop the dead run's lock, clear
    # the create it left pending, and run `up` again.
    stack.cancel()
    stack.refresh(clear_pending_creates=True, on_output=faults.output.append)
    result = faults.up(stack)
    assert result.summary.result == "succeeded"
    assert (
        on_host(
            "find /shared/e2e-tiny-c -name '*.incomplete' -o -name '*.lock' | grep -v '.vllm-fleet' | wc -l"
        ).strip()
        == "0"
    )
    assert "verified" in on_host(f"{MODEL_SYNC} verify --dir /shared/e2e-tiny-c")
    assert served_ids(ENDPOINT) == ["e2e-tiny-c"]


def test_concurrent_up_is_refused_by_the_lock(faults: Faults) -> None:
    stack = faults.configure("e2e-tiny-a")
    errors: list[BaseException] = []

    def first() -> None:
        try:
            faults.up(stack)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(6)
    second = faults.configure("e2e-tiny-a")
    with pytest.raises(auto.CommandError) as caught:
        second.up()
    assert "locked" in str(caught.value)
    thread.join(timeout=600)
    assert not errors, errors
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]


def test_second_stack_on_the_same_gpus_is_refused_on_the_host(faults: Faults) -> None:
    extra = {"e2e-tiny-c": {"preset": "tiny-chat-b", "dir": "e2e-tiny-c", "revision": "main", "keep": False}}
    intruder = faults.configure("e2e-tiny-c", extra_models=extra, stack="intruder", gpus=[3], port=8002)
    with pytest.raises(auto.CommandError) as caught:
        faults.up(intruder)
    # The survey finds the other deployment's engine on GPU 3 while the program runs: refused before any step.
    message = str(caught.value)
    assert "GPU 3 is held by PID" in message and "a unit of deployment faults.chat" in message, message[-2000:]
    assert "nothing was changed" in message
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service").strip() == "active"
    intruder.destroy()
    intruder.workspace.remove_stack("intruder")


def test_secrets_appear_nowhere(faults: Faults) -> None:
    """After deploys, swaps and a destroy with verbose engine logging, the token and the SSH key are in
    no captured output, not in the state file, not in `ps` or the journal, and on the host only in the
    0600 environment files."""
    token = sandbox_env.MIRROR_TOKEN
    key_body = sandbox_env.SSH_KEY.read_text().splitlines()[1]  # a line of the private key itself
    stack = faults.configure("e2e-tiny-b")
    verbose: list[str] = []
    stack.up(on_output=verbose.append, on_error=verbose.append, log_verbosity=9, debug=True, log_to_std_err=True)
    stack.preview(diff=True, on_output=verbose.append, on_error=verbose.append)
    captured = "\n".join([*faults.output, *verbose])
    assert token not in captured and key_body not in captured
    state_files = list(faults.backend.rglob("*.json"))
    assert state_files
    for path in state_files:
        text = path.read_text()
        assert token not in text and key_body not in text, path
    assert token not in on_host("ps -eo args")
    assert token not in on_host("journalctl --no-pager -o cat")
    holders = on_host(f"grep -rlsF {token} /etc /var /usr/local /shared /root /tmp || true").split()
    for holder in holders:
        assert holder.endswith(".env") and on_host(f"stat -c %a {holder}").strip() == "600", holder
    assert holders, "the deployment's environment file should hold the token"
    stack.destroy(on_output=verbose.append, on_error=verbose.append, log_verbosity=9, debug=True, log_to_std_err=True)
    assert token not in "\n".join(verbose)
    # What is left belongs to other deployments on the sandbox (a `make up` of the dev stack), if any.
    left = on_host(f"grep -rlsF {token} /etc /var /usr/local /shared /root /tmp || true").split()
    assert not [path for path in left if "e2e-" in path or "/faults." in path], left
