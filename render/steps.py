"""The script of each step, with its parameters bound: the host's tools and front door, its preflight, a
storage, a model's download, and a deployment's stage, activation and their deletes (the head's and each
other node's). A deployment's access step is render/access.py's."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from string import Template

from models.config import Host, ModelSpec, ResolvedDeployment, Storage
from render.launch import args_check_spec, node_args_check_spec
from render.paths import (
    FRONT_DOOR_DIR,
    FRONT_DOOR_UNIT,
    HOST_TOOLS,
    TOOLS_DIR,
    UNIT_DIR,
    deployment_state_dir,
    node_state_dir,
)
from render.plan import swap_plan
from render.scripts import ParamValue, heredoc_file, render_script, script_body
from render.units import RenderedUnit, render_node_unit, render_unit


@functools.cache
def tools_script() -> str:
    """The tools' directory; the tools themselves install in groups (tool_group_script)."""
    return render_script("tools.sh", {"TOOLS_DIR": TOOLS_DIR})


# The tools install in two steps: one script with all of them would pass the 128 KiB one argument may
# have (the remote shell runs a command as a single `-c` argument), and a step per tool costs a no-op
# `pulumi up` a resource each. The swap's own programs form one group, the unit's the other.
TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "engine": ("clean-shm", "gpu-release-guard", "model-sync", "survey", "vllm-args-check", "wait-ready"),
    "swap": ("node-watch", "prewarm", "swap"),
}


@functools.cache
def tool_group_script(group: str) -> str:
    """Install a group of host tools. Their sources are part of the script, so a change shows in the
    preview's diff as an update of that group's step. Rendered once per run: every host gets the same
    script (about 70 KB a group), which a fleet's preview otherwise renders again for each host."""
    tools = TOOL_GROUPS[group]
    script = f"#!/usr/bin/env bash\n# vllm-fleet tools ({group}): {', '.join(tools)}, installed in {TOOLS_DIR}\nset -euo pipefail\n"
    for tool in tools:
        script += heredoc_file(f"{TOOLS_DIR}/{tool}", HOST_TOOLS[tool].read_text(encoding="utf-8"), "0755")
    return script + f'echo "installed {len(tools)} vllm-fleet tools in {TOOLS_DIR}: {" ".join(tools)}"\n'


def front_door_files() -> dict[str, str]:
    """The front door's nginx configuration and unit, by the path they are installed at."""
    conf = f"{FRONT_DOOR_DIR}/nginx.conf"
    nginx = Template(script_body("frontdoor-nginx.conf")).substitute(
        sites_dir=f"{FRONT_DOOR_DIR}/sites", keys_dir=f"{FRONT_DOOR_DIR}/keys"
    )
    unit = Template(script_body(FRONT_DOOR_UNIT)).substitute(conf=conf)
    return {conf: nginx, f"{UNIT_DIR}/{FRONT_DOOR_UNIT}": unit}


def front_door_script() -> str:
    params: dict[str, ParamValue] = {"FRONT_DOOR_DIR": FRONT_DOOR_DIR, "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT}
    script = render_script("frontdoor.sh", params)
    for path, content in front_door_files().items():
        script += heredoc_file(path, content, "0644")
    return script + script_body("frontdoor-finish.sh").split("\n", 2)[2]


def front_door_delete_script() -> str:
    return render_script("frontdoor-delete.sh", {"FRONT_DOOR_DIR": FRONT_DOOR_DIR, "FRONT_DOOR_UNIT": FRONT_DOOR_UNIT})


def tools_delete_script() -> str:
    return render_script("tools-delete.sh", {"TOOLS_DIR": TOOLS_DIR})


def preflight_script(host: Host) -> str:
    return render_script(
        "preflight.sh",
        {
            "HOST_NAME": host.name,
            "PYTHON": host.runtime.python,
            "EXPECTED_GPUS": host.gpus.count,
            "EXPECTED_VLLM_VERSION": host.runtime.vllm_version or "",
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


def storage_script(storage: Storage, kept_dirs: Sequence[str], stack: str) -> str:
    params = {**storage_params(storage), "KEEP_DIRS": sorted(kept_dirs), "KEEP_LIST": keep_list(storage, stack)}
    return render_script("storage.sh", params)


def storage_delete_script(storage: Storage, stack: str) -> str:
    params = storage_params(storage)
    return render_script(
        "storage-delete.sh",
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


def download_script(model_name: str, model: ModelSpec, storage: Storage, host: Host, endpoint: str | None) -> str:
    params = download_params(model_name, model, storage, host, endpoint)
    return render_script("download.sh", {k: v for k, v in params.items() if k != "STORAGE_PATH"})


def download_delete_script(model_name: str, model: ModelSpec, storage: Storage, host: Host, stack: str) -> str:
    params = download_params(model_name, model, storage, host, None)
    return render_script(
        "download-delete.sh",
        {**{k: params[k] for k in ("MODEL", "MODEL_DIR", "STORAGE_PATH")}, "KEEP_LIST": keep_list(storage, stack)},
    )


def stage_script(rd: ResolvedDeployment, stack: str) -> str:
    return _stage(rd.deployment.name, render_unit(rd, stack), rd.host.runtime.python, args_check_spec(rd))


def node_stage_script(rd: ResolvedDeployment, stack: str, rank: int) -> str:
    """Stage node `rank`'s headless unit like the head's, checked by that node's own vLLM."""
    unit = render_node_unit(rd, stack, rank)
    python = rd.node_hosts[rank].runtime.python
    return _stage(f"{rd.deployment.name}.node{rank}", unit, python, node_args_check_spec(rd, rank))


def _stage(deployment: str, unit: RenderedUnit, python: str, spec: str) -> str:
    return render_script(
        "stage.sh",
        {
            "DEPLOYMENT": deployment,
            "STATE_DIR": unit.state_dir,
            "UNIT_NAME": unit.name,
            "UNIT_STEM": unit.name.removesuffix(".service"),
            "UNIT_TEXT": unit.text,
            "PYTHON": python,
            "TOOLS_DIR": TOOLS_DIR,
            "ARGS_CHECK_SPEC": spec,
        },
    )


def node_activate_script(rd: ResolvedDeployment, stack: str, rank: int) -> str:
    unit = render_node_unit(rd, stack, rank)
    return render_script(
        "node-activate.sh",
        {
            "STACK": stack,
            "DEPLOYMENT": f"{rd.deployment.name}.node{rank}",
            "STATE_DIR": unit.state_dir,
            "UNIT_NAME": unit.name,
            "UNIT_STEM": unit.name.removesuffix(".service"),
            "GPUS": " ".join(str(g) for g in rd.deployment.gpus),
            "GPUS_JSON": json.dumps(list(rd.deployment.gpus)),
            "UNIT_SHA256": hashlib.sha256(unit.text.encode()).hexdigest(),
        },
    )


def node_deactivate_script(rd: ResolvedDeployment, stack: str, rank: int) -> str:
    return render_script(
        "deactivate.sh",
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


def stage_delete_script(rd: ResolvedDeployment, stack: str) -> str:
    return render_script(
        "stage-delete.sh",
        {"DEPLOYMENT": rd.deployment.name, "STATE_DIR": deployment_state_dir(stack, rd.deployment.name)},
    )


def node_stage_delete_script(rd: ResolvedDeployment, stack: str, rank: int) -> str:
    return render_script(
        "stage-delete.sh",
        {"DEPLOYMENT": f"{rd.deployment.name}.node{rank}", "STATE_DIR": node_state_dir(stack, rd, rank)},
    )


def activate_script(rd: ResolvedDeployment, stack: str, repairs: int = 0) -> str:
    plan = swap_plan(rd, stack)
    return render_script(
        "activate.sh",
        {
            "STATE_DIR": str(plan["state_dir"]),
            "PYTHON": rd.host.runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
            "UNIT_SHA256": str(plan["unit_sha256"]),
            "REPAIRS": str(repairs),
            "PLAN": json.dumps(plan, sort_keys=True, indent=1),
        },
    )


def deactivate_script(rd: ResolvedDeployment, stack: str) -> str:
    return render_script(
        "deactivate.sh",
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
