"""The survey of a host: what already runs on it, read-only (the `survey` tool, host/tools/survey.py, prints
it as one JSON document on stdout).

The controller runs it over SSH in every program run (`pulumi preview` too), before the tools are
installed, by piping the host package into the host's python (render/host_bundle.py); the swap
transaction and a node's check run it again right before they stop anything; `make status` reports it.
Its shape is host/contract.Survey, which both sides parse it into:
  units       every vllm-*.service: active and sub state, enabled, whether vllm-fleet manages it (its first
              line), the sha256 of its unit file and, for a managed unit, of the unit its deployment staged
              (a hand edit shows as drift) and whether its secret environment file is still the staged
              one, its launch as vLLM reads it (port, GPUs, model, served names), its restarts and main PID
  listeners   TCP listening ports with the PID and systemd unit that holds them (`ss -ltnpH`)
  gpuCount    how many GPUs nvidia-smi lists
  gpuHolders  processes nvidia-smi lists per GPU (`--query-compute-apps=pid,gpu_uuid,...` mapped to indices
              with `--query-gpu=index,uuid`), with their command line and their unit's state and owner
  active      per deployment (stack.deployment), what its last swap left serving: unit, GPUs, engine port,
              and how many drift repairs its activations have made (the `repairs` file)
  claims      per live deployment, the GPUs, ports and unit names its last swap claimed
  memory      MemTotal and MemAvailable of /proc/meminfo, in MiB
  models      with --model-dir: each directory against its verified manifest (sizes and mtimes, no byte
              read) and the drift repairs each stack's download step made there
  vllm        with --python: the vLLM version that venv has (what the host runs, pinned or not) and its
              loaders' extras (runai_model_streamer, instanttensor: their versions, null when absent)
  hostKeys    per stack, the fingerprint of the SSH host key its steps pinned at their last preflight
  starts      each model's last start on this host, whichever deployment started it: what it loaded and
              how, and where the start's time went (host/start_records.py)
  mounts      the mount table without pseudo-filesystems: where each filesystem is and its type (the
              filesystem of a model's directory decides how vLLM reads it)
  readings    with --question (one per deployment): how the engine that serves it now was launched (its
              process's command line and environment) against the stack's launch, compared word for word
              and, where the words differ, as the host's vLLM reads both (host/engine_launch.py)
  at          when the host read all this (Unix seconds)
A process's unit is the last *.service of its cgroup path; a login session's scope or no cgroup means
it belongs to no unit (host/facts.py reads all of these). Standard library only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from host.adapters import adapter_state
from host.contract import (
    ADOPTED_DROP_IN,
    ETC_DIR,
    STATE_DIR,
    ActiveRecord,
    DeploymentState,
    GpuHolder,
    LaunchQuestion,
    Memory,
    Mount,
    Plan,
    StartForecastRecord,
    Survey,
    Unit,
    is_managed,
    managed_owner,
    pinned_host_keys,
    read_claims,
)
from host.engine_launch import reading, text_of
from host.facts import (
    APPS_QUERY,
    GPU_UUID_QUERY,
    command_line,
    parse_compute_apps,
    parse_environment,
    parse_gpu_uuids,
    parse_meminfo,
    parse_mounts,
    parse_ss,
    read_process_units,
    unit_launch,
    unit_of,
)
from host.model_files import model_state
from host.processes import stdout_of
from host.start_records import read_records
from host.systemd import parse_show


def gpu_uuids() -> dict[str, int]:
    """nvidia-smi's GPUs, UUID -> index (their count is what a launch without CUDA_VISIBLE_DEVICES uses)."""
    return parse_gpu_uuids(stdout_of("nvidia-smi", *GPU_UUID_QUERY))


def gpu_holders(
    uuids: dict[str, int] | None = None, apps: str | None = None, known: dict[str, Unit] | None = None
) -> list[GpuHolder]:
    """What nvidia-smi lists per GPU (by UUID, mapped to indices), each with its command line and unit, the
    unit's state and owner read from `known` (the survey's vllm units) or from systemd. `apps`: the output
    of its compute-apps query, when it already ran."""
    uuids = gpu_uuids() if uuids is None else uuids
    apps = stdout_of("nvidia-smi", *APPS_QUERY) if apps is None else apps
    found = [(app, unit_of(app.pid)) for app in parse_compute_apps(apps, uuids)]
    known = known or {}
    others = read_process_units(sorted({name for _, name in found if name is not None and name not in known}))
    facts = {**others, **{name: unit.process_unit for name, unit in known.items()}}
    return [
        GpuHolder(
            pid=app.pid,
            gpus=tuple(sorted(app.gpus or ())),
            used_mib=app.used_mib,
            name=app.name,
            cmd=command_line(app.pid),
            unit=facts[name] if name is not None else None,
        )
        for app, name in found
    ]


UNIT_PROPERTIES = "ActiveState,SubState,UnitFileState,FragmentPath,DropInPaths,Environment,NRestarts,MainPID"


def parse_show_blocks(text: str) -> list[dict[str, str]]:
    """`systemctl show` of several units: one block of KEY=VALUE lines per unit, in the order asked."""
    return [parse_show(block) for block in text.strip("\n").split("\n\n") if block.strip()]


def unit_properties(names: list[str]) -> dict[str, dict[str, str]]:
    """The properties the survey reads, of every unit in `names`: one `systemctl show` for all (one each
    took ~10 ms per unit), or one each when the answer does not have a block per name."""
    if not names:
        return {}
    blocks = parse_show_blocks(stdout_of("systemctl", "show", *names, f"--property={UNIT_PROPERTIES}"))
    if len(blocks) == len(names):
        return dict(zip(names, blocks, strict=True))
    return {
        name: (parse_show_blocks(stdout_of("systemctl", "show", name, f"--property={UNIT_PROPERTIES}")) or [{}])[0]
        for name in names
    }


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def staged(
    owner: str | None, name: str, state_root: str = STATE_DIR, etc_dir: str = ETC_DIR
) -> tuple[str | None, bool | None]:
    """(the sha256 of a managed unit as its deployment staged it, whether its secret environment file is
    still the staged one); None where nothing is staged for it. Compared here, so no secret leaves the host."""
    if owner is None:
        return None, None
    stem = name.removesuffix(".service")
    unit = _read(f"{state_root}/deployments/{owner}/staged/{name}")
    env = _read(f"{state_root}/deployments/{owner}/staged/{stem}.env")
    return (
        hashlib.sha256(unit).hexdigest() if unit is not None else None,
        None if env is None else _read(f"{etc_dir}/{stem}.env") == env,
    )


def units() -> list[Unit]:
    return read_units()[0]


def read_units() -> tuple[list[Unit], dict[str, str]]:
    """The vllm-* units, and each one's file with its drop-ins appended (what systemd starts)."""
    listing = stdout_of("systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=service", "vllm-*")
    files = stdout_of("systemctl", "list-unit-files", "--plain", "--no-legend", "--type=service", "vllm-*")
    names = sorted({line.split()[0] for line in (listing + files).splitlines() if line.split()})
    names = [n for n in names if n.endswith(".service")]
    shown = unit_properties(names)
    out = []
    texts: dict[str, str] = {}
    for name in names:
        props = shown[name]
        fragment = props.get("FragmentPath", "")
        content = _read(fragment) if fragment else None
        text = content.decode("utf-8", errors="replace") if content is not None else ""
        digest = hashlib.sha256(content).hexdigest() if content is not None else None
        owner = managed_owner(text)
        # Drop-ins change what starts (an adopted engine's launch runs under the managed unit's name).
        drop_ins = props.get("DropInPaths", "").split()
        staged_sha256, env_matches = staged(owner, name) if is_managed(text) else (None, None)
        launch_text = text + "".join("\n" + (_read(path) or b"").decode("utf-8", errors="replace") for path in drop_ins)
        texts[name] = launch_text
        out.append(
            Unit(
                name=name,
                active_state=props.get("ActiveState", "inactive"),
                sub_state=props.get("SubState", ""),
                enabled=props.get("UnitFileState") == "enabled",
                managed=is_managed(text),
                owner=owner,
                fragment=fragment,
                sha256=digest,
                launch=unit_launch(launch_text, parse_environment(props.get("Environment", ""))) if text else None,
                restarts=int(props.get("NRestarts", "0") or 0),
                main_pid=int(props.get("MainPID", "0") or 0),
                adopted_in_place=any(p.endswith("/" + ADOPTED_DROP_IN) for p in drop_ins),
                staged_sha256=staged_sha256,
                env_matches_staged=env_matches,
            )
        )
    return out, texts


def _number(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as handle:
            return int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def deployment_states(state_root: str = STATE_DIR) -> dict[str, DeploymentState]:
    out = {}
    base = f"{state_root}/deployments"
    try:
        owners = sorted(os.listdir(base))
    except OSError:
        return {}
    for owner in owners:
        text = _read(f"{base}/{owner}/active")
        if text is None:
            continue
        try:
            with open(f"{base}/{owner}/swap-plan.json", encoding="utf-8") as handle:
                planned = Plan.from_dict(json.load(handle))
            forecast = StartForecastRecord.of_plan(planned)
        except (OSError, ValueError, TypeError, AttributeError):
            forecast = None
        out[owner] = DeploymentState(
            record=ActiveRecord.parse(text.decode("utf-8", errors="replace")),
            # The hand-made units its take-over put away (host/transaction.py: put_away_hand_made).
            put_away=tuple(
                sorted(n.removesuffix(".was") for n in _listdir(f"{base}/{owner}/adopted") if n.endswith(".was"))
            ),
            # Its LoRA adapters (host/adapters.py): wanted, loaded by its engine, and their drift.
            adapters=adapter_state(Path(base) / owner),
            repairs=_number(f"{base}/{owner}/repairs"),
            # The forecast its last activation carried, which the next preview renders again while no start comes.
            forecast=forecast,
        )
    return out


def memory() -> Memory:
    """/proc/meminfo's totals (0 where it cannot be read)."""
    return parse_meminfo(text_of("/proc/meminfo") or "")


def mounts() -> list[Mount]:
    """The mount table (none where it cannot be read)."""
    return parse_mounts(text_of("/proc/self/mounts") or "")


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def survey(model_dirs: list[str] | tuple[str, ...] = (), questions: Sequence[LaunchQuestion] = ()) -> Survey:
    # The units' systemctl calls, the two nvidia-smi queries and ss run side by side (~20-50 ms each on the
    # sandbox, mostly waiting; nvidia-smi alone can take a second on a server without its persistence
    # daemon): the survey is part of every program run and of the swap itself.
    with ThreadPoolExecutor(max_workers=3) as pool:
        found_units = pool.submit(read_units)
        apps = pool.submit(stdout_of, "nvidia-smi", *APPS_QUERY)
        sockets = pool.submit(stdout_of, "ss", "-ltnpH")
        uuids = gpu_uuids()  # one nvidia-smi query for the holders and the count
        vllm_units, unit_texts = found_units.result()
        holders = gpu_holders(uuids, apps.result(), {u.name: u for u in vllm_units})
        listeners = [
            dataclasses.replace(entry, unit=unit_of(entry.pid), cmd=command_line(entry.pid)) if entry.pid else entry
            for entry in parse_ss(sockets.result())
        ]
        states = deployment_states()
        readings = {}
        for question in questions:
            # The engine of each deployment asked about, as its process was launched (host/engine_launch.py).
            answer = reading(question, vllm_units, unit_texts, states.get(question.owner) or DeploymentState())
            if answer is not None:
                readings[question.owner] = answer
        return Survey(
            units=tuple(vllm_units),
            listeners=tuple(listeners),
            gpu_holders=tuple(holders),
            gpu_count=len(uuids),
            deployments=states,
            claims=dict(sorted(read_claims(Path(STATE_DIR)).items())),
            memory=memory(),
            models={directory: model_state(Path(directory), Path(STATE_DIR)) for directory in model_dirs},
            host_keys=pinned_host_keys(),
            starts=tuple(read_records()),
            mounts=tuple(mounts()),
            at=time.time(),
            readings=readings,
        )


# The loaders' extras vLLM reads weights with besides its own (--load-format runai_streamer, instanttensor).
LOADER_EXTRAS = ("runai_model_streamer", "instanttensor")


def vllm_facts(python: str) -> tuple[str | None, dict[str, str | None] | None]:
    """The vLLM release the host's venv has, as its package metadata says (no import of vLLM: fast), e.g.
    0.32.0+cpu or a source build's 0.11.2.dev618+g... (None when that python has no vLLM), and the
    versions of its loaders' extras (each None: not installed; all None: that python did not answer)."""
    code = (
        "import importlib.metadata as m, json\n"
        "def v(name):\n    try:\n        return m.version(name)\n    except m.PackageNotFoundError:\n        return None\n"
        f"print(json.dumps({{name: v(name) for name in ('vllm', *{LOADER_EXTRAS!r})}}))\n"
    )
    try:
        found = json.loads(stdout_of(python, "-c", code) or "{}")
    except ValueError:
        found = {}
    return found.get("vllm"), ({name: found.get(name) for name in LOADER_EXTRAS} if found else None)
