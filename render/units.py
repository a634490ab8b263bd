"""The systemd units of a deployment's engines (the head's and each other node's) and their environment
files, from the templates in render/templates."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from string import Template

from host.contract import ADAPTERS_FILE
from host.unit_file import bridge_stem
from models.config import ResolvedDeployment
from render.launch import ENGINE_PORT_VARIABLE, engine_environment, node_watch_command, vllm_arguments
from render.paths import ETC_DIR, TEMPLATES, TOOLS_DIR, deployment_state_dir, node_state_dir

_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_./:=,+@-]+$")


def systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument so systemd passes it to execve unchanged.

    systemd splits on whitespace, honours double quotes with C escapes, and expands `%` specifiers and
    `$VAR`; the config types already refuse `$`, `%` and control characters, this escapes the rest.
    """
    if _SYSTEMD_SAFE.match(arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def environment_lines(env: Mapping[str, str]) -> str:
    return "\n".join(f"Environment={systemd_quote(f'{key}={value}')}" for key, value in sorted(env.items()))


@dataclass(frozen=True)
class RenderedUnit:
    name: str
    text: str
    state_dir: str


def render_unit(rd: ResolvedDeployment, stack: str, stem: str | None = None) -> RenderedUnit:
    """The deployment's engine unit; under the name `stem` instead of its own for the bridge of a restart
    (render_bridge_unit): the same launch, its own placement and environment file."""
    stem = stem or rd.unit_stem
    unit = f"{stem}.service"
    python = rd.host.runtime.python
    state_dir = deployment_state_dir(stack, rd.deployment.name)
    env_file = f"{ETC_DIR}/{stem}.env"
    release_timeout = rd.deployment.gpu_release_timeout_seconds
    start_timeout = rd.start_timeout_seconds
    start_timeout_total = start_timeout + release_timeout + 60
    template = Template((TEMPLATES / "vllm.service.tmpl").read_text(encoding="utf-8"))
    text = template.substitute(
        stack=stack,
        deployment=rd.deployment.name,
        model=rd.model_name,
        served_name=rd.served_model_name,
        start_limit_interval=4 * start_timeout_total,
        user=rd.host.user,
        state_dir=state_dir,
        environment_lines=environment_lines(engine_environment(rd)),
        env_file=env_file,
        python=python,
        tools_dir=TOOLS_DIR,
        placement_file=placement_file(stem),
        release_threshold=rd.deployment.gpu_release_threshold_mib,
        release_timeout=release_timeout,
        foreign=rd.deployment.foreign_gpu_processes.value,
        adopt="".join(f" --adopt {systemd_quote(unit)}" for unit in rd.deployment.replaces),
        unit=unit,
        unit_stem=stem,
        exec_start=" ".join(
            a if a == ENGINE_PORT_VARIABLE else systemd_quote(a) for a in [python, *vllm_arguments(rd)]
        ),
        model_path=rd.load_path,
        adapters=(
            f" --adapters {adapters_file(state_dir)} --model-path {rd.load_path}" if rd.serving.lora is not None else ""
        ),
        start_timeout=start_timeout,
        start_timeout_total=start_timeout_total,
    )
    return RenderedUnit(name=unit, text=text, state_dir=state_dir)


def render_bridge_unit(rd: ResolvedDeployment, stack: str) -> RenderedUnit:
    """The unit that serves the deployment's new launch on its spare GPUs while its own unit restarts with
    it (host/bridge.py): a managed unit of the same deployment, named after it."""
    return render_unit(rd, stack, bridge_stem(rd.unit_stem))


def render_node_unit(rd: ResolvedDeployment, stack: str, rank: int) -> RenderedUnit:
    """The unit of node `rank` > 0's headless engine. It names no model: node-watch runs the launch of the
    model the head runs (render.launch.node_launch, one file per model), so a model swap changes a launch
    and never this unit. Its GPUs are the deployment's list (exactly what one node's share takes)."""
    host = rd.node_hosts[rank]
    unit = rd.worker_unit_name(rank)
    gpus = ",".join(str(g) for g in rd.deployment.gpus)
    env = {"CUDA_VISIBLE_DEVICES": gpus} if rd.deployment.gpus else {}
    text = Template((TEMPLATES / "vllm-node.service.tmpl").read_text(encoding="utf-8")).substitute(
        stack=stack,
        deployment=rd.deployment.name,
        rank=rank,
        nodes=len(rd.node_hosts),
        head=rd.node_hosts[0].name,
        user=host.user,
        state_dir=node_state_dir(stack, rd, rank),
        environment_lines=environment_lines(env),
        env_file=f"{ETC_DIR}/{unit.removesuffix('.service')}.env",
        python=host.runtime.python,
        tools_dir=TOOLS_DIR,
        gpus=gpus or "none",
        release_threshold=rd.deployment.gpu_release_threshold_mib,
        release_timeout=rd.deployment.gpu_release_timeout_seconds,
        unit=unit,
        unit_stem=unit.removesuffix(".service"),
        foreign=rd.deployment.foreign_gpu_processes.value,
        exec_start=" ".join(systemd_quote(a) for a in node_watch_command(rd, stack, rank)),
        start_timeout=rd.deployment.gpu_release_timeout_seconds + 60,
    )
    return RenderedUnit(name=unit, text=text, state_dir=node_state_dir(stack, rd, rank))


def adapters_file(state_dir: str) -> str:
    """The deployment's adapters (written by its adapters step) that each of its engines loads as it starts."""
    return f"{state_dir}/{ADAPTERS_FILE}"


def placement_file(stem: str) -> str:
    return f"{ETC_DIR}/{stem}.placement.env"


def secret_env_file(hf_token: str | None) -> str:
    """Body of the 0600 EnvironmentFile; values are validated tokens, written unquoted."""
    if hf_token is None:
        return "# no secrets configured\n"
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,512}", hf_token):
        raise ValueError("vllm-fleet:hfToken has characters a Hugging Face token never has")
    return f"HF_TOKEN={hf_token}\n"
