"""End to end, through the Automation API and the real engine, against the sandbox host: deploy, swap,
no-op, swap back, destroy. The tests run in file order and share one stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI
from pulumi import automation as auto

from sandbox import engine, sandbox_env, tiny_models
from sandbox.processes import run_captured
from sandbox.sandbox_env import on_host, served_ids
from scripts import status
from scripts.downtime_probe import DowntimeProbe
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "e2e"
ENDPOINT = sandbox_env.api_url(sandbox_env.E2E_PORT)


class E2E(SandboxStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK)
        self.phases = sandbox_env.Phases()

    def set_up(self) -> None:
        self.set_model("e2e-tiny-a")

    def tear_down(self) -> None:
        self.destroy(self.stack)

    def set_model(self, model: str) -> None:
        self.stack = self.select(sandbox_env.e2e_stack_file(model, smoke_benchmark=True))

    def up(self) -> auto.UpResult:
        return self.stack.up(on_output=self.output.append)


e2e = module_state(E2E)


def chat(model: str, repo: str) -> None:
    """A chat completion through the real OpenAI client: the tiny model answers with the sentence of the
    repo it was generated as (sandbox/tiny_models.py), so the answer says which model serves."""
    client = OpenAI(base_url=ENDPOINT, api_key="unused", timeout=60, max_retries=1)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hello!"}], max_tokens=32, temperature=0
    )
    assert reply.model == model
    assert reply.choices[0].message.content == tiny_models.SENTENCES[repo]
    assert reply.choices[0].finish_reason == "stop"


def test_deploy_from_scratch(e2e: E2E) -> None:
    with e2e.phases.measure("deploy"):
        result = e2e.up()
    assert result.summary.result == "succeeded"
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service").strip() == "active"
    assert on_host("systemctl is-enabled vllm-e2e-tiny-a.service").strip() == "enabled"
    outputs = result.outputs["deployments"].value["chat"]
    assert outputs["endpoint"] == ENDPOINT and outputs["servedModelName"] == "e2e-tiny-a"
    assert outputs["unitName"] == "vllm-e2e-tiny-a.service" and outputs["modelPath"] == "/shared/e2e-tiny-a"
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    chat("e2e-tiny-a", "acme/tiny-chat-a")
    # The secret environment file exists and only root can read it.
    assert on_host("stat -c %a /etc/vllm-fleet/vllm-e2e-tiny-a.env").strip() == "600"


def test_outputs_say_what_was_deployed(e2e: E2E) -> None:
    report = e2e.stack.outputs()["deployments"].value["chat"]["report"]
    assert report["endpoint"] == ENDPOINT and report["metricsUrl"] == ENDPOINT.removesuffix("/v1") + "/metrics"
    assert report["vllmVersion"].startswith("0.32.0")  # the CPU build says 0.32.0+cpu
    assert len(report["modelRevision"]) == 40 and report["modelState"] == "verified"
    assert report["lastLoadSeconds"] > 0
    bench = report["smokeBenchmark"]
    assert bench["requests"] == 8 and bench["outputTokensPerSecond"] > 0 and bench["ttftMs"] > 0, bench
    print(f"post-deploy numbers: {report}")


def main_pid() -> str:
    return on_host("systemctl show -p MainPID --value vllm-e2e-tiny-a.service").strip()


def test_a_stopped_engine_is_started_again_by_the_next_plain_up(e2e: E2E) -> None:
    """Issue 43: stopped by hand (as after a crash systemd gave up on), the next `pulumi up` sees it. Its
    preview reads the host (no survey kept from an earlier run decides), and its update judges that survey."""
    e2e.stack.preview(expect_no_changes=True)  # a survey the stop below makes stale
    on_host("systemctl stop vllm-e2e-tiny-a.service")
    preview = e2e.stack.preview()
    assert "vllm-e2e-tiny-a.service is inactive: it serves nothing" in preview.stdout, preview.stdout[-3000:]
    assert "facts about the hosts: read now over SSH" in preview.stdout
    assert preview.change_summary.get(auto.OpType.UPDATE) == 1, preview.change_summary  # the serving step
    result = e2e.up()  # the Automation API's up runs no preview: it reads the host itself
    assert result.summary.result == "succeeded"
    assert "facts about the hosts: read now over SSH" in result.stdout
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service").strip() == "active"
    chat("e2e-tiny-a", "acme/tiny-chat-a")
    e2e.stack.preview(expect_no_changes=True)


def test_status_sees_a_hand_edit_and_up_restores_it(e2e: E2E) -> None:
    deployments = e2e.stack.outputs()["deployments"].value
    key = sandbox_env.SSH_KEY.read_text()
    assert status.collect(STACK, deployments, key)["chat"]["drift"] == []
    unit = "/etc/systemd/system/vllm-e2e-tiny-a.service"
    on_host(f"sed -i 's/^Description=.*/&, edited by hand/' {unit} && systemctl daemon-reload")
    found = status.collect(STACK, deployments, key)["chat"]
    assert any("was edited on the host" in line for line in found["drift"]), found["drift"]
    print(status.show("chat", found))
    result = e2e.up()
    assert result.summary.result == "succeeded"
    assert "vllm-e2e-tiny-a.service was edited on the host" in result.stdout
    assert "edited by hand" not in on_host(f"cat {unit}")
    assert status.collect(STACK, deployments, key)["chat"]["drift"] == []
    chat("e2e-tiny-a", "acme/tiny-chat-a")
    e2e.stack.preview(expect_no_changes=True)


def test_a_second_engine_started_by_hand_on_the_gpu_is_named_by_the_preview(e2e: E2E) -> None:
    """The sandbox's nvidia-smi counts a vLLM process on the GPUs of its CUDA_VISIBLE_DEVICES as soon as it
    runs: the next preview reads it there and refuses, naming it and the fix."""
    pid = on_host(
        "CUDA_VISIBLE_DEVICES=3 setsid nohup /opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server "
        "--model /shared/e2e-tiny-a --port 8199 >/dev/null 2>&1 < /dev/null & echo $!"
    ).strip()
    try:
        with pytest.raises(auto.CommandError) as refused:
            e2e.stack.preview()
        message = str(refused.value)
        assert f"GPU 3 is held by PID {pid} (" in message, message[-3000:]
        assert "of no systemd unit, which belongs to no unit vllm-fleet manages; stop it, or set " in message
        assert "vllm-fleet:deployments[chat].foreignGpuProcesses: stop" in message
    finally:
        on_host(f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.2; done", timeout=60)
    e2e.stack.preview(expect_no_changes=True)


def test_a_deleted_shard_is_fetched_again_while_the_engine_serves(e2e: E2E) -> None:
    """An operator frees disk space under a serving model: the next plain `pulumi up` has the download step
    fetch that shard again and verify it, while the engine keeps serving from memory (same MainPID, no
    failed request); the unit's own start check passes again, so a reboot serves."""
    pid = main_pid()
    client = DowntimeProbe(ENDPOINT, "e2e-tiny-a", timeout=10.0).start()
    try:
        on_host("rm /shared/e2e-tiny-a/model-00002-of-00003.safetensors")
        preview = e2e.stack.preview()
        assert "model files in /shared/e2e-tiny-a: changed: model-00002-of-00003.safetensors" in preview.stdout, (
            preview.stdout[-3000:]
        )
        assert preview.change_summary.get(auto.OpType.UPDATE) == 1, preview.change_summary  # the download step
        result = e2e.up()
        assert result.summary.result == "succeeded"
        assert "model-sync: acme/tiny-chat-a@" in result.stdout and "complete and verified" in result.stdout
    finally:
        client.stop()
    seen = client.report()
    assert seen["requests"] > 0 and seen["failed"] == 0, seen
    assert main_pid() == pid
    assert "unchanged" in on_host(
        "/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/model-sync check --dir /shared/e2e-tiny-a"
    )
    e2e.stack.preview(expect_no_changes=True)
    took = sandbox_env.reboot_until(lambda: served_ids(ENDPOINT) == ["e2e-tiny-a"], timeout=300)
    assert took is not None, "the deployment did not serve again after the reboot"
    chat("e2e-tiny-a", "acme/tiny-chat-a")


def test_swap_to_the_second_model(e2e: E2E) -> None:
    old_pids = on_host("systemctl show -p MainPID --value vllm-e2e-tiny-a.service").strip()
    e2e.set_model("e2e-tiny-b")
    preview = e2e.stack.preview(diff=True)
    # The new model's download (a component and its step), and the deployment's two steps; nothing else.
    assert preview.change_summary.get(auto.OpType.CREATE) == 2, preview.change_summary
    # ... which update: the staged unit and the serving step (which reports once the new model serves).
    assert preview.change_summary.get(auto.OpType.UPDATE) == 2, preview.change_summary
    assert set(preview.change_summary) <= {auto.OpType.CREATE, auto.OpType.UPDATE, auto.OpType.SAME}
    with e2e.phases.measure("swap"):
        result = e2e.up()
    assert result.summary.result == "succeeded"
    assert served_ids(ENDPOINT) == ["e2e-tiny-b"]
    chat("e2e-tiny-b", "acme/tiny-chat-b")
    assert on_host("systemctl is-active vllm-e2e-tiny-b.service").strip() == "active"
    # The old unit is gone from the host, and so is every process it ran.
    assert on_host("test -e /etc/systemd/system/vllm-e2e-tiny-a.service || echo gone").strip() == "gone"
    assert on_host(f"test -e /proc/{old_pids} || echo gone").strip() == "gone"
    assert on_host("pgrep -f '[s]erved-model-name e2e-tiny-a' || true").strip() == ""
    # The download, stop, start and readiness appear in the update's output as they happen.
    log = "\n".join(e2e.output)
    assert "model-sync: acme/tiny-chat-b@" in log and "complete and verified" in log
    assert "stopping vllm-e2e-tiny-a.service" in log and "serving e2e-tiny-b from vllm-e2e-tiny-b.service" in log


def sshd_errors() -> int:
    """The errors sshd logged for clients that left before identifying themselves (its journal, read over
    SSH: a login logs none of them)."""
    return int(on_host("journalctl -u ssh -o cat --no-pager | grep -c kex_exchange_identification || true").strip())


def ssh_logins() -> int:
    """The logins the test host's sshd accepted so far, read without logging in (nsenter)."""
    return int(
        sandbox_env.exec_on(
            sandbox_env.TEST_HOST, "journalctl -u ssh --no-pager -o cat | grep -c 'Accepted publickey' || true"
        ).strip()
        or 0
    )


def test_up_again_changes_nothing(e2e: E2E) -> None:
    errors = sshd_errors()
    with e2e.phases.measure("noop_preview"):
        e2e.stack.preview(expect_no_changes=True)
    with e2e.phases.measure("noop_up"):
        result = e2e.up()
    changes = dict(result.summary.resource_changes or {})
    assert set(changes) == {auto.OpType.SAME}, changes
    # Each program run's reachability probe leaves the host's auth log without an error (controller/probe.py).
    assert sshd_errors() == errors
    # A plain `pulumi up` runs the program twice, its preview and its update: they judge one survey, read
    # once over SSH (and no step runs), and it says how old the facts are.
    before = ssh_logins()
    up = run_captured(
        [str(engine.TOOLS / "bin" / "pulumi"), "up", "--yes", "--expect-no-changes", "--stack", STACK],
        cwd=e2e.work,
        env=engine.engine_env(e2e.backend),
        check=True,
    )
    assert ssh_logins() - before == 1, up.stdout[-2000:]
    assert "facts about the hosts: read now over SSH" in up.stdout
    assert "facts about the hosts: those this `pulumi up`'s preview read from host" in up.stdout


def test_swap_back_downloads_nothing(e2e: E2E) -> None:
    sandbox_env.mirror("/_mirror/reset-stats", "POST", {})
    e2e.set_model("e2e-tiny-a")
    preview = e2e.stack.preview()
    # Back to the kept model: the deployment's two steps change, and tiny-b, served by nothing and not
    # kept, is removed (component and step) once the swap succeeded.
    assert preview.change_summary.get(auto.OpType.UPDATE) == 2, preview.change_summary
    assert preview.change_summary.get(auto.OpType.DELETE) == 2, preview.change_summary
    with e2e.phases.measure("swap_back"):
        e2e.up()
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    chat("e2e-tiny-a", "acme/tiny-chat-a")
    assert sandbox_env.resolve_requests(sandbox_env.mirror("/_mirror/stats")) == []
    assert on_host("test -e /shared/e2e-tiny-b || echo gone").strip() == "gone"
    assert on_host("test -d /shared/e2e-tiny-a && echo kept").strip() == "kept"


def test_destroy_leaves_the_host_clean(e2e: E2E) -> None:
    with e2e.phases.measure("destroy"):
        e2e.stack.destroy(on_output=e2e.output.append)
    assert on_host("ls /etc/systemd/system | grep -c '^vllm-e2e' || true").strip() == "0"
    assert on_host("pgrep -f '[v]llm.entrypoints.openai.api_server.*e2e-tiny' || true").strip() == ""
    assert on_host("systemctl list-units --all --no-legend 'vllm-e2e*' | wc -l").strip() == "0"
    # Segments still mapped belong to other running deployments (a `make up` on the same sandbox).
    stray = on_host(
        'for f in /dev/shm/psm_* /dev/shm/sem.mp-* /dev/shm/*vllm* /dev/shm/*nccl*; do [ -e "$f" ] || continue; '
        'grep -qsF "$f" /proc/[0-9]*/maps || echo "$f"; done'
    )
    assert stray.strip() == ""
    # tiny-a is `keep: true`: its files stay; tiny-b was removed with its download.
    assert on_host("test -d /shared/e2e-tiny-a && echo kept").strip() == "kept"
    assert on_host("test -e /shared/e2e-tiny-b || echo gone").strip() == "gone"
    assert on_host("test -e /var/lib/vllm-fleet/deployments/e2e.chat || echo gone").strip() == "gone"
