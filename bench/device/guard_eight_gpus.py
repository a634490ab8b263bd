"""The GPU-release guard across every GPU of one machine (issue 50; run through the `device` tool on an
8-GPU kind, not part of `make test`). guard_on_gpu.py traced one GPU; here one real CUDA process per GPU
holds memory on its own GPU with every GPU visible (as a TP engine's workers see them), and the last one
forks a child after CUDA is up and is then SIGKILLed: its memory stays held by a child that nvidia-smi
does not list, while nvidia-smi goes on naming the dead parent.

    python3 -m bench.device.guard_eight_gpus --out DIR [--gpus 8] [--hold-gib 4] [--timeout 30]

From the repository's root. Each check is a line of the record's `checks` (name, passed, detail):
1. nvidia-smi's minor numbers are the GPUs' indices (the guard reads a /dev/nvidiaN it finds open as GPU N);
2. the guard's reading (host.facts.read_apps over the real nvidia-smi and /proc) before and after the kill:
   each live holder on its own GPU alone, the listed ones by the GPU UUID nvidia-smi gives, the forked
   child by the /dev/nvidiaN files it holds; the dead parent left out;
3. `gpu-release-guard --foreign refuse` over all the GPUs fails and names every live holder, not the dead
   parent;
4. `gpu-release-guard --gpus i --foreign stop` for each GPU in turn, the child's GPU last: it exits 0 within
   its timeout, GPU i falls under the threshold, its holder is gone and every other GPU's holder lives on.
It runs only where nothing holds a GPU beforehand (its stops would stop it: never against the sandbox's
stand-in nvidia-smi on a shared host, which counts every engine of the host). Not checked, and the record
says so: the attribution by systemd unit (the holders' cgroups), where PID 1 is not systemd (as on these
machines): this deployment's unit, another running or stopped unit of vllm-fleet, adopted units. The record
(`<gpu>x<N>-guard-<date>.json` in DIR) keeps the guard's outputs, each holder's open /dev/nvidia* files and
the timings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.device.gpu_facts import gpu_slug, parse_query
from bench.device.load_rate import command as run
from host import facts

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD_MIB = 1000
HOLDER = """
import os, sys, time, torch
gpu, gib, fork = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "fork"
block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{gpu}")
block.fill_(1)
torch.cuda.synchronize()
child = os.fork() if fork else 0
if fork and child == 0:
    time.sleep(3600)
    os._exit(0)
print(os.getpid(), child, flush=True)
time.sleep(3600)
"""


@dataclass(frozen=True)
class Holder:
    gpu: int
    pid: int  # the process that allocated the memory
    child: int = 0  # the child it forked after CUDA was up (0: none)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


# ---- judgements over what was read (pure; tests/test_guard_eight_gpus.py) -------------------------------


def minor_check(query: Sequence[dict[str, str]]) -> Check:
    """nvidia-smi -q's GPUs in index order, each with its minor number: the guard takes /dev/nvidiaN for GPU N."""
    minors = [q.get("Minor Number") for q in query]
    same = bool(minors) and all(m == str(i) for i, m in enumerate(minors))
    return Check("minor numbers are the GPU indices", same, f"minor numbers by index: {minors}")


def idle_check(apps: Iterable[facts.ComputeApp]) -> Check:
    """Nothing holds a GPU before the holders start: the guard's stops would stop it."""
    held = [f"PID {a.pid} ({a.name}) on GPUs {sorted(a.gpus) if a.gpus is not None else 'all'}" for a in apps]
    detail = "; ".join(held) or "no process holds a GPU"
    if held:
        detail = "already in use, so the guard's stops would stop them: " + detail
    return Check("the GPUs are idle before the check", not held, detail)


def attribution_checks(holders: Sequence[Holder], apps: Iterable[facts.ComputeApp], dead: int = 0) -> list[Check]:
    """Each live holder among the guard's reading, on its own GPU alone; the dead parent not there."""
    seen = {app.pid: app for app in apps}
    checks = []
    for holder in holders:
        for pid, how in (
            (holder.pid, "listed by nvidia-smi, by GPU UUID"),
            (holder.child, "by its /dev/nvidia* files"),
        ):
            if not pid or pid == dead:
                continue
            app = seen.get(pid)
            gpus = sorted(app.gpus) if app is not None and app.gpus is not None else None
            checks.append(
                Check(
                    f"PID {pid} attributed to GPU {holder.gpu} ({how})",
                    gpus == [holder.gpu],
                    "not in the guard's reading" if app is None else f"read as GPUs {gpus}, {app.used_mib} MiB",
                )
            )
    if dead:
        checks.append(
            Check(
                f"the killed parent PID {dead} is left out",
                dead not in seen,
                "nvidia-smi still lists it" if dead in seen else "",
            )
        )
    return checks


def refuse_check(code: int, output: str, live: Iterable[int], dead: int = 0) -> Check:
    """`--foreign refuse` over all GPUs: it fails and names every live holder (and not the dead parent)."""
    missing = [pid for pid in live if f"PID {pid} (" not in output]
    named_dead = bool(dead) and f"PID {dead} (" in output
    passed = code == 1 and not missing and not named_dead
    detail = f"exit {code}; not named: {missing}" + ("; the dead parent named" if named_dead else "")
    return Check("--foreign refuse over every GPU names every live holder", passed, detail)


def stop_checks(
    gpu: int,
    code: int,
    seconds: float,
    timeout: float,
    used_mib: int,
    target: Sequence[int],
    alive_after: dict[int, bool],
) -> list[Check]:
    """`--gpus <gpu> --foreign stop`: released in time, its holder(s) `target` gone, every other PID alive."""
    gone = [pid for pid in target if not alive_after.get(pid, False)]
    others_dead = [pid for pid, alive in alive_after.items() if pid not in target and not alive]
    return [
        Check(
            f"GPU {gpu}: the guard released it within its timeout",
            code == 0 and seconds < timeout and used_mib < THRESHOLD_MIB,
            f"exit {code} after {seconds:.2f} s (timeout {timeout:g} s); GPU {gpu} uses {used_mib} MiB",
        ),
        Check(f"GPU {gpu}: its holder {list(target)} stopped", gone == list(target), f"gone: {gone}"),
        Check(
            f"GPU {gpu}: the other GPUs' holders left alone",
            not others_dead,
            f"stopped as well: {others_dead}" if others_dead else f"{len(alive_after) - len(target)} still alive",
        ),
    ]


def stop_order(holders: Sequence[Holder]) -> list[Holder]:
    """The GPUs with a plain holder first, the forked child's last: each plain stop shows the child untouched."""
    return sorted(holders, key=lambda h: (h.child != 0, h.gpu))


def targets(holder: Holder, dead: int) -> list[int]:
    return [pid for pid in (holder.pid, holder.child) if pid and pid != dead]


# ---- the machine ----------------------------------------------------------------------------------------


def nvidia_fds(pid: int) -> dict[str, int]:
    """How many of a process's open files are each /dev/nvidia* node (/proc/PID/fd)."""
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("/dev/nvidia"):
                    counts[target] = counts.get(target, 0) + 1
    return dict(sorted(counts.items()))


def used_mib(gpu: int) -> int:
    return next((m.used_mib for m in facts.read_memory(facts.run_nvidia_smi) if m.index == gpu), -1)


def guard(gpus: Sequence[int], foreign: str, timeout: float) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "host.tools.gpu_release_guard", "--gpus", ",".join(map(str, gpus)),
         "--threshold-mib", str(THRESHOLD_MIB), "--timeout", str(timeout),
         "--unit", "vllm-device-check.service", "--foreign", foreign],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=timeout + 60,
    )  # fmt: skip
    return result.returncode, (result.stdout + result.stderr).strip(), time.monotonic() - started


def start_holders(n: int, gib: float, deadline_s: float) -> tuple[list[Holder], list[subprocess.Popen[str]], list[str]]:
    """One holder per GPU, all at once, every GPU visible to each (no CUDA_VISIBLE_DEVICES); the last forks."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    command = [sys.executable, "-c", HOLDER]
    processes = [
        subprocess.Popen(
            [*command, str(gpu), str(gib), "fork" if gpu == n - 1 else "hold"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        for gpu in range(n)
    ]
    holders: list[Holder] = []
    errors: list[str] = []
    deadline = time.monotonic() + deadline_s
    for gpu, process in enumerate(processes):
        assert process.stdout is not None and process.stderr is not None
        ready, _, _ = select.select([process.stdout], [], [], max(deadline - time.monotonic(), 0))
        line = process.stdout.readline() if ready else ""
        if not line.strip():
            process.kill()  # stuck or dead before it forked: nothing else holds its pipes
            process.wait(timeout=10)
            errors.append(
                f"GPU {gpu}: the holder printed nothing within {deadline_s:g} s: {process.stderr.read()[-2000:]}"
            )
            continue
        pid, child = (int(v) for v in line.split())
        holders.append(Holder(gpu, pid, child))
    return holders, processes, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the GPU-release guard across every GPU of this machine")
    parser.add_argument("--out", required=True, help="a directory: the record is written there under its own name")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hold-gib", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=30.0, help="each guard's --timeout")
    args = parser.parse_args(argv)
    n, timeout = int(args.gpus), float(args.timeout)
    began = time.monotonic()
    fields = ["index", "uuid", "name"]
    table = facts.parse_csv(
        facts.run_nvidia_smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]), fields
    )
    name = table[0]["name"] if table else "gpu"
    out = Path(args.out) / f"{gpu_slug(name)}x{n}-guard-{time.strftime('%Y-%m-%d', time.gmtime())}.json"
    pid1 = Path("/proc/1/comm").read_text().strip()
    record: dict[str, Any] = {
        "what": f"gpu-release-guard on {n} GPUs held by real CUDA processes, one forked child outliving its killed parent",
        "kind": "guard-across-gpus",
        "command": "python3 -m bench.device.guard_eight_gpus " + " ".join(sys.argv[1:] if argv is None else argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpus": table,
        "pid1": pid1,
        "not_checked": (
            "the attribution by systemd unit: PID 1 here is "
            + repr(pid1)
            + (", not systemd, so" if pid1 != "systemd" else "; this script starts no units, so")
            + " no holder runs in a unit: this deployment's unit, another vLLM unit running (a conflict) or stopped"
            " (a leftover), units vllm-fleet manages and adopted units (deployments[].replaces) are untested here;"
            " they are tested with real systemd on the sandbox (tests/host/test_gpu_release_guard.py, e2e)"
        ),
        "idle_mib": [m.used_mib for m in facts.read_memory(facts.run_nvidia_smi)],
    }
    checks: list[Check] = []

    def save() -> None:
        record["checks"] = [asdict(c) for c in checks]
        record["passed"] = bool(checks) and all(c.passed for c in checks)
        record["elapsed_s"] = round(time.monotonic() - began, 1)
        out.write_text(json.dumps(record, indent=1) + "\n")

    if len(table) < n:
        record["error"] = f"{n} GPUs asked for, nvidia-smi lists {len(table)}"
        save()
        return 1
    query = parse_query(run("nvidia-smi", "-q"))
    record["minor_numbers"] = [q.get("Minor Number") for q in query]
    checks.append(minor_check(query))
    # The guard's stops act on whatever holds these GPUs: on a machine where anything else does (another
    # user's engine; a stand-in nvidia-smi that sees the whole host), this check does not run.
    busy = idle_check(facts.read_apps(facts.run_nvidia_smi, facts.device_holders))
    checks.append(busy)
    if not busy.passed:
        save()
        print(busy.detail, file=sys.stderr)
        return 1
    holders, processes, errors = start_holders(n, float(args.hold_gib), 120)
    started = [pid for h in holders for pid in (h.pid, h.child) if pid]
    try:
        record["holders"] = [asdict(h) for h in holders]
        record["holder_errors"] = errors
        checks.append(Check("every GPU got its holder", len(holders) == n and not errors, "; ".join(errors)))
        if errors:
            return 1
        record["busy_mib"] = [m.used_mib for m in facts.read_memory(facts.run_nvidia_smi)]
        record["holder_files"] = {pid: nvidia_fds(pid) for pid in started}
        record["holder_units"] = {pid: facts.unit_of(pid) for pid in started}
        before = facts.read_apps(facts.run_nvidia_smi, facts.device_holders)
        record["apps_before_kill"] = [asdict(a) | {"gpus": sorted(a.gpus or [])} for a in before]
        checks.extend(attribution_checks(holders, before))
        forked = next(h for h in holders if h.child)
        os.kill(forked.pid, signal.SIGKILL)
        processes[forked.gpu].wait(timeout=10)  # reaped: gone from /proc, as a killed engine's parent is
        time.sleep(3)
        record["nvidia_smi_apps_after_kill"] = run(
            "nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"
        )
        after = facts.read_apps(facts.run_nvidia_smi, facts.device_holders)
        record["apps_after_kill"] = [asdict(a) | {"gpus": sorted(a.gpus or [])} for a in after]
        checks.extend(attribution_checks(holders, after, dead=forked.pid))
        live = [pid for pid in started if pid != forked.pid]
        code, output, seconds = guard(range(n), "refuse", timeout)
        record["refuse"] = {"exit": code, "output": output, "seconds": round(seconds, 2)}
        checks.append(refuse_check(code, output, live, forked.pid))
        record["stops"] = []
        for holder in stop_order(holders):
            code, output, seconds = guard([holder.gpu], "stop", timeout)
            time.sleep(0.5)
            alive_after = {pid: facts.alive(pid) for pid in live}
            used = used_mib(holder.gpu)
            record["stops"].append(
                {"gpu": holder.gpu, "exit": code, "output": output, "seconds": round(seconds, 2), "used_mib": used}
            )
            checks.extend(
                stop_checks(holder.gpu, code, seconds, timeout, used, targets(holder, forked.pid), alive_after)
            )
            live = [pid for pid in live if alive_after[pid]]
            save()
        return 0 if all(c.passed for c in checks) else 1
    finally:
        for pid in started:
            if facts.alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        save()
        print(json.dumps({"passed": record["passed"], "checks": record["checks"]}, indent=1))
        print(f"record: {out}")


if __name__ == "__main__":
    sys.exit(main())
