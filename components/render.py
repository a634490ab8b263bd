"""Pure functions that render what runs on a host: the vLLM unit, its environment, and every script.

Nothing here imports Pulumi or touches a host, so every output is golden-tested and checked by
`systemd-analyze verify` and `shellcheck` in `make test`. Templates and script bodies are files in
`components/files/`; parameters reach a script as a block of `readonly NAME=<shell-quoted value>` lines
in front of its body, so no value from config is ever spliced into shell syntax.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template
from typing import Any

from controller import host_bundle
from host import contract
from host.contract import BUNDLE_NAME, Plan, deployment_state_dir
from models.config import Host, LoadStrategy, ModelSpec, ResolvedDeployment, Storage
from models.vllm_flags import (
    ATTENTION_BACKEND_FLAG_SINCE,
    LOAD_STRATEGY_FLAG_SINCE,
    MANAGED_FLAGS,
    PREFETCH_STRATEGY_SINCE,
    canonical_flag,
    vllm_release,
)

FILES = Path(__file__).with_name("files")
# Where things live on a host (host/contract.py); the steps, components and tests name them through here.
TOOLS_DIR = contract.TOOLS_DIR
STATE_DIR = contract.STATE_DIR
ETC_DIR = contract.ETC_DIR
UNIT_DIR = contract.UNIT_DIR
FRONT_DOOR_UNIT = contract.FRONT_DOOR_UNIT
FRONT_DOOR_DIR = contract.FRONT_DOOR_DIR
# Engines listen on loopback only; the front door is the way in.
ENGINE_ADDRESS = "127.0.0.1"
# In ExecStart the engine's port is the placement's, expanded by systemd when the unit starts.
ENGINE_PORT_VARIABLE = "${VLLM_FLEET_BACKEND_PORT}"
# Host tools the unit and the steps' scripts call by name: the host package's (controller/host_bundle.py)
# and one shell script.
SHELL_TOOLS: dict[str, Path] = {"clean-shm": FILES / "clean-shm.sh"}
HEREDOC_DELIMITER = "VLLM_FLEET_EOF"

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


def vllm_arguments(rd: ResolvedDeployment, port: int | None = None) -> list[str]:
    """The engine's command line, in the order the team's hand-written launch used.

    The engine listens on loopback behind the front door; its port is the placement's
    (ENGINE_PORT_VARIABLE) unless `port` names one, as the launch check does."""
    s = rd.serving
    args = [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        rd.load_path,
        "--served-model-name",
        rd.served_model_name,
    ]
    if s.tensor_parallel > 1 or rd.host.gpus.count > 0:
        args += ["--tensor-parallel-size", str(s.tensor_parallel)]
    if s.pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(s.pipeline_parallel)]
    if s.expert_parallel:
        args.append("--enable-expert-parallel")
    if s.tool_call_parser:
        args += ["--tool-call-parser", s.tool_call_parser]
    if s.reasoning_parser:
        args += ["--reasoning-parser", s.reasoning_parser]
    if s.trust_remote_code:
        args.append("--trust-remote-code")
    if s.attention_backend and not attention_backend_as_env(rd):
        args += ["--attention-backend", s.attention_backend]
    if s.max_model_len is not None:
        args += ["--max-model-len", str(s.max_model_len)]
    if rd.host.gpus.count > 0:
        args += ["--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}"]
    strategy = load_strategy_flag(rd)
    if strategy is not None:
        args += ["--safetensors-load-strategy", strategy.value]
    if s.load_format:
        args += ["--load-format", s.load_format]
    if s.model_loader_extra_config is not None:
        args += ["--model-loader-extra-config", json.dumps(s.model_loader_extra_config, sort_keys=True)]
    args += node_arguments(rd, 0)
    args += ["--host", ENGINE_ADDRESS, "--port", ENGINE_PORT_VARIABLE if port is None else str(port)]
    args += list(s.extra_args)
    if s.enable_auto_tool_choice:
        args.append("--enable-auto-tool-choice")
    return args


def node_arguments(rd: ResolvedDeployment, rank: int) -> list[str]:
    """vLLM's own multi-node flags for node `rank` (0: the head) of a deployment across hosts."""
    if not rd.multi_node:
        return []
    head = rd.node_hosts[0].cluster
    assert head is not None  # validated: every node has a cluster network
    return [
        "--nnodes",
        str(len(rd.node_hosts)),
        "--node-rank",
        str(rank),
        "--master-addr",
        head.address,
        "--master-port",
        str(rd.master_port),
    ]


def worker_arguments(rd: ResolvedDeployment, rank: int) -> list[str]:
    """The command line of node `rank` > 0: `vllm serve --headless` with the head's model and engine flags
    (the API server's own flags, name and address, are the head's alone)."""
    head = vllm_arguments(rd, port=rd.deployment.engine_ports[0])[2:]
    dropped = {"--served-model-name", "--host", "--port", "--node-rank"}
    args: list[str] = []
    skip = False
    for arg in head:
        if skip:
            skip = False
            continue
        if arg in dropped:
            skip = True
            continue
        args.append(arg)
    return ["-m", "vllm.entrypoints.cli.main", "serve", *args, "--node-rank", str(rank), "--headless"]


def node_watch_command(rd: ResolvedDeployment, rank: int) -> list[str]:
    """Node `rank`'s engine under node-watch, which ends it when the head it joined goes away (a headless
    engine waits forever for a head that died, and the next head cannot use it)."""
    head = rd.node_hosts[0].cluster
    assert head is not None
    python = rd.node_hosts[rank].runtime.python
    watch = [python, f"{TOOLS_DIR}/node-watch", "--head", head.address, "--grace", str(NODE_WATCH_GRACE_SECONDS)]
    return [*watch, "--", python, *worker_arguments(rd, rank)]


# How long one model step of a multi-node engine may take before the engine gives up on its nodes.
MULTI_NODE_STEP_TIMEOUT_SECONDS = 60
# How long a node's engine may hold no connection to its head before node-watch ends it.
NODE_WATCH_GRACE_SECONDS = 10


def attention_backend_as_env(rd: ResolvedDeployment) -> bool:
    """Whether the host's vLLM predates `--attention-backend` and reads VLLM_ATTENTION_BACKEND instead.

    A host whose vLLM version is not pinned gets the flag; the unit step's vllm-args-check then has the
    host's vLLM refuse it, before anything stops, if it is older."""
    release = vllm_release(rd.host.runtime.vllm_version)
    return release is not None and release < ATTENTION_BACKEND_FLAG_SINCE


def load_strategy_flag(rd: ResolvedDeployment) -> LoadStrategy | None:
    """The --safetensors-load-strategy to pass, or None where the host's pinned vLLM predates it (or its
    `prefetch` value): the pre-warm step then reads the files into the page cache before the start."""
    strategy = rd.serving.safetensors_load_strategy
    release = vllm_release(rd.host.runtime.vllm_version)
    if strategy is None or release is None:
        return strategy
    if release < LOAD_STRATEGY_FLAG_SINCE:
        return None
    if strategy is LoadStrategy.PREFETCH and release < PREFETCH_STRATEGY_SINCE:
        return None
    return strategy


def load_strategy_note(rd: ResolvedDeployment) -> str | None:
    """What the preview says when the configured load strategy is left out for this host's vLLM."""
    wanted = rd.serving.safetensors_load_strategy
    if wanted is None or load_strategy_flag(rd) is not None:
        return None
    since = PREFETCH_STRATEGY_SINCE if wanted is LoadStrategy.PREFETCH else LOAD_STRATEGY_FLAG_SINCE
    return (
        f"deployment {rd.deployment.name!r}: safetensorsLoadStrategy {wanted.value} needs vLLM "
        f"{'.'.join(map(str, since))} or later and host {rd.host.name!r} pins {rd.host.runtime.vllm_version} "
        "(hosts[].runtime.vllmVersion); the flag is left out and the swap pre-warms the page cache instead"
    )


def vllm_argument_origins(rd: ResolvedDeployment) -> dict[str, str]:
    """The stack config key each rendered flag comes from, for errors that must name the key to fix."""
    model = f"vllm-fleet:models.{rd.model_name}"
    deployment = f"vllm-fleet:deployments[{rd.deployment.name}]"
    origins = {
        flag: f"{deployment}.overrides / {model}.{where}" if where.startswith("serving.") else where
        for flag, where in MANAGED_FLAGS.items()
    }
    origins.update(
        {
            "--model": f"{model} (its storage path and dir)",
            "--port": f"{deployment}.port",
            "--host": f"{deployment}.bindAddress",
            "--served-model-name": f"{deployment}.servedModelName",
        }
    )
    extra = (
        f"{deployment}.overrides.extraArgs"
        if rd.deployment.overrides.extra_args is not None
        else f"{model}.serving.extraArgs"
    )
    for arg in rd.serving.extra_args:
        origins[canonical_flag(arg)] = extra
    return origins


def engine_environment(rd: ResolvedDeployment, rank: int = 0) -> dict[str, str]:
    """Non-secret environment of the engine (on node `rank` of a multi-node deployment); shown in the
    unit so a preview diff reveals changes."""
    env: dict[str, str] = {
        "HF_HOME": rd.storage.effective_hf_home,
        "TRANSFORMERS_CACHE": f"{rd.storage.effective_hf_home}/hub",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "1",
    }
    if rd.deployment.gpus:
        # Index order as nvidia-smi prints it, so deployments[].gpus and the GPU guard mean the same GPUs;
        # which of them (CUDA_VISIBLE_DEVICES) is the placement's, chosen by the swap.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if rd.serving.attention_backend and attention_backend_as_env(rd):
        env["VLLM_ATTENTION_BACKEND"] = rd.serving.attention_backend
    cluster = rd.node_hosts[rank].cluster if rd.multi_node else None
    if cluster is not None:
        # The address this node's engine announces and the interface torch.distributed and NCCL use.
        env.update(
            VLLM_HOST_IP=cluster.address, GLOO_SOCKET_IFNAME=cluster.interface, NCCL_SOCKET_IFNAME=cluster.interface
        )
        # A node that died leaves the head answering /health while requests hang (300 s by default):
        # fail the step sooner, so the head exits and its unit restarts it to meet the restarted node.
        env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = str(MULTI_NODE_STEP_TIMEOUT_SECONDS)
    env.update(rd.serving.extra_env)
    env.update(rd.deployment.environment)
    return env


def render_unit(rd: ResolvedDeployment, stack: str) -> RenderedUnit:
    python = rd.host.runtime.python
    state_dir = deployment_state_dir(stack, rd.deployment.name)
    env_file = f"{ETC_DIR}/{rd.unit_stem}.env"
    release_timeout = rd.deployment.gpu_release_timeout_seconds
    start_timeout = rd.start_timeout_seconds
    start_timeout_total = start_timeout + release_timeout + 60
    template = Template((FILES / "vllm.service.tmpl").read_text(encoding="utf-8"))
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
        placement_file=placement_file(rd),
        release_threshold=rd.deployment.gpu_release_threshold_mib,
        release_timeout=release_timeout,
        foreign=rd.deployment.foreign_gpu_processes.value,
        adopt="".join(f" --adopt {systemd_quote(unit)}" for unit in rd.deployment.replaces),
        unit=rd.unit_name,
        unit_stem=rd.unit_stem,
        exec_start=" ".join(
            a if a == ENGINE_PORT_VARIABLE else systemd_quote(a) for a in [python, *vllm_arguments(rd)]
        ),
        model_path=rd.load_path,
        start_timeout=start_timeout,
        start_timeout_total=start_timeout_total,
    )
    return RenderedUnit(name=rd.unit_name, text=text, state_dir=state_dir)


def node_state_dir(stack: str, rd: ResolvedDeployment, rank: int) -> str:
    return deployment_state_dir(stack, f"{rd.deployment.name}.node{rank}")


def render_node_unit(rd: ResolvedDeployment, stack: str, rank: int) -> RenderedUnit:
    """The unit of a headless engine on node `rank` > 0; its GPUs are the deployment's list (exactly
    what one node's share takes), so no placement is chosen there."""
    host = rd.node_hosts[rank]
    python = host.runtime.python
    unit = rd.worker_unit_name(rank)
    start_timeout_total = rd.start_timeout_seconds + rd.deployment.gpu_release_timeout_seconds + 60
    gpus = ",".join(str(g) for g in rd.deployment.gpus)
    env = engine_environment(rd, rank)
    if rd.deployment.gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    text = Template((FILES / "vllm-node.service.tmpl").read_text(encoding="utf-8")).substitute(
        stack=stack,
        deployment=rd.deployment.name,
        rank=rank,
        nodes=len(rd.node_hosts),
        head=rd.node_hosts[0].name,
        model=rd.model_name,
        user=host.user,
        state_dir=node_state_dir(stack, rd, rank),
        environment_lines=environment_lines(env),
        env_file=f"{ETC_DIR}/{unit.removesuffix('.service')}.env",
        python=python,
        tools_dir=TOOLS_DIR,
        model_path=rd.load_path,
        gpus=gpus or "none",
        release_threshold=rd.deployment.gpu_release_threshold_mib,
        release_timeout=rd.deployment.gpu_release_timeout_seconds,
        unit=unit,
        unit_stem=unit.removesuffix(".service"),
        foreign=rd.deployment.foreign_gpu_processes.value,
        exec_start=" ".join(systemd_quote(a) for a in node_watch_command(rd, rank)),
        start_timeout_total=start_timeout_total,
    )
    return RenderedUnit(name=unit, text=text, state_dir=node_state_dir(stack, rd, rank))


def placement_file(rd: ResolvedDeployment) -> str:
    return f"{ETC_DIR}/{rd.unit_stem}.placement.env"


def secret_env_file(hf_token: str | None) -> str:
    """Body of the 0600 EnvironmentFile; values are validated tokens, written unquoted."""
    if hf_token is None:
        return "# no secrets configured\n"
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,512}", hf_token):
        raise ValueError("vllm-fleet:hfToken has characters a Hugging Face token never has")
    return f"HF_TOKEN={hf_token}\n"


# ---- scripts ---------------------------------------------------------------------------------------


def script_body(name: str) -> str:
    return (FILES / name).read_text(encoding="utf-8")


ParamValue = str | int | float | bool | Sequence[str]


def _shell_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    return "(" + " ".join(shlex.quote(v) for v in value) + ")"


def render_script(name: str, params: Mapping[str, ParamValue]) -> str:
    """A script body from components/files with its parameters bound as readonly shell variables."""
    body = script_body(name)
    if not body.startswith("#!/usr/bin/env bash\n"):
        raise ValueError(f"{name} must start with '#!/usr/bin/env bash'")
    header_lines = ["#!/usr/bin/env bash", f"# vllm-fleet {name}: parameters rendered from the stack config"]
    for key, value in params.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ValueError(f"parameter name {key!r} is not a shell variable name")
        if isinstance(value, str) and ("$" in value or "`" in value):
            header_lines.append("# shellcheck disable=SC2016  # data, never expanded")
        if isinstance(value, str | int | float | bool):
            header_lines.append(f"readonly {key}={_shell_value(value)}")
        else:
            header_lines.append(f"{key}={_shell_value(value)}")
            header_lines.append(f"readonly {key}")
    return "\n".join(header_lines) + "\n" + body.split("\n", 1)[1]


def heredoc_file(path: str, content: str, mode: str) -> str:
    """Shell lines that write `content` to `path` atomically (temp file, then rename) with `mode`."""
    if HEREDOC_DELIMITER in content:
        raise ValueError(f"{path}: content contains the heredoc delimiter {HEREDOC_DELIMITER}")
    tmp = f"{path}.vllm-fleet-tmp"
    text = content if content.endswith("\n") else content + "\n"
    return (
        f"install -d -m 0755 {shlex.quote(str(Path(path).parent))}\n"
        f"cat > {shlex.quote(tmp)} <<'{HEREDOC_DELIMITER}'\n{text}{HEREDOC_DELIMITER}\n"
        f"chmod {mode} {shlex.quote(tmp)}\n"
        f"mv -f {shlex.quote(tmp)} {shlex.quote(path)}\n"
    )


# Linux's MAX_ARG_STRLEN is 128 KiB per argument; sshd runs a command as `$SHELL -c COMMAND`, and the
# invocation wraps the script once more in `bash -c`. Leave room for the wrapper.
MAX_SCRIPT_BYTES = 120_000


def remote_invocation(script: str, step: str, time_limit_seconds: int, kill_after_seconds: int) -> str:
    """The command string a remote Command runs over SSH for a rendered script.

    The script travels as an argument of `bash -c` (kept readable in `pulumi preview --diff` by a quoted
    heredoc), which leaves the SSH session's stdin free to carry secrets into the script. coreutils
    `timeout` bounds it on the host (TERM to the script's process group, KILL `kill_after_seconds`
    later), because pulumi-command does not act on the engine's custom timeouts; exit 124 is named.
    """
    delimiter = "VLLM_FLEET_SCRIPT"
    if delimiter in script:
        raise ValueError(f"{step}: script contains the delimiter {delimiter}")
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise ValueError(
            f"{step}: its script is {len(script.encode())} bytes; the remote shell takes the command as one "
            f"argument, at most 128 KiB on Linux: split the step (the limit here is {MAX_SCRIPT_BYTES} bytes)"
        )
    label = shlex.quote("vllm-fleet-" + step)
    return (
        f"timeout --kill-after={kill_after_seconds} {time_limit_seconds} "
        f"bash -c \"$(cat <<'{delimiter}'\n{script}{delimiter}\n)\" {label} || {{ rc=$?; "
        f'[ "$rc" -ne 124 ] || echo {label}": stopped by its time limit of {time_limit_seconds} s" >&2; '
        f'exit "$rc"; }}'
    )


# ---- the scripts of each step, with their parameters bound ---------------------------------------


@functools.cache
def tools_script() -> str:
    """The tools' directory; the tools themselves install in groups (tool_group_script)."""
    return render_script("tools.sh", {"TOOLS_DIR": TOOLS_DIR})


@functools.cache
def tools_package_script() -> str:
    """Install the host package: one archive of host/ (its version is the archive's digest) and a launcher
    per tool, plus the shell tools. A changed host tool changes this one step. The archive travels as
    base64 (about 60 KB), inside the 128 KiB one argument of the remote shell may have."""
    archive = base64.b64encode(host_bundle.archive()).decode()
    lines = "\n".join(archive[i : i + 100] for i in range(0, len(archive), 100))
    tools = sorted([*host_bundle.TOOLS, *SHELL_TOOLS])
    script = (
        "#!/usr/bin/env bash\n"
        f"# vllm-fleet host package {host_bundle.version()}: {', '.join(tools)}, installed in {TOOLS_DIR}\n"
        "set -euo pipefail\n"
        f"base64 -d >{TOOLS_DIR}/.{BUNDLE_NAME}.tmp <<'{HEREDOC_DELIMITER}'\n{lines}\n{HEREDOC_DELIMITER}\n"
        f"chmod 0644 {TOOLS_DIR}/.{BUNDLE_NAME}.tmp\n"
        f"mv -f {TOOLS_DIR}/.{BUNDLE_NAME}.tmp {TOOLS_DIR}/{BUNDLE_NAME}\n"
    )
    for tool in sorted(host_bundle.TOOLS):
        script += heredoc_file(f"{TOOLS_DIR}/{tool}", host_bundle.launcher(tool), "0755")
    for tool, path in sorted(SHELL_TOOLS.items()):
        script += heredoc_file(f"{TOOLS_DIR}/{tool}", path.read_text(encoding="utf-8"), "0755")
    return (
        script
        + f'echo "installed the vllm-fleet host package {host_bundle.version()} in {TOOLS_DIR}: {" ".join(tools)}"\n'
    )


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


def args_check_spec(rd: ResolvedDeployment) -> str:
    """What vllm-args-check reads: the engine's arguments after the module, and where each flag comes from."""
    # After `-m vllm.entrypoints.openai.api_server`, with the first engine port for the placement's.
    args = vllm_arguments(rd, port=rd.deployment.engine_ports[0])[2:]
    return json.dumps({"unit": rd.unit_name, "args": args, "origins": vllm_argument_origins(rd)}, sort_keys=True)


def stage_script(rd: ResolvedDeployment, stack: str) -> str:
    return _stage(rd.deployment.name, render_unit(rd, stack), rd.host.runtime.python, args_check_spec(rd))


def node_args_check_spec(rd: ResolvedDeployment, rank: int) -> str:
    """vllm-args-check's input for a headless node: the arguments after `-m vllm.entrypoints.cli.main serve`,
    which the same server parser reads."""
    args = worker_arguments(rd, rank)[3:]
    unit = rd.worker_unit_name(rank)
    return json.dumps({"unit": unit, "args": args, "origins": vllm_argument_origins(rd)}, sort_keys=True)


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


# How long activation waits for a rollback or a start, on top of the unit's own start timeout.
ACTIVATION_SLACK_SECONDS = 120


def activation_timeout(rd: ResolvedDeployment) -> int:
    return rd.start_timeout_seconds + rd.deployment.gpu_release_timeout_seconds + ACTIVATION_SLACK_SECONDS


def swap_plan(rd: ResolvedDeployment, stack: str) -> Plan:
    """What the host's swap transaction does for this deployment: the plan it reads (host/contract.py)."""
    from components import render_access  # it renders with this module's helpers

    fields: dict[str, Any] = {
        "stack": stack,
        "deployment": rd.deployment.name,
        "state_dir": deployment_state_dir(stack, rd.deployment.name),
        "unit_name": rd.unit_name,
        "unit_stem": rd.unit_stem,
        "served_name": rd.served_model_name,
        "port": rd.deployment.port,
        "gpus": list(rd.deployment.gpus),
        "gpus_needed": rd.gpus_needed,
        "backend_ports": list(rd.deployment.engine_ports),
        "bind_address": rd.deployment.bind_address,
        "readiness_address": rd.deployment.readiness_address,
        # The nodes of a multi-node deployment hold one engine each: its swaps stop before they start.
        "swap_mode": "stop-start" if rd.multi_node else rd.deployment.swap_mode.value,
        "drain_seconds": rd.deployment.drain_seconds,
        "prewarm_margin_gib": rd.deployment.prewarm_margin_gib,
        "model_dir": rd.model_path,
        "load_dir": rd.load_path,
        "python": rd.host.runtime.python,
        "tools_dir": TOOLS_DIR,
        "ready_timeout": activation_timeout(rd),
        # The staged unit's digest: a changed unit changes this step, so `pulumi up` re-activates.
        "unit_sha256": hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest(),
        "replaces": list(rd.deployment.replaces),
        "foreign_gpu_processes": rd.deployment.foreign_gpu_processes.value,
        "report_every": 15,
        "journal_lines": 40,
        # Where the site includes who may call it from, and the keys the swap's check through it uses.
        **render_access.plan_fields(rd, stack),
    }
    return Plan.from_dict(fields)


def activate_script(rd: ResolvedDeployment, stack: str, repairs: int = 0) -> str:
    plan = swap_plan(rd, stack)
    return render_script(
        "activate.sh",
        {
            "STATE_DIR": plan.state_dir,
            "PYTHON": rd.host.runtime.python,
            "TOOLS_DIR": TOOLS_DIR,
            "UNIT_SHA256": plan.unit_sha256,
            "REPAIRS": str(repairs),
            "PLAN": json.dumps(asdict(plan), sort_keys=True, indent=1),
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
