#!/usr/bin/env python3
"""vllm-fleet GPU-release guard: runs as ExecStartPre of every vLLM unit.

In production, tensor-parallel workers and engine cores outlived their API server and kept GPU memory
after the service was stopped; the next launch then failed. This guard waits until the deployment's
GPUs are released and stops stray holders itself, within a bound, or fails with the PIDs it could not
stop. It never touches a process that belongs to another running vLLM unit: that is a conflict between
deployments, reported instead. Standard library only: it runs with whatever python the host has.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuMemory:
    index: int
    used_mib: int


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    name: str
    used_mib: int
    # GPU indices it holds, from nvidia-smi's gpu_uuid; None when nvidia-smi did not say.
    gpus: frozenset[int] | None = None


def _number(field: str) -> int:
    """nvidia-smi prints '21090', '21090 MiB' (units on) or '[N/A]'; the latter counts as 0."""
    value = field.strip().removesuffix("MiB").strip()
    if not value or value.startswith("["):
        return 0
    return int(float(value))


def parse_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-*=... --format=csv[,noheader][,nounits]` keyed by field name."""
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0].split(" [")[0] == fields[0]:
            continue  # a header line: "index, name, memory.total [MiB]"
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi printed {len(cells)} columns, expected {len(fields)}: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


# The exact queries recorded in tests/fixtures/nvidia-smi/ (mem-busy.csv, compute-apps-*.csv).
MEMORY_QUERY = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"]
GPU_UUID_QUERY = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    rows = parse_csv(text, ["index", "memory.used"])
    return [GpuMemory(int(r["index"]), _number(r["memory.used"])) for r in rows]


def parse_compute_apps(text: str, uuids: dict[str, int] | None = None) -> list[ComputeApp]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name` (one row per process and GPU), merged
    per process with its GPUs as indices; the older `pid,process_name,used_memory` form is read too."""
    merged: dict[int, ComputeApp] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",", 3)]
        if cells[0] == "pid":
            continue
        if len(cells) == 4:  # pid, gpu_uuid, used_memory, process_name
            pid, uuid, used, name = int(cells[0]), cells[1], _number(cells[2]), cells[3]
            gpu = (uuids or {}).get(uuid)
            gpus = frozenset({gpu}) if gpu is not None else None
        elif len(cells) == 3:  # pid, process_name, used_memory
            pid, name, used, gpus = int(cells[0]), cells[1], _number(cells[2]), None
        else:
            raise ValueError(f"nvidia-smi printed {len(cells)} columns: {line!r}")
        known = merged.get(pid)
        if known is None:
            merged[pid] = ComputeApp(pid, name, used, gpus)
        else:
            both = None if known.gpus is None or gpus is None else known.gpus | gpus
            merged[pid] = ComputeApp(pid, name, known.used_mib + used, both)
    return list(merged.values())


def parse_gpu_uuids(text: str) -> dict[str, int]:
    rows = parse_csv(text, ["index", "uuid"])
    return {r["uuid"]: int(r["index"]) for r in rows}


def device_holders(proc: str = "/proc") -> dict[int, frozenset[int]]:
    """Processes with a /dev/nvidiaN open, and the N's: a child forked after CUDA initialisation holds its
    parent's memory without nvidia-smi listing it (tests/fixtures/nvidia-smi/dead-parent-trace.txt)."""
    found: dict[int, frozenset[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        minors = set()
        try:
            for fd in os.listdir(f"{proc}/{entry}/fd"):
                target = os.readlink(f"{proc}/{entry}/fd/{fd}")
                if target.startswith("/dev/nvidia") and target[len("/dev/nvidia") :].isdigit():
                    minors.add(int(target[len("/dev/nvidia") :]))
        except OSError:
            continue
        if minors:
            found[int(entry)] = frozenset(minors)
    return found


Runner = Callable[[list[str]], str]


def run_nvidia_smi(args: list[str]) -> str:
    binary = os.environ.get("VLLM_FLEET_NVIDIA_SMI", "nvidia-smi")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def read_memory(run: Runner) -> list[GpuMemory]:
    return parse_gpu_memory(run(MEMORY_QUERY))


def read_apps(
    run: Runner,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> list[ComputeApp]:
    """What holds GPU memory: nvidia-smi's list by GPU UUID, without PIDs that are gone (it keeps naming a
    killed parent while a child holds its memory), plus live holders of /dev/nvidiaN it does not list."""
    apps = [a for a in parse_compute_apps(run(APPS_QUERY), parse_gpu_uuids(run(GPU_UUID_QUERY))) if is_alive(a.pid)]
    listed = {a.pid for a in apps}
    for pid, minors in devices().items():
        if pid not in listed:
            apps.append(ComputeApp(pid, _comm(pid), 0, minors))
    return apps


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _parent(pid: int, proc: str) -> int:
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def visible_gpus(pid: int, proc: str = "/proc") -> set[int] | None:
    """GPUs a process was started with (CUDA_VISIBLE_DEVICES of it or its nearest ancestor that set
    it: vLLM's engine core and workers drop the variable but use their server's devices), or None
    when it could use any."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open(f"{proc}/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            return None
        for entry in entries:
            if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
                value = entry.split(b"=", 1)[1].decode(errors="replace")
                try:
                    return {int(v) for v in value.split(",") if v.strip()}
                except ValueError:
                    return None  # UUID form: cannot tell, so treat it as possibly ours
        pid = _parent(pid, proc)
    return None


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The systemd service a process runs in, from its cgroup path, or None."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            for line in handle:
                path = line.rstrip("\n").split(":", 2)[-1]
                for part in reversed(path.split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        return None
    return None


# A unit in these states holds (or is about to hold) its GPUs: a 36-minute load is `activating`.
RUNNING_STATES = frozenset({"active", "activating", "reloading"})
MANAGED_MARK = "# Managed by vllm-fleet"


def unit_is_active(unit: str) -> bool:
    """Running in systemd's sense: serving, or still starting (loading a model)."""
    result = subprocess.run(
        ["systemctl", "show", unit, "--property=ActiveState", "--value"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() in RUNNING_STATES


def unit_is_managed(unit: str) -> bool:
    """Whether vllm-fleet wrote the unit's file (its first line says so)."""
    result = subprocess.run(
        ["systemctl", "show", unit, "--property=FragmentPath", "--value"], capture_output=True, text=True, check=False
    )
    path = result.stdout.strip()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().startswith(MANAGED_MARK)
    except OSError:
        return False


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())[:200]
    except OSError:
        return "?"


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie holds no GPU memory)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_processes(pids: list[int], grace: float, log: Callable[[str], None]) -> list[int]:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; return the PIDs still alive after that."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            log(f"sent SIGTERM to stray GPU holder PID {pid}")
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                log(f"sent SIGKILL to PID {pid}, which ignored SIGTERM for {grace:g} s")
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@dataclass
class GuardResult:
    released: bool
    message: str


def guard(
    gpus: list[int],
    threshold_mib: int,
    timeout: float,
    own_unit: str,
    run: Runner = run_nvidia_smi,
    unit_lookup: Callable[[int], str | None] = unit_of,
    gpus_of: Callable[[int], set[int] | None] = visible_gpus,
    is_active: Callable[[str], bool] = unit_is_active,
    stop: Callable[[list[int], float, Callable[[str], None]], list[int]] = stop_processes,
    log: Callable[[str], None] = print,
    poll: float = 0.5,
    settle: float = 5.0,
    exclude: frozenset[int] = frozenset(),
    adopted: frozenset[str] = frozenset(),
    foreign: str = "stop",
    is_managed: Callable[[str], bool] = lambda unit: False,
    describe: Callable[[int], str] = command_line,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> GuardResult:
    """Wait until `gpus` are released, stopping what holds them, within `timeout` seconds.

    Each holder is judged by its systemd unit (its cgroup): this deployment's unit, a unit the stack
    adopts (`adopted`) and leftovers of a stopped vllm-fleet unit are stopped; a process of another unit
    that is running or loading is a conflict, never stopped; anything else (no unit, a login session, a
    unit vllm-fleet does not manage) is foreign: stopped when `foreign` is "stop", otherwise the guard
    fails at once with its PID, command line and unit."""
    start = time.monotonic()
    deadline = start + timeout
    wanted = set(gpus)
    unstoppable: list[int] = []
    last_report = 0.0
    while True:
        memory = [m for m in read_memory(run) if m.index in wanted]
        missing = wanted - {m.index for m in memory}
        if missing:
            return GuardResult(False, f"nvidia-smi does not list GPU(s) {sorted(missing)} on this host")
        worst = max(memory, key=lambda m: m.used_mib)
        elapsed = time.monotonic() - start
        if worst.used_mib < threshold_mib:
            return GuardResult(
                True,
                f"GPUs {','.join(map(str, gpus))} released: max {worst.used_mib} MiB < {threshold_mib} MiB after {elapsed:.1f} s",
            )
        # The recorded query does not say which GPU a process uses; the process's own
        # CUDA_VISIBLE_DEVICES does, for everything vLLM starts.
        conflicts = []
        strays = []
        foreigners = []
        for app in read_apps(run, devices, is_alive):
            if app.pid in exclude:
                continue  # this guard and the unit start that runs it
            visible = app.gpus if app.gpus is not None else gpus_of(app.pid)
            if visible is not None and not visible & wanted:
                continue  # a process on other GPUs
            unit = unit_lookup(app.pid)
            if unit == own_unit or (unit is not None and unit in adopted):
                strays.append(app)
            elif unit is not None and is_active(unit) and (unit.startswith("vllm-") or is_managed(unit)):
                conflicts.append(f"PID {app.pid} ({app.name}, {app.used_mib} MiB) of running unit {unit}")
            elif unit is not None and is_managed(unit):
                strays.append(app)  # a leftover of a stopped vllm-fleet unit
            elif foreign == "stop":
                strays.append(app)
            else:
                foreigners.append(
                    f"PID {app.pid} ({describe(app.pid)}, {app.used_mib} MiB) of {unit or 'no systemd unit'}"
                )
        if foreigners:
            return GuardResult(
                False,
                "GPUs "
                + ",".join(map(str, gpus))
                + " are held by processes vllm-fleet does not manage: "
                + "; ".join(foreigners)
                + ". Stop them, add their unit to deployments[].replaces, or set "
                "deployments[].foreignGpuProcesses: stop to let vllm-fleet stop them.",
            )
        if conflicts:
            return GuardResult(
                False,
                "GPUs are held by another running deployment: "
                + "; ".join(conflicts)
                + ". Stop that deployment or give this one other GPUs (deployments[].gpus).",
            )
        if time.monotonic() >= deadline:
            held = ", ".join(f"PID {a.pid} ({a.name}, {a.used_mib} MiB)" for a in strays) or "no process listed"
            detail = f"; could not stop PIDs {unstoppable}" if unstoppable else ""
            return GuardResult(
                False,
                f"GPU {worst.index} still holds {worst.used_mib} MiB (threshold {threshold_mib} MiB) after "
                f"{timeout:g} s: {held}{detail}",
            )
        # Give a just-stopped engine a moment to exit on its own before stopping what is left.
        if strays and elapsed >= min(settle, timeout / 4):
            pids = sorted({a.pid for a in strays})
            log(f"stopping stray GPU holders {pids} on GPUs {','.join(map(str, gpus))}")
            unstoppable = stop(pids, 10.0, log)
        if elapsed - last_report >= 5:
            log(
                f"waiting for GPUs {','.join(map(str, gpus))}: GPU {worst.index} uses {worst.used_mib} MiB ({elapsed:.0f}/{timeout:g} s)"
            )
            last_report = elapsed
        time.sleep(poll)


def ancestors(pid: int) -> frozenset[int]:
    """A process and its parents, up to PID 1."""
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        pid = _parent(pid, "/proc")
    return frozenset(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", required=True, help="comma-separated GPU indices, or 'none'")
    parser.add_argument("--threshold-mib", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--unit", default="")
    parser.add_argument("--adopt", action="append", default=[], help="a unit the stack replaces (repeatable)")
    parser.add_argument(
        "--foreign", choices=["stop", "refuse"], default="refuse", help="what to do with holders of no managed unit"
    )
    args = parser.parse_args(argv)
    if args.gpus == "none":
        print("no GPUs assigned; nothing to release")
        return 0
    gpus = [int(g) for g in args.gpus.split(",")]
    try:
        result = guard(
            gpus,
            args.threshold_mib,
            args.timeout,
            args.unit,
            log=lambda m: print(m, flush=True),
            exclude=ancestors(os.getpid()),
            adopted=frozenset(args.adopt),
            foreign=args.foreign,
            is_managed=unit_is_managed,
            devices=device_holders,
        )
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as error:
        print(f"gpu-release-guard: {error}", file=sys.stderr)
        return 1
    print(
        ("" if result.released else "gpu-release-guard: ") + result.message,
        file=sys.stdout if result.released else sys.stderr,
    )
    return 0 if result.released else 1


if __name__ == "__main__":
    sys.exit(main())
