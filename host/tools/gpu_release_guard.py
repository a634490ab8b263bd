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
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from host.contract import ProcessUnit
from host.facts import (
    Runner,
    alive,
    command_line,
    device_holders,
    parent_pid,
    read_apps,
    read_memory,
    read_process_units,
    run_nvidia_smi,
    unit_of,
    visible_gpus,
)
from host.judgement import Holder, holder_verdict


def process_unit(name: str) -> ProcessUnit:
    """The unit's state and whether vllm-fleet wrote it, read now (systemctl show)."""
    return read_process_units([name])[name]


def stop_processes(pids: list[int], grace: float, log: Callable[[str], None]) -> list[int]:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; return the PIDs still alive after that."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            log(f"sent SIGTERM to stray GPU holder PID {pid}")
    _wait_until_gone(pids, grace, 0.2)
    for pid in [p for p in pids if alive(p)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            log(f"sent SIGKILL to PID {pid}, which ignored SIGTERM for {grace:g} s")
    _wait_until_gone(pids, 5, 0.1)
    return [p for p in pids if alive(p)]


def _wait_until_gone(pids: list[int], seconds: float, poll: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(poll)


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
    unit_facts: Callable[[str], ProcessUnit] = process_unit,
    stop: Callable[[list[int], float, Callable[[str], None]], list[int]] = stop_processes,
    log: Callable[[str], None] = print,
    poll: float = 0.5,
    settle: float = 5.0,
    exclude: frozenset[int] = frozenset(),
    adopted: frozenset[str] = frozenset(),
    foreign: str = "stop",
    describe: Callable[[int], str] = command_line,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> GuardResult:
    """Wait until `gpus` are released, stopping what holds them, within `timeout` seconds.

    Each holder is judged by its systemd unit (its cgroup) with the one GPU-holder rule the preview and the
    swap apply (host/judgement.holder_verdict): this deployment's unit and the units the stack takes over
    (`adopted`) are its own, and with the leftovers of a stopped vllm-fleet unit they are stopped; another
    deployment's running unit and a running unit vllm-fleet does not manage are conflicts, never stopped;
    anything else (no unit, a login session, what a stopped hand-made unit left) is foreign: stopped when
    `foreign` is "stop", otherwise the guard fails at once with its PID, command line and unit."""
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
            name = unit_lookup(app.pid)
            verdict = holder_verdict(
                unit_facts(name) if name is not None else None, lambda u: u == own_unit or u in adopted, foreign
            )
            if verdict.may_stop:
                strays.append(app)
            elif verdict.holder in (Holder.DEPLOYMENT, Holder.HAND_MADE):
                conflicts.append(f"PID {app.pid} ({app.name}, {app.used_mib} MiB) of running unit {name}")
            else:
                foreigners.append(
                    f"PID {app.pid} ({describe(app.pid) or '?'}, {app.used_mib} MiB) of {name or 'no systemd unit'}"
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
                "GPUs are held by running units this deployment does not own: "
                + "; ".join(conflicts)
                + ". Stop that deployment or unit, add a hand-made unit to deployments[].replaces, or give this "
                "deployment other GPUs (deployments[].gpus).",
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
        pid = parent_pid(pid, "/proc")
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
