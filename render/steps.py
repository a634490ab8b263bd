"""The script of each step, with its parameters bound: the host's tools and front door, its preflight, a
storage, a model's download, and a deployment's stage, activation and their deletes (the head's and each
other node's). A deployment's access step is render/access.py's."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from string import Template

from host.contract import BUNDLE_NAME, HOST_KEYS_DIR, Adapter, StartForecastRecord, adapters_json
from models.config import ModelSpec, ResolvedDeployment
from models.host_keys import fingerprint
from models.hosts import Host, Storage
from render import host_bundle, report
from render.launch import args_check_spec, node_args_check_spec, node_launch
from render.paths import (
    FRONT_DOOR_DIR,
    FRONT_DOOR_UNIT,
    TOOLS_DIR,
    UNIT_DIR,
    deployment_state_dir,
    node_state_dir,
)
from render.plan import node_plan, swap_plan
from render.scripts import ParamValue, Script, render_script, script_body, step_script
from render.units import RenderedUnit, render_bridge_unit, render_node_unit, render_unit


@functools.cache
def tools_script(archive_urn: str) -> str:
    """Install the host package: the archive of host/ that the tools-archive step (`archive_urn`, which its
    advice names to copy it again) copied to the host (its version is the archive's digest), unpacked with
    its bytecode, and a launcher per tool (render/host_bundle.py). A changed host tool changes this step
    and the copy."""
    version = host_bundle.version()
    params: dict[str, ParamValue] = {
        "ARCHIVE_URN": archive_urn,
        "TOOLS_DIR": TOOLS_DIR,
        "BUNDLE": BUNDLE_NAME,
        "VERSION": version,
        "INCOMING": host_bundle.incoming_path(),
        "UNPACK": host_bundle.UNPACK,
        "LAUNCHERS": [f"{tool}:{module}" for tool, module in sorted(host_bundle.TOOLS.items())],
    }
    return render_script("tools.sh", params)


def front_door_files() -> dict[str, str]:
    """The front door's nginx configuration and unit, by the path they are installed at."""
    conf = f"{FRONT_DOOR_DIR}/nginx.conf"
    nginx = Template(script_body("frontdoor-nginx.conf")).substitute(
        sites_dir=f"{FRONT_DOOR_DIR}/sites", keys_dir=f"{FRONT_DOOR_DIR}/keys"
    )
    unit = Template(script_body(FRONT_DOOR_UNIT)).substitute(conf=conf)
    return {conf: nginx, f"{UNIT_DIR}/{FRONT_DOOR_UNIT}": unit}


def front_door_script() -> Script:
    files = front_door_files()
    unit_file = f"{UNIT_DIR}/{FRONT_DOOR_UNIT}"
    params: dict[str, ParamValue] = {
        "FRONT_DOOR_DIR": FRONT_DOOR_DIR,
        "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT,
        "NGINX_CONF": files[f"{FRONT_DOOR_DIR}/nginx.conf"].rstrip("\n"),
        "UNIT_FILE": unit_file,
        "UNIT_TEXT": files[unit_file].rstrip("\n"),
    }
    return step_script("frontdoor", params)


def front_door_delete_script() -> Script:
    return step_script("frontdoor-delete", {"FRONT_DOOR_DIR": FRONT_DOOR_DIR, "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT})


def tools_delete_script() -> str:
    return render_script("tools-delete.sh", {"TOOLS_DIR": TOOLS_DIR})


def preflight_script(host: Host, stack: str) -> str:
    return render_script(
        "preflight.sh",
        {
            "HOST_NAME": host.name,
            "PYTHON": host.runtime.python,
            "EXPECTED_GPUS": host.gpus.count,
            "EXPECTED_VLLM_VERSION": host.runtime.vllm_version or "",
            "STACK": stack,
            "HOST_KEYS_DIR": HOST_KEYS_DIR,
            "PINNED_HOST_KEY": fingerprint(host.host_key) if host.host_key is not None else "none",
        },
    )


def storage_params(storage: Storage) -> dict[str, ParamValue]:
    return {
        "STORAGE_PATH": storage.path,
        "HF_HOME_DIR": storage.effective_hf_home,
        "OWNER": storage.owner,
    }


def keep_list(storage: Storage, stack: str) -> str:
    """The file that lists the model directories a stack keeps on a storage: one per stack, since stacks
    share storage paths (the dev stack and the tests' on the sandbox's /shared) and each decides alone."""
    return f"{storage.path}/.vllm-fleet-keep.{stack}"


def storage_script(storage: Storage, kept_dirs: Sequence[str], stack: str) -> Script:
    params = {**storage_params(storage), "KEEP_DIRS": sorted(kept_dirs), "KEEP_LIST": keep_list(storage, stack)}
    return step_script("storage", params)


def storage_delete_script(storage: Storage, stack: str) -> Script:
    params = storage_params(storage)
    return step_script(
        "storage-delete",
        {**{k: params[k] for k in ("STORAGE_PATH", "HF_HOME_DIR")}, "KEEP_LIST": keep_list(storage, stack)},
    )


def download_params(
    model_name: str, model: ModelSpec, storage: Storage, host: Host, endpoint: str | None
) -> dict[str, ParamValue]:
    return {
        "MODEL": model_name,
        "REPO": model.repo,
        "REVISION": model.revision,
        "MODEL_DIR": f"{storage.path}/{model.dir}",
        "STORAGE_PATH": storage.path,
        "HF_HOME_DIR": storage.effective_hf_home,
        "ENDPOINT": endpoint or "",
        "PYTHON": host.runtime.python,
        "TOOLS_DIR": TOOLS_DIR,
        "MARGIN_GB": storage.free_margin_gb,
    }


def download_script(
    model_name: str, model: ModelSpec, storage: Storage, host: Host, endpoint: str | None, stack: str, repairs: int = 0
) -> Script:
    """The download step: REPAIRS is its drift-repair count (controller/drift.download_repairs)."""
    params = download_params(model_name, model, storage, host, endpoint)
    return step_script(
        "download",
        {**{k: v for k, v in params.items() if k != "STORAGE_PATH"}, "STACK": stack, "REPAIRS": str(repairs)},
    )


def download_delete_script(model_name: str, model: ModelSpec, storage: Storage, host: Host, stack: str) -> Script:
    params = download_params(model_name, model, storage, host, None)
    return step_script(
        "download-delete",
        {**{k: params[k] for k in ("MODEL", "MODEL_DIR", "STORAGE_PATH")}, "KEEP_LIST": keep_list(storage, stack)},
    )


def stage_script(rd: ResolvedDeployment, stack: str) -> Script:
    """The deployment's unit staged, and its bridge where its GPUs hold a second engine (blue/green)."""
    bridge = render_bridge_unit(rd, stack) if rd.blue_green_possible else None
    return _stage(
        rd.deployment.name, render_unit(rd, stack), rd.host.runtime.python, args_check_spec(rd), bridge=bridge
    )


def node_stage_script(rd: ResolvedDeployment, stack: str, rank: int) -> Script:
    """Stage node `rank`'s headless unit and its launch of this model like the head's unit, checked by that
    node's own vLLM, and judge the node's GPUs there (host/tools/node.py check)."""
    unit = render_node_unit(rd, stack, rank)
    python = rd.node_hosts[rank].runtime.python
    return _stage(
        f"{rd.deployment.name}.node{rank}",
        unit,
        python,
        node_args_check_spec(rd, rank),
        node_launch(rd, rank).to_json().rstrip("\n"),
        node_plan(rd, stack, rank).to_json().rstrip("\n"),
    )


def _stage(
    deployment: str,
    unit: RenderedUnit,
    python: str,
    spec: str,
    node_launch_json: str = "",
    node_plan_json: str = "",
    bridge: RenderedUnit | None = None,
) -> Script:
    return step_script(
        "stage",
        {
            "DEPLOYMENT": deployment,
            "STATE_DIR": unit.state_dir,
            "UNIT_NAME": unit.name,
            "UNIT_STEM": unit.name.removesuffix(".service"),
            "UNIT_TEXT": unit.text,
            "BRIDGE_NAME": bridge.name if bridge is not None else "",
            "BRIDGE_TEXT": bridge.text if bridge is not None else "",
            "PYTHON": python,
            "TOOLS_DIR": TOOLS_DIR,
            "ARGS_CHECK_SPEC": spec,
            "NODE_LAUNCH": node_launch_json,
            "NODE_PLAN": node_plan_json,
        },
    )


def node_activate_script(rd: ResolvedDeployment, stack: str, rank: int) -> Script:
    unit = render_node_unit(rd, stack, rank)
    staged = unit.text + node_launch(rd, rank).to_json() + node_plan(rd, stack, rank).to_json()
    return step_script(
        "node-activate",
        {
            "STATE_DIR": unit.state_dir,
            "PYTHON": rd.node_hosts[rank].runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
            "STAGED_SHA256": hashlib.sha256(staged.encode()).hexdigest(),
        },
    )


def node_deactivate_script(rd: ResolvedDeployment, stack: str, rank: int) -> Script:
    return step_script(
        "deactivate",
        {
            "STACK": stack,
            "DEPLOYMENT": f"{rd.deployment.name}.node{rank}",
            "STATE_DIR": node_state_dir(stack, rd, rank),
            "UNIT_NAME": rd.worker_unit_name(rank),
            "TOOLS_DIR": TOOLS_DIR,
            "FRONT_DOOR_DIR": FRONT_DOOR_DIR,
            "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT,
            "STAGING_PATH": "",
        },
    )


def stage_delete_script(rd: ResolvedDeployment, stack: str) -> Script:
    return step_script(
        "stage-delete",
        {"DEPLOYMENT": rd.deployment.name, "STATE_DIR": deployment_state_dir(stack, rd.deployment.name)},
    )


def node_stage_delete_script(rd: ResolvedDeployment, stack: str, rank: int) -> Script:
    return step_script(
        "stage-delete",
        {"DEPLOYMENT": f"{rd.deployment.name}.node{rank}", "STATE_DIR": node_state_dir(stack, rd, rank)},
    )


def activate_script(
    rd: ResolvedDeployment, stack: str, repairs: int = 0, forecast: StartForecastRecord | None = None
) -> Script:
    plan = swap_plan(rd, stack, forecast)
    return step_script(
        "activate",
        {
            "STATE_DIR": plan.state_dir,
            "PYTHON": rd.host.runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
            "UNIT_SHA256": plan.unit_sha256,
            "REPAIRS": str(repairs),
            "PLAN": json.dumps(asdict(plan), sort_keys=True, indent=1),
            "REPORT_ARGS": report.swap_arguments(report.spec(rd, stack)),
        },
    )


def deactivate_script(rd: ResolvedDeployment, stack: str) -> Script:
    return step_script(
        "deactivate",
        {
            "STACK": stack,
            "DEPLOYMENT": rd.deployment.name,
            "STATE_DIR": deployment_state_dir(stack, rd.deployment.name),
            "UNIT_NAME": rd.unit_name,
            "TOOLS_DIR": TOOLS_DIR,
            "FRONT_DOOR_DIR": FRONT_DOOR_DIR,
            "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT,
            "STAGING_PATH": rd.host.staging_path or "",
        },
    )


def adapters_script(rd: ResolvedDeployment, stack: str, repairs: int = 0) -> Script:
    """The deployment's adapters step (host/adapters.py apply): each adapter with its files' path and the
    model directories it fits (and their repos, which its adapter_config.json must name)."""
    entries = [
        Adapter(
            name=a.name,
            path=a.path,
            repo=a.spec.repo,
            revision=a.spec.revision,
            bases=a.base_dirs,
            base_repos=a.base_repos,
            config_key=f"vllm-fleet:adapters.{a.name}",
        )
        for a in rd.adapters
    ]
    lora = rd.serving.lora
    return step_script(
        "adapters",
        {
            "STATE_DIR": deployment_state_dir(stack, rd.deployment.name),
            "PYTHON": rd.host.runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
            "MAX_RANK": str(lora.max_lora_rank if lora is not None else 0),
            "REPAIRS": str(repairs),
            "ADAPTERS": adapters_json(entries),
        },
    )


def adapters_delete_script(rd: ResolvedDeployment, stack: str) -> Script:
    return step_script(
        "adapters-delete",
        {
            "STATE_DIR": deployment_state_dir(stack, rd.deployment.name),
            "PYTHON": rd.host.runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
        },
    )
