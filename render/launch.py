"""The engine's launch: its command line on the head and on every other node, its environment, and the
flags the host's vLLM version allows."""

from __future__ import annotations

import json

from host.contract import NODE_LAUNCHES, NodeLaunch
from models.config import LoadStrategy, ResolvedDeployment
from models.load_choice import LoadChoice, LoadFacts, pick_loader
from models.vllm_flags import (
    ATTENTION_BACKEND_FLAG_SINCE,
    LOAD_STRATEGY_FLAG_SINCE,
    MANAGED_FLAGS,
    PREFETCH_STRATEGY_SINCE,
    canonical_flag,
    vllm_release,
)
from render.paths import TOOLS_DIR, node_state_dir

# Engines listen on loopback only; the front door is the way in.
ENGINE_ADDRESS = "127.0.0.1"
# In ExecStart the engine's port is the placement's, expanded by systemd when the unit starts.
ENGINE_PORT_VARIABLE = "${VLLM_FLEET_BACKEND_PORT}"


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
        *rd.served_model_names,
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
    load_format = load_choice(rd).load_format
    if load_format:
        args += ["--load-format", load_format]
    if s.model_loader_extra_config is not None:
        args += ["--model-loader-extra-config", json.dumps(s.model_loader_extra_config, sort_keys=True)]
    if s.lora is not None:
        # Adapters themselves are loaded at runtime (vllm-fleet:adapters): the launch only makes room.
        args += ["--enable-lora", "--max-loras", str(s.lora.max_loras), "--max-lora-rank", str(s.lora.max_lora_rank)]
        if s.lora.max_cpu_loras is not None:
            args += ["--max-cpu-loras", str(s.lora.max_cpu_loras)]
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


def node_launch(rd: ResolvedDeployment, rank: int) -> NodeLaunch:
    """Node `rank`'s headless engine for this deployment's model: what node-watch runs there while the head
    runs this model (it tells by the model's master port, on which the head then listens)."""
    python = rd.node_hosts[rank].runtime.python
    return NodeLaunch(
        model=rd.model_name,
        master_port=rd.master_port,
        argv=(python, *worker_arguments(rd, rank)),
        environment=engine_environment(rd, rank),
        model_dir=rd.load_path,
    )


def node_watch_command(rd: ResolvedDeployment, stack: str, rank: int) -> list[str]:
    """Node `rank`'s unit runs node-watch, which runs the launch of the model its head runs (the node's
    launches directory holds one per model) and ends it when the head it joined goes away (a headless
    engine waits forever for a head that died, and the next head cannot use it)."""
    head = rd.node_hosts[0].cluster
    assert head is not None
    python = rd.node_hosts[rank].runtime.python
    launches = f"{node_state_dir(stack, rd, rank)}/{NODE_LAUNCHES}"
    grace = str(NODE_WATCH_GRACE_SECONDS)
    return [python, f"{TOOLS_DIR}/node-watch", "--head", head.address, "--grace", grace, "--launches", launches]


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


def load_choice(rd: ResolvedDeployment, facts: LoadFacts | None = None) -> LoadChoice:
    """The deployment's loader: its stack's values, and for `auto` (or unset) the pick from the host's
    `facts` (models/load_choice.py); without them, from what the config knows (the checkpoint's size, the
    pinned vLLM release), which leaves vLLM's defaults and says what is unknown."""
    if facts is None:
        facts = LoadFacts(
            rd.model.size_gb, vllm_release=vllm_release(rd.host.runtime.vllm_version), model_path=rd.load_path
        )
    return pick_loader(facts, rd.serving.load_format, rd.serving.safetensors_load_strategy)


def load_strategy_flag(rd: ResolvedDeployment) -> LoadStrategy | None:
    """The --safetensors-load-strategy to pass, or None where the host's pinned vLLM predates it (or its
    `prefetch` value): the pre-warm step then reads the files into the page cache before the start."""
    strategy = load_choice(rd).load_strategy
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
    if wanted in (None, LoadStrategy.AUTO) or load_strategy_flag(rd) is not None:
        return None
    since = PREFETCH_STRATEGY_SINCE if wanted is LoadStrategy.PREFETCH else LOAD_STRATEGY_FLAG_SINCE
    return (
        f"deployment {rd.deployment.name!r}: safetensorsLoadStrategy {wanted.value} needs vLLM "
        f"{'.'.join(map(str, since))} or later and host {rd.host.name!r} runs vLLM {rd.host.runtime.vllm_version} "
        "(hosts[].runtime.vllmVersion, or what the host reports); the flag is left out and the swap pre-warms the "
        "page cache instead"
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
            "VLLM_ATTENTION_BACKEND": f"{deployment}.overrides / {model}.serving.attentionBackend",
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
    if rd.serving.lora is not None:
        # The adapters step and the unit's readiness check load adapters through the engine's loopback
        # endpoints, which vLLM serves only with this (the front door never proxies them).
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
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


def args_check_spec(rd: ResolvedDeployment) -> str:
    """What vllm-args-check reads: the engine's arguments after the module, and where each flag comes from."""
    # After `-m vllm.entrypoints.openai.api_server`, with the first engine port for the placement's.
    args = vllm_arguments(rd, port=rd.deployment.engine_ports[0])[2:]
    spec: dict[str, object] = {"unit": rd.unit_name, "args": args, "origins": vllm_argument_origins(rd)}
    # The variables vLLM judges only when it starts, judged before anything stops too.
    judged = {k: v for k, v in engine_environment(rd).items() if k == "VLLM_ATTENTION_BACKEND"}
    if judged:
        spec["environment"] = judged
    return json.dumps(spec, sort_keys=True)


def node_args_check_spec(rd: ResolvedDeployment, rank: int) -> str:
    """vllm-args-check's input for a headless node: the arguments after `-m vllm.entrypoints.cli.main serve`,
    which the same server parser reads."""
    args = worker_arguments(rd, rank)[3:]
    unit = rd.worker_unit_name(rank)
    return json.dumps({"unit": unit, "args": args, "origins": vllm_argument_origins(rd)}, sort_keys=True)
