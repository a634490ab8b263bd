"""What already runs on a host, read while the program is evaluated, so `pulumi preview` names it.

A brownfield server has hand-written units, stray engines and listeners the stack knows nothing of.
`survey` runs host/survey.py there over SSH (read-only, piped into the host's python3, so it needs no
tool installed yet); `assess` turns its answer into what the preview says: units the stack adopts
(`deployments[].replaces`) and foreign GPU processes the guard will stop (notes), and anything that
holds a deployment's port or GPUs without being managed, adopted or allowed (errors that name it and the
key to add). pulumi-command's Command does nothing in a preview, hence plain OpenSSH here, as in
`probe_ssh`. The swap transaction and the GPU guard check again on the host right before they act.

A survey is cached per stack and host under .cache/, keyed on that host's config and the survey's
source, for an hour: a no-op `pulumi up` opens no SSH session, and a config change surveys afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.render import HOST_PROGRAMS
from models.config import ForeignGpuProcesses, Host, ResolvedDeployment

SURVEY_SOURCE = HOST_PROGRAMS / "survey.py"
CACHE_SECONDS = 3600


class SurveyFailed(Exception):
    pass


def cache_key(host: Host, deployments: Sequence[ResolvedDeployment]) -> str:
    material = json.dumps(
        {
            "host": host.model_dump(mode="json"),
            "deployments": [rd.deployment.model_dump(mode="json") for rd in deployments],
            "survey": hashlib.sha256(SURVEY_SOURCE.read_bytes()).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def ssh_survey(host: Host, private_key: str, timeout: float = 60) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-survey-") as private:
        key_file = Path(private) / "key"
        key_file.touch(mode=0o600)
        key_file.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        known_hosts = Path(private) / "known_hosts"
        address = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        known_hosts.write_text(f"{address} {host.host_key}\n" if host.host_key else "")
        command = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={host.dial_timeout_seconds}",
            "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=" + ("yes" if host.host_key else "no"),
            "-i", str(key_file), "-p", str(host.port), f"{host.user}@{host.address}", "python3 -",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command, input=SURVEY_SOURCE.read_text(), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SurveyFailed(f"host {host.name!r}: the survey of what runs there took over {timeout:g} s") from None
    if result.returncode != 0:
        raise SurveyFailed(
            f"host {host.name!r}: the survey of what runs there failed (exit {result.returncode}): {result.stderr.strip()[-400:]}"
        )
    survey: dict[str, Any] = json.loads(result.stdout)
    return survey


def survey(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], private_key: str, cache_dir: Path
) -> dict[str, Any]:
    key = cache_key(host, deployments)
    path = cache_dir / f"{stack}.{host.name}.json"
    try:
        cached = json.loads(path.read_text())
        if cached["key"] == key and time.time() - cached["at"] < CACHE_SECONDS:
            return dict(cached["survey"])
    except (OSError, ValueError, KeyError):
        pass
    found = ssh_survey(host, private_key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"key": key, "at": time.time(), "survey": found}))
    temporary.replace(path)
    return found


def _holder(entry: dict[str, Any]) -> str:
    unit = entry.get("unit") or "no systemd unit"
    return f"PID {entry['pid']} ({entry.get('cmd') or entry.get('name') or '?'}) of {unit}"


def _is_ours(unit_name: str | None, rd: ResolvedDeployment, owner: str, units: dict[str, Any]) -> bool:
    """The deployment's own unit, one it adopts, or an earlier unit vllm-fleet made for it."""
    if unit_name is None:
        return False
    unit = units.get(unit_name)
    return (
        unit_name == rd.unit_name
        or unit_name in rd.deployment.replaces
        or (unit is not None and unit.get("owner") == owner)
    )


def assess(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], found: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(errors, notes) for the deployments on `host`, from what `found` says runs there."""
    errors: list[str] = []
    notes: list[str] = []
    units = {u["name"]: u for u in found.get("units", [])}
    for rd in deployments:
        dep = rd.deployment
        where = f"host {host.name!r}, deployment {dep.name!r}"
        key = f"vllm-fleet:deployments[{dep.name}]"
        owner = f"{stack}.{dep.name}"
        for name in dep.replaces:
            unit = units.get(name)
            if unit is None:
                notes.append(f"{where}: {name} ({key}.replaces) is not on the host; nothing to adopt")
            else:
                state = f"{unit['activeState']}, {'enabled' if unit['enabled'] else 'disabled'}"
                notes.append(
                    f"{where}: adopts {name} ({state}): stopped and disabled in the swap, its unit file backed up"
                )
        same = units.get(rd.unit_name)
        if same is not None and not same["managed"]:
            notes.append(
                f"{where}: the hand-made {rd.unit_name} ({same['activeState']}) is replaced by the managed unit of that name"
            )

        for listener in found.get("listeners", []):
            if listener["port"] != dep.port or _is_ours(listener.get("unit"), rd, owner, units):
                continue
            unit = listener.get("unit")
            fix = f"add {unit} to {key}.replaces to take it over, or stop it" if unit else "stop it"
            errors.append(
                f"{where}: port {dep.port} is held by {_holder(listener)}, which this stack does not manage; {fix}"
            )
        for holder in found.get("gpuHolders", []):
            shared = sorted(set(holder.get("gpus", [])) & set(dep.gpus))
            if not shared or _is_ours(holder.get("unit"), rd, owner, units):
                continue
            unit_name = holder.get("unit")
            unit = units.get(unit_name or "")
            gpus = ",".join(map(str, shared))
            if unit is not None and unit["managed"]:
                errors.append(
                    f"{where}: GPU {gpus} is held by {_holder(holder)}, a unit of deployment {unit.get('owner')}; "
                    f"give {key}.gpus other GPUs or destroy that deployment first"
                )
            elif unit_name is not None and unit_name.endswith(".service"):
                errors.append(
                    f"{where}: GPU {gpus} is held by {_holder(holder)}, which this stack does not manage; "
                    f"add {unit_name} to {key}.replaces to take it over, or stop it"
                )
            elif dep.foreign_gpu_processes is ForeignGpuProcesses.STOP:
                notes.append(
                    f"{where}: GPU {gpus} is held by {_holder(holder)}; the GPU-release guard will stop it ({key}.foreignGpuProcesses: stop)"
                )
            else:
                errors.append(
                    f"{where}: GPU {gpus} is held by {_holder(holder)}, which belongs to no unit vllm-fleet manages; "
                    f"stop it, or set {key}.foreignGpuProcesses: stop to let the GPU-release guard stop it"
                )
    return errors, notes
