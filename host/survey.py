#!/usr/bin/env python3
"""vllm-fleet survey: what already runs on a host, read-only, as one JSON document on stdout.

The controller runs it over SSH while it evaluates the program (`pulumi preview` too), before the tools
are installed, by piping this file into the host's python; the swap transaction runs it again right
before it stops anything. It reports:
  units       every vllm-*.service: active state, enabled, whether vllm-fleet manages it (its first line),
              the sha256 of its unit file (a hand edit shows as drift against the rendered unit)
  listeners   TCP listening ports with the PID and systemd unit that holds them (`ss -ltnpH`)
  gpuHolders  processes nvidia-smi lists per GPU (`--query-compute-apps=pid,gpu_uuid,...` mapped to indices
              with `--query-gpu=index,uuid`), with their unit and command line
  active      per deployment (stack.deployment), what its last swap left serving: unit, GPUs, engine port,
              and how many drift repairs its activations have made (the `repairs` file)
  memory      MemTotal and MemAvailable of /proc/meminfo, in MiB
A process's unit is the last *.service of its cgroup path; a login session's scope or no cgroup means
it belongs to no unit. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from typing import Any

MANAGED_MARK = "# Managed by vllm-fleet"
STATE_ROOT = "/var/lib/vllm-fleet"
MANAGED_BY = re.compile(r"^# Managed by vllm-fleet: stack (\S+?), deployment (\S+?)\. ")


def run(*args: str) -> str:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def unit_of_pid(pid: int, proc: str = "/proc") -> str | None:
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            for line in handle:
                for part in reversed(line.rstrip("\n").split(":", 2)[-1].split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        return None
    return None


def command_line(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())[:300]
    except OSError:
        return ""


_SS_LINE = re.compile(r"^\S+\s+\d+\s+\d+\s+(\S+):(\d+)\s+\S+\s*(.*)$")
_SS_PID = re.compile(r"pid=(\d+)")


def parse_ss(text: str) -> list[dict[str, Any]]:
    """`ss -ltnpH` lines: one entry per (address, port, pid)."""
    found = []
    for line in text.splitlines():
        match = _SS_LINE.match(line.strip())
        if not match:
            continue
        address, port, users = match.group(1), int(match.group(2)), match.group(3)
        pids = sorted({int(p) for p in _SS_PID.findall(users)}) or [0]
        for pid in pids:
            found.append({"address": address.strip("[]"), "port": port, "pid": pid})
    return found


def parse_gpu_uuids(text: str) -> dict[str, int]:
    """`nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits` as uuid -> index."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 2 and cells[0].isdigit():
            out[cells[1]] = int(cells[0])
    return out


def parse_compute_apps(text: str, uuids: dict[str, int]) -> list[dict[str, Any]]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name` rows merged per PID."""
    holders: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 3)]
        if len(cells) < 4 or not cells[0].isdigit():
            continue
        pid = int(cells[0])
        entry = holders.setdefault(pid, {"pid": pid, "gpus": [], "usedMib": 0, "name": cells[3]})
        if cells[1] in uuids and uuids[cells[1]] not in entry["gpus"]:
            entry["gpus"].append(uuids[cells[1]])
        used = cells[2].removesuffix("MiB").strip()
        entry["usedMib"] += int(float(used)) if used and not used.startswith("[") else 0
    return [dict(h, gpus=sorted(h["gpus"])) for h in holders.values()]


def units() -> list[dict[str, Any]]:
    listing = run("systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=service", "vllm-*")
    files = run("systemctl", "list-unit-files", "--plain", "--no-legend", "--type=service", "vllm-*")
    names = {line.split()[0] for line in (listing + files).splitlines() if line.split()}
    out = []
    for name in sorted(n for n in names if n.endswith(".service")):
        props = dict(
            line.split("=", 1)
            for line in run("systemctl", "show", name, "--property=ActiveState,UnitFileState,FragmentPath").splitlines()
            if "=" in line
        )
        fragment = props.get("FragmentPath", "")
        first_line, digest = "", None
        if fragment:
            try:
                with open(fragment, "rb") as raw:
                    content = raw.read()
                first_line = content.decode("utf-8", errors="replace").split("\n", 1)[0] + "\n"
                digest = hashlib.sha256(content).hexdigest()
            except OSError:
                pass
        owner = MANAGED_BY.match(first_line)
        out.append(
            {
                "name": name,
                "activeState": props.get("ActiveState", "inactive"),
                "enabled": props.get("UnitFileState") == "enabled",
                "managed": first_line.startswith(MANAGED_MARK),
                # stack.deployment of a vllm-fleet unit, from its first line
                "owner": f"{owner.group(1)}.{owner.group(2)}" if owner else None,
                "fragment": fragment,
                "sha256": digest,
            }
        )
    return out


def parse_active(text: str) -> dict[str, Any]:
    """A deployment's `active` record (KEY=VALUE lines written by the swap)."""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    backend = fields.get("BACKEND_PORT", "")
    return {
        "unit": fields.get("UNIT", ""),
        "gpus": [int(g) for g in fields.get("GPUS", "").split(",") if g.strip().isdigit()],
        "backendPort": int(backend) if backend.isdigit() else None,
    }


def active_records(state_root: str = STATE_ROOT) -> dict[str, Any]:
    out = {}
    base = f"{state_root}/deployments"
    try:
        owners = sorted(os.listdir(base))
    except OSError:
        return {}
    for owner in owners:
        try:
            with open(f"{base}/{owner}/active", encoding="utf-8") as handle:
                out[owner] = parse_active(handle.read())
        except OSError:
            continue
        try:
            with open(f"{base}/{owner}/repairs", encoding="utf-8") as handle:
                out[owner]["repairs"] = int(handle.read().strip() or 0)
        except (OSError, ValueError):
            out[owner]["repairs"] = 0
        try:
            with open(f"{base}/{owner}/swap-result.json", encoding="utf-8") as handle:
                timings = json.load(handle).get("timings", {})
            out[owner]["lastStartSeconds"] = timings.get("start_to_ready")
        except (OSError, ValueError, AttributeError):
            out[owner]["lastStartSeconds"] = None
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and rest.split():
            values[name] = int(rest.split()[0]) // 1024
    return {"totalMib": values.get("MemTotal", 0), "availableMib": values.get("MemAvailable", 0)}


def memory() -> dict[str, int]:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            return parse_meminfo(handle.read())
    except OSError:
        return {"totalMib": 0, "availableMib": 0}


def survey() -> dict[str, Any]:
    listeners = parse_ss(run("ss", "-ltnpH"))
    for entry in listeners:
        entry["unit"] = unit_of_pid(entry["pid"]) if entry["pid"] else None
        entry["cmd"] = command_line(entry["pid"]) if entry["pid"] else ""
    uuids = parse_gpu_uuids(run("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader,nounits"))
    holders = parse_compute_apps(
        run(
            "nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"
        ),
        uuids,
    )
    for holder in holders:
        holder["unit"] = unit_of_pid(holder["pid"])
        holder["cmd"] = command_line(holder["pid"])
    return {
        "units": units(),
        "listeners": listeners,
        "gpuHolders": holders,
        "active": active_records(),
        "memory": memory(),
    }


def main() -> int:
    json.dump(survey(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
