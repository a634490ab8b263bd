"""What this project knows of vLLM's command line: the flags it renders itself (refused in extraArgs),
the variables it owns, vLLM's other spellings of a flag, the flags a release removed, and the releases
that brought the flags it renders.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Flags the project renders itself from typed fields; passing them again in extraArgs would make two
# sources of truth for one setting, so they are refused with a pointer to the field.
MANAGED_FLAGS: dict[str, str] = {
    "--model": "the model entry (vllm-fleet:models)",
    "--port": "deployments[].port",
    "--host": "deployments[].bindAddress",
    "--served-model-name": "deployments[].servedModelName",
    "--tensor-parallel-size": "serving.tensorParallel",
    "--pipeline-parallel-size": "serving.pipelineParallel",
    "--enable-expert-parallel": "serving.expertParallel",
    "--max-model-len": "serving.maxModelLen",
    "--gpu-memory-utilization": "serving.gpuMemoryUtilization",
    "--tool-call-parser": "serving.toolCallParser",
    "--reasoning-parser": "serving.reasoningParser",
    "--trust-remote-code": "serving.trustRemoteCode",
    "--enable-auto-tool-choice": "serving.enableAutoToolChoice",
    "--attention-backend": "serving.attentionBackend",
    "--safetensors-load-strategy": "serving.safetensorsLoadStrategy",
    "--load-format": "serving.loadFormat",
    "--model-loader-extra-config": "serving.modelLoaderExtraConfig",
    "--enable-lora": "serving.lora",
    "--max-loras": "serving.lora.maxLoras",
    "--max-lora-rank": "serving.lora.maxLoraRank",
    "--max-cpu-loras": "serving.lora.maxCpuLoras",
    "--lora-modules": "vllm-fleet:adapters and deployments[].adapters (loaded at runtime, no restart)",
}
# Variables the project owns: GPU selection follows deployments[].gpus, the token comes from a secret.
MANAGED_ENV: dict[str, str] = {
    "CUDA_VISIBLE_DEVICES": "set deployments[].gpus instead",
    "VLLM_CACHE_ROOT": "each deployment has its own compile cache under /var/cache/vllm-fleet",
    "HF_TOKEN": "set it with `pulumi config set --secret vllm-fleet:hfToken`",
    "HUGGING_FACE_HUB_TOKEN": "set it with `pulumi config set --secret vllm-fleet:hfToken`",
    "HF_HOME": "set storage[].hfHome instead",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "set serving.lora: the adapters step loads adapters at runtime with it",
}


# vLLM's short spellings of managed flags.
FLAG_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}
# Flags a vLLM release removed: (first release without it, what to use instead). REFERENCE.md section 5.
REMOVED_FLAGS: dict[str, tuple[tuple[int, ...], str]] = {
    "--disable-log-requests": ((0, 12), "drop it (request logging is off by default) or use --no-enable-log-requests"),
}
# The release that brought `--attention-backend`; before it the backend is the VLLM_ATTENTION_BACKEND variable.
ATTENTION_BACKEND_FLAG_SINCE = (0, 12)
# `--safetensors-load-strategy` (lazy|eager) came with vllm#24469 (merged 2025-09-08, so v0.11); its
# `prefetch` value with vllm#36012 (merged 2026-03-04; v0.17 is the first release we count on). On an
# older pinned vLLM the flag is left out and the pre-warm step fills the page cache instead; on an
# unpinned one the host's own vLLM judges the launch at stage time, before anything stops.
LOAD_STRATEGY_FLAG_SINCE = (0, 11)
PREFETCH_STRATEGY_SINCE = (0, 17)
# `--load-format instanttensor` came with vllm#36139 (opened 2026-03-05, after prefetch's merge): counted
# from v0.18; from v0.26 it needs instanttensor 0.1.9 (vllm#46868), which the survey reports beside vLLM.
INSTANTTENSOR_FORMAT_SINCE = (0, 18)


def canonical_flag(arg: str) -> str:
    """The flag an engine argument sets, however it is spelled: `--port=9000`, `--port 9000` in one
    element, `--tensor_parallel_size` (vLLM reads underscores as dashes) or a short alias (`-tp`)."""
    token = arg.strip().split(None, 1)[0] if arg.strip() else arg
    token = token.split("=", 1)[0]
    if token.startswith("--"):
        token = "--" + token[2:].replace("_", "-")
    return FLAG_ALIASES.get(token, token)


def managed_flag(arg: str) -> str | None:
    """The managed flag an argument sets, including unambiguous abbreviations argparse would accept."""
    flag = canonical_flag(arg)
    if flag in MANAGED_FLAGS:
        return flag
    if flag.startswith("--") and len(flag) > 3:
        matches = [managed for managed in MANAGED_FLAGS if managed.startswith(flag)]
        if matches:
            return matches[0]
    return None


def no_managed_flags(args: tuple[str, ...]) -> tuple[str, ...]:
    for arg in args:
        flag = managed_flag(arg)
        if flag is not None:
            raise ValueError(f"{arg!r} sets {flag}, which is rendered from {MANAGED_FLAGS[flag]}; set it there")
    return args


def vllm_release(version: str | None) -> tuple[int, ...] | None:
    """(major, minor) of a vLLM version string such as 0.32.0+cpu, or None when unknown."""
    if version is None:
        return None
    parts = re.findall(r"\d+", version.split("+", 1)[0])[:2]
    return tuple(int(p) for p in parts) if len(parts) == 2 else None


def no_managed_env(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if key in MANAGED_ENV:
            raise ValueError(f"{key} is managed by vllm-fleet: {MANAGED_ENV[key]}")
    return env


def loader_config(value: dict[str, Any]) -> dict[str, Any]:
    """A JSON object vLLM's --model-loader-extra-config takes; keys are its option names."""
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise ValueError(f"modelLoaderExtraConfig must be plain JSON: {error}") from None
    for key in value:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", key):
            raise ValueError(f"modelLoaderExtraConfig key {key!r} is not an option name (letters, digits, _)")
    if len(text) > 4096:
        raise ValueError("modelLoaderExtraConfig is over 4096 characters of JSON")
    return value
