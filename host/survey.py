#!/usr/bin/env python3
"""vllm-fleet survey: what already runs on a host, read-only, as one JSON document on stdout.

The controller runs it over SSH while it evaluates the program (`pulumi preview` too), before the tools
are installed, by piping the host package into the host's python (render/host_bundle.py); the swap transaction runs it again right
before it stops anything. It reports:
  units       every vllm-*.service: active state, enabled, whether vllm-fleet manages it (its first line),
              the sha256 of its unit file (a hand edit shows as drift against the rendered unit), its
              launch as vLLM reads it (port, GPUs, model, served names) and its restart count
  listeners   TCP listening ports with the PID and systemd unit that holds them (`ss -ltnpH`)
  gpuCount    how many GPUs nvidia-smi lists
  gpuHolders  processes nvidia-smi lists per GPU (`--query-compute-apps=pid,gpu_uuid,...` mapped to indices
              with `--query-gpu=index,uuid`), with their unit and command line
  active      per deployment (stack.deployment), what its last swap left serving: unit, GPUs, engine port,
              and how many drift repairs its activations have made (the `repairs` file)
  claims      per live deployment, the GPUs, ports and unit names its last swap claimed
  memory      MemTotal and MemAvailable of /proc/meminfo, in MiB
  vllm        with --python: the vLLM version that venv has (what the host runs, pinned or not)
  hostKeys    per stack, the fingerprint of the SSH host key its steps pinned at their last preflight
A process's unit is the last *.service of its cgroup path; a login session's scope or no cgroup means
it belongs to no unit (host/facts.py reads all of these). Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from host.adapters import survey_entry as adapters_survey
from host.contract import ADOPTED_DROP_IN, MANAGED_MARK, STATE_DIR, ActiveRecord, pinned_host_keys, read_claims
from host.facts import (
    APPS_QUERY,
    GPU_UUID_QUERY,
    command_line,
    parse_compute_apps,
    parse_environment,
    parse_gpu_uuids,
    parse_meminfo,
    parse_ss,
    unit_launch,
    unit_of,
)
from host.systemd import parse_show

MANAGED_BY = re.compile(r"^# Managed by vllm-fleet: stack (\S+?), deployment (\S+?)\. ")


def run(*args: str) -> str:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def gpu_uuids() -> dict[str, int]:
    """nvidia-smi's GPUs, UUID -> index (their count is what a launch without CUDA_VISIBLE_DEVICES uses)."""
    return parse_gpu_uuids(run("nvidia-smi", *GPU_UUID_QUERY))


def gpu_holders(uuids: dict[str, int] | None = None, apps: str | None = None) -> list[dict[str, Any]]:
    """What nvidia-smi lists per GPU (by UUID, mapped to indices), each with its unit and command line.
    `apps`: the output of its compute-apps query, when it already ran."""
    uuids = gpu_uuids() if uuids is None else uuids
    apps = run("nvidia-smi", *APPS_QUERY) if apps is None else apps
    return [
        {
            "pid": app.pid,
            "gpus": sorted(app.gpus or ()),
            "usedMib": app.used_mib,
            "name": app.name,
            "unit": unit_of(app.pid),
            "cmd": command_line(app.pid),
        }
        for app in parse_compute_apps(apps, uuids)
    ]


UNIT_PROPERTIES = "ActiveState,UnitFileState,FragmentPath,DropInPaths,Environment,NRestarts,MainPID"


def parse_show_blocks(text: str) -> list[dict[str, str]]:
    """`systemctl show` of several units: one block of KEY=VALUE lines per unit, in the order asked."""
    return [parse_show(block) for block in text.strip("\n").split("\n\n") if block.strip()]


def unit_properties(names: list[str]) -> dict[str, dict[str, str]]:
    """The properties the survey reads, of every unit in `names`: one `systemctl show` for all (one each
    took ~10 ms per unit), or one each when the answer does not have a block per name."""
    if not names:
        return {}
    blocks = parse_show_blocks(run("systemctl", "show", *names, f"--property={UNIT_PROPERTIES}"))
    if len(blocks) == len(names):
        return dict(zip(names, blocks, strict=True))
    return {
        name: (parse_show_blocks(run("systemctl", "show", name, f"--property={UNIT_PROPERTIES}")) or [{}])[0]
        for name in names
    }


def units() -> list[dict[str, Any]]:
    listing = run("systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=service", "vllm-*")
    files = run("systemctl", "list-unit-files", "--plain", "--no-legend", "--type=service", "vllm-*")
    names = sorted({line.split()[0] for line in (listing + files).splitlines() if line.split()})
    names = [n for n in names if n.endswith(".service")]
    shown = unit_properties(names)
    out = []
    for name in names:
        props = shown[name]
        fragment = props.get("FragmentPath", "")
        first_line, digest, text = "", None, ""
        if fragment:
            try:
                with open(fragment, "rb") as raw:
                    content = raw.read()
                text = content.decode("utf-8", errors="replace")
                first_line = text.split("\n", 1)[0] + "\n"
                digest = hashlib.sha256(content).hexdigest()
            except OSError:
                pass
        owner = MANAGED_BY.match(first_line)
        # Drop-ins change what starts (an adopted engine's launch runs under the managed unit's name).
        launch_text = text
        for drop_in in props.get("DropInPaths", "").split():
            try:
                with open(drop_in, encoding="utf-8", errors="replace") as handle:
                    launch_text += "\n" + handle.read()
            except OSError:
                pass
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
                # what it serves when it starts: port, GPUs, model, the ids clients send (hand-made units too)
                "launch": unit_launch(launch_text, parse_environment(props.get("Environment", ""))) if text else None,
                "restarts": int(props.get("NRestarts", "0") or 0),
                "mainPid": int(props.get("MainPID", "0") or 0),
                "adoptedInPlace": any(p.endswith("/" + ADOPTED_DROP_IN) for p in props.get("DropInPaths", "").split()),
            }
        )
    return out


def parse_active(text: str) -> dict[str, Any]:
    """A deployment's `active` record (KEY=VALUE lines written by the swap) as the survey reports it."""
    record = ActiveRecord.parse(text)
    return record.survey_entry() if record is not None else {"unit": "", "gpus": [], "backendPort": None}


def active_records(state_root: str = STATE_DIR) -> dict[str, Any]:
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
        # The hand-made units its take-over put away (host/transaction.py: put_away_hand_made).
        out[owner]["adopted"] = sorted(
            name.removesuffix(".was") for name in _listdir(f"{base}/{owner}/adopted") if name.endswith(".was")
        )
        # Its LoRA adapters (host/adapters.py): wanted, loaded by its engine, and their drift.
        adapters = adapters_survey(Path(base) / owner)
        if adapters is not None:
            out[owner]["adapters"] = adapters
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


def memory() -> dict[str, int]:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            return parse_meminfo(handle.read())
    except OSError:
        return {"totalMib": 0, "availableMib": 0}


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def claims(state_root: str = STATE_DIR) -> dict[str, Any]:
    """Every live deployment's claims on this host, by owner."""
    return {owner: json.loads(held.to_json()) for owner, held in sorted(read_claims(Path(state_root)).items())}


def survey() -> dict[str, Any]:
    # The units' systemctl calls, the two nvidia-smi queries and ss run side by side (~20-50 ms each on the
    # sandbox, mostly waiting; nvidia-smi alone can take a second on a server without its persistence
    # daemon): the survey is part of every swap's preview and of the swap itself.
    with ThreadPoolExecutor(max_workers=3) as pool:
        found_units = pool.submit(units)
        apps = pool.submit(run, "nvidia-smi", *APPS_QUERY)
        sockets = pool.submit(run, "ss", "-ltnpH")
        uuids = gpu_uuids()  # one nvidia-smi query for the holders and the count
        holders = gpu_holders(uuids, apps.result())
        listeners = parse_ss(sockets.result())
        for entry in listeners:
            entry["unit"] = unit_of(entry["pid"]) if entry["pid"] else None
            entry["cmd"] = command_line(entry["pid"]) if entry["pid"] else ""
        return {
            "units": found_units.result(),
            "listeners": listeners,
            "gpuHolders": holders,
            "gpuCount": len(uuids),
            "active": active_records(),
            "claims": claims(),
            "memory": memory(),
            "hostKeys": pinned_host_keys(),
        }


def vllm_version(python: str) -> str | None:
    """The vLLM release the host's venv has, as its package metadata says (no import of vLLM: fast), e.g.
    0.32.0+cpu or a source build's 0.11.2.dev618+g..., or None when that python has no vLLM."""
    code = (
        "import importlib.metadata as m\ntry:\n    print(m.version('vllm'))\nexcept m.PackageNotFoundError:\n    pass\n"
    )
    version = run(python, "-c", code).strip()
    return version or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="survey", description="what already runs on this host, as JSON")
    parser.add_argument("--python", help="the vLLM venv's python: report its vLLM version as well")
    args = parser.parse_args(argv)
    with ThreadPoolExecutor(max_workers=1) as pool:
        version = pool.submit(vllm_version, args.python) if args.python else None
        found = survey()
        if version is not None:
            found["vllm"] = {"python": args.python, "version": version.result()}
    json.dump(found, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
