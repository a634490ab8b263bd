"""The GPU-release guard against a real GPU and the real nvidia-smi (run through the `device` tool; not
part of `make test`, which has no GPU). The case the fixtures recorded: a process allocates GPU memory,
forks a child after CUDA initialisation, and is SIGKILLed; nvidia-smi keeps naming the dead parent
while the unlisted child holds the memory.

    python3 bench/device/guard_on_gpu.py OUT.json

Checks, in order: the guard with --foreign refuse fails and names the child (found through its open
/dev/nvidia* files, since nvidia-smi does not list it); the guard with --foreign stop stops the child and
reports the GPU released; memory.used falls below the threshold. Writes the timings and outputs to OUT.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUARD = ROOT / "host" / "gpu_release_guard.py"
HOLDER = """
import os, sys, time, torch
block = torch.empty(10 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
child = os.fork()
if child == 0:
    time.sleep(3600)
    sys.exit(0)
print(os.getpid(), child, flush=True)
time.sleep(3600)
"""


def guard_module_alive(pid: int) -> bool:
    """Alive as the guard counts it: the process exists and is not a zombie (which holds no memory)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


def used_mib() -> int:
    return max(int(v) for v in smi("--query-gpu=memory.used", "--format=csv,noheader,nounits").split())


def guard(foreign: str) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(GUARD), "--gpus", "0", "--threshold-mib", "1000", "--timeout", "60",
         "--unit", "vllm-device-check.service", "--foreign", foreign],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return result.returncode, (result.stdout + result.stderr).strip(), time.monotonic() - started


def main() -> int:
    report: dict[str, object] = {"gpu": smi("--query-gpu=name,driver_version", "--format=csv,noheader").strip()}
    report["idle_mib"] = used_mib()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert holder.stdout is not None
    parent, child = (int(v) for v in holder.stdout.readline().split())
    report["busy_mib"] = used_mib()
    report["apps_before_kill"] = smi("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
    os.kill(parent, signal.SIGKILL)
    holder.wait()
    time.sleep(3)
    report["apps_after_parent_killed"] = smi(
        "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"
    )
    report["used_after_parent_killed_mib"] = used_mib()
    code, output, seconds = guard("refuse")
    report["refuse"] = {"exit": code, "output": output, "seconds": round(seconds, 2)}
    ok_refuse = code == 1 and f"PID {child} " in output
    killed_at = time.monotonic()
    code, output, seconds = guard("stop")
    report["stop"] = {"exit": code, "output": output, "seconds": round(seconds, 2)}
    report["used_after_guard_mib"] = used_mib()
    report["child_gone"] = not guard_module_alive(child)
    report["release_seconds_from_guard_start"] = round(time.monotonic() - killed_at, 2)
    ok_stop = code == 0 and report["child_gone"] and int(report["used_after_guard_mib"]) < 1000  # type: ignore[call-overload]
    report["passed"] = bool(ok_refuse and ok_stop)
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(json.dumps(report, indent=1))
    if guard_module_alive(child):
        os.kill(child, signal.SIGKILL)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
