"""The GPU-release guard's parser on recorded real nvidia-smi output, and its decisions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from host import facts
from host.contract import ProcessUnit
from host.tools import gpu_release_guard as guard
from sandbox.processes import run_captured
from tests.support.paths import FIXTURES, ROOT


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_parses_recorded_memory_query() -> None:
    assert facts.parse_gpu_memory(fixture("mem-busy.csv")) == [facts.GpuMemory(0, 21099)]


def test_parses_recorded_compute_apps() -> None:
    assert facts.parse_compute_apps(fixture("compute-apps-busy.csv")) == [facts.ComputeApp(425, "python3", 21090)]
    assert facts.parse_compute_apps(fixture("compute-apps-idle.csv")) == []


def test_parses_header_and_units_variant() -> None:
    rows = facts.parse_csv(fixture("query-gpu-header.csv"), ["index", "name", "memory.total", "memory.used"])
    assert rows == [{"index": "0", "name": "NVIDIA H200", "memory.total": "143771 MiB", "memory.used": "0 MiB"}]
    assert facts._number(rows[0]["memory.total"]) == 143771


def test_full_query_has_nine_columns() -> None:
    fields = [
        "index",
        "uuid",
        "name",
        "memory.total",
        "memory.used",
        "memory.free",
        "driver_version",
        "pci.bus_id",
        "compute_cap",
    ]
    (row,) = facts.parse_csv(fixture("query-gpu.csv"), fields)
    assert row["driver_version"] == "580.159.04" and row["compute_cap"] == "9.0"
    with pytest.raises(ValueError, match="columns"):
        facts.parse_csv(fixture("query-gpu.csv"), fields[:3])


UUID = "GPU-2d89e51f-5e96-045d-c482-d5b2e616b566"  # the recorded H200 (query-gpu-index-uuid.csv)


class ReplayedSmi:
    """Answers the guard's two queries from the recorded busy output until the holder is stopped,
    then from the recorded trace's released reading (release-trace.txt: 21099 MiB, then 0)."""

    def __init__(self) -> None:
        trace = [line.split() for line in fixture("release-trace.txt").splitlines()]
        self.busy_mib, self.idle_mib = int(trace[0][1]), int(trace[-1][1])
        self.released = False
        self.holder_index = 0
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        if args == facts.MEMORY_QUERY:
            return f"0, {self.idle_mib if self.released else self.busy_mib}\n"
        if args == facts.GPU_UUID_QUERY:
            # The recorded H200 as GPU `holder_index`; GPU 0 another card when that is not 0.
            other = "" if self.holder_index == 0 else "0, GPU-another-card\n"
            return f"{other}{self.holder_index}, {UUID}\n"
        assert args == facts.APPS_QUERY
        if self.released:
            return ""
        # The recorded holder (compute-apps-busy.csv) in the UUID query's column order.
        ((pid, name, used),) = [line.split(", ") for line in fixture("compute-apps-busy.csv").splitlines()]
        return f"{pid}, {UUID}, {used}, {name}\n"


def guard_gpu_0(
    smi: Callable[[list[str]], str],
    timeout: float,
    *,
    unit: str | None = None,
    gpus: set[int] | None = None,
    running: bool = False,
    managed: bool = False,
    **options: Any,
) -> guard.GuardResult:
    """The guard of vllm-new.service waiting for GPU 0 to fall below 1000 MiB, nvidia-smi answered by `smi`
    and polled every 10 ms. Every holder is in `unit` (None: no unit), which is `running` or not and
    vllm-fleet's (`managed`) or not, and uses `gpus` (None: its environment does not say); `options` are the
    guard's others (stop, settle, ...)."""
    return guard.guard(
        [0],
        1000,
        timeout,
        "vllm-new.service",
        run=smi,
        unit_lookup=lambda pid: unit,
        gpus_of=lambda pid: gpus,
        unit_facts=lambda u: ProcessUnit(
            u, "active" if running else "inactive", managed, "dev.other" if managed else None
        ),
        log=lambda m: None,
        poll=0.01,
        is_alive=lambda pid: True,
        **options,
    )


def test_stops_a_stray_holder_then_reports_release() -> None:
    smi = ReplayedSmi()
    stopped: list[list[int]] = []

    def stop(pids: list[int], grace: float, log: object) -> list[int]:
        stopped.append(pids)
        smi.released = True
        return []

    result = guard_gpu_0(smi, 30, gpus={0}, stop=stop, settle=0.0)
    assert result.released, result.message
    assert stopped == [[425]]
    assert "max 0 MiB" in result.message


def must_not_stop(why: str) -> Callable[..., list[int]]:
    def stop(*_args: object) -> list[int]:
        pytest.fail(why)

    return stop


@pytest.mark.parametrize(
    ("holder_gpu", "timeout", "options", "says"),
    [
        pytest.param(
            0,
            30,
            {
                "unit": "vllm-other.service",
                "gpus": {0},
                "running": True,
                "stop": must_not_stop("must not stop another deployment"),
            },
            "PID 425 (python3, 21090 MiB) of running unit vllm-other.service",
            id="refuses-to-kill-another-running-deployment",
        ),
        pytest.param(
            # nvidia-smi's gpu_uuid puts the holder on GPU 3, not the GPU 0 we wait for.
            3,
            0.2,
            {"gpus": {3}, "stop": must_not_stop("process is on another GPU")},
            "GPU 0 still holds 21099 MiB (threshold 1000 MiB)",
            id="ignores-holders-on-other-gpus-and-times-out",
        ),
        pytest.param(
            0,
            0.3,
            {"stop": lambda pids, g, log: pids, "settle": 0.0},
            "could not stop PIDs [425]",
            id="reports-pids-it-could-not-stop",
        ),
    ],
)
def test_the_guard_gives_up_and_says_why(holder_gpu: int, timeout: float, options: dict[str, Any], says: str) -> None:
    smi = ReplayedSmi()
    smi.holder_index = holder_gpu
    result = guard_gpu_0(smi, timeout, **options)
    assert not result.released
    assert says in result.message


def test_missing_gpu_is_an_error() -> None:
    result = guard.guard([5], 1000, 1, "u", run=ReplayedSmi(), log=lambda m: None)
    assert not result.released and "GPU(s) [5]" in result.message


def test_stop_processes_kills_a_real_process_that_ignores_sigterm() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"up\n"
    logs: list[str] = []
    started = time.monotonic()
    left = guard.stop_processes([child.pid], 0.5, logs.append)
    child.wait(timeout=5)
    assert left == [] and child.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 5
    assert any("SIGKILL" in line for line in logs)


def test_visible_gpus_reads_the_environment(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "environ").write_bytes(b"PATH=/bin\0CUDA_VISIBLE_DEVICES=2,3\0")
    assert facts.visible_gpus(7, proc=str(tmp_path)) == {2, 3}
    (tmp_path / "7" / "environ").write_bytes(b"PATH=/bin\0")
    (tmp_path / "7" / "stat").write_text("7 (VLLM::Worker) S 1 7 7 0")
    assert facts.visible_gpus(7, proc=str(tmp_path)) is None
    # A worker without the variable uses the devices of the server that started it.
    (tmp_path / "6").mkdir()
    (tmp_path / "6" / "environ").write_bytes(b"CUDA_VISIBLE_DEVICES=1\0")
    (tmp_path / "7" / "stat").write_text("7 (VLLM::Worker) S 6 7 7 0")
    assert facts.visible_gpus(7, proc=str(tmp_path)) == {1}
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/vllm-kimi-k25-int4.service\n")
    assert facts.unit_of(7, proc=str(tmp_path)) == "vllm-kimi-k25-int4.service"


def test_cli_with_no_gpus_is_a_no_op() -> None:
    result = run_captured(
        [sys.executable, "-m", "host.tools.gpu_release_guard", "--gpus", "none"], cwd=ROOT, env={**os.environ}
    )
    assert result.returncode == 0 and "nothing to release" in result.stdout


def test_never_stops_itself_or_its_parents() -> None:
    smi = ReplayedSmi()
    me = guard.ancestors(os.getpid())
    assert os.getpid() in me and os.getppid() in me
    result = guard_gpu_0(
        lambda args: smi(args).replace("425", str(os.getpid())),
        0.2,
        stop=lambda *a: pytest.fail("must not stop its own process"),
        settle=0.0,
        exclude=me,
    )
    assert not result.released


def judge(unit: str | None, *, running: bool = False, managed: bool = False, **options: object) -> guard.GuardResult:
    """One recorded holder (PID 425 on GPU 0) in `unit`, with the guard's other inputs fixed."""
    smi = ReplayedSmi()

    def stop(pids: list[int], grace: float, log: object) -> list[int]:
        smi.released = True
        return []

    return guard_gpu_0(
        smi,
        0.5,
        unit=unit,
        gpus={0},
        running=running,
        managed=managed,
        describe=lambda pid: "python3 hold.py",
        stop=stop,
        settle=0.0,
        **options,
    )


def test_foreign_holder_is_refused_by_default_with_pid_command_and_unit() -> None:
    result = judge("session-3.scope", foreign="refuse")
    assert not result.released
    assert "PID 425 (python3 hold.py, 21090 MiB) of session-3.scope" in result.message
    assert "deployments[].foreignGpuProcesses: stop" in result.message
    assert "PID 425 (python3 hold.py, 21090 MiB) of no systemd unit" in judge(None, foreign="refuse").message


def test_foreign_holder_is_stopped_when_the_stack_says_so() -> None:
    assert judge(None, foreign="stop").released


def test_adopted_and_leftover_managed_units_are_stopped_even_when_refusing_foreigners() -> None:
    assert judge("vllm-glm5.service", foreign="refuse", adopted=frozenset({"vllm-glm5.service"})).released
    assert judge("vllm-old.service", foreign="refuse", managed=True).released  # stopped, not running


def test_a_loading_unit_counts_as_running_and_is_never_stopped() -> None:
    # is_active is true for `activating`: a unit 36 minutes into its load is a conflict, not a stray.
    result = judge("vllm-other.service", running=True, foreign="stop")
    assert not result.released and "of running unit vllm-other.service" in result.message


def test_a_holders_unit_is_read_from_systemd_with_activating_as_running(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"activating": True, "active": True, "reloading": True, "inactive": False, "failed": False}
    for state, running in answers.items():
        monkeypatch.setattr(
            subprocess,
            "run",
            lambda *a, _s=state, **k: subprocess.CompletedProcess(
                a, 0, stdout=f"ActiveState={_s}\nFragmentPath=\n", stderr=""
            ),
        )
        unit = guard.process_unit("vllm-x.service")
        assert unit.running is running and not unit.managed, state


def test_holders_are_attributed_by_gpu_uuid_and_merged_per_process() -> None:
    uuids = facts.parse_gpu_uuids(fixture("query-gpu-index-uuid.csv").replace(", 00000000:00:06.0, 16934", ""))
    assert uuids == {UUID: 0}
    apps = facts.parse_compute_apps(fixture("compute-apps-uuid-busy.csv"), uuids)
    assert apps == [
        facts.ComputeApp(427, "python3", 10758, frozenset({0})),
        facts.ComputeApp(428, "python3", 2566, frozenset({0})),
        facts.ComputeApp(469, "/opt/torch/.venv/bin/python3", 3590, frozenset({0})),
    ]
    two_gpus = f"9, {UUID}, 100, vllm\n9, GPU-other, 50, vllm\n"
    assert facts.parse_compute_apps(two_gpus, {UUID: 0, "GPU-other": 1}) == [
        facts.ComputeApp(9, "vllm", 150, frozenset({0, 1}))
    ]


def test_a_dead_listed_pid_is_dropped_and_the_live_device_holder_found() -> None:
    """dead-parent-trace.txt: nvidia-smi keeps naming killed PID 675; child 697 holds /dev/nvidia0."""

    def smi(args: list[str]) -> str:
        if args == facts.GPU_UUID_QUERY:
            return f"0, {UUID}\n"
        return f"675, {UUID}, 10758, python3\n"

    apps = facts.read_apps(smi, devices=lambda: {697: frozenset({0})}, is_alive=lambda pid: pid != 675)
    assert [(a.pid, a.gpus) for a in apps] == [(697, frozenset({0}))]


def test_device_holders_reads_open_nvidia_devices(tmp_path: Path) -> None:
    for pid, targets in {"697": ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"], "700": ["/dev/null"]}.items():
        fds = tmp_path / pid / "fd"
        fds.mkdir(parents=True)
        for number, target in enumerate(targets):
            (fds / str(number)).symlink_to(target)
    assert facts.device_holders(str(tmp_path)) == {697: frozenset({0})}
