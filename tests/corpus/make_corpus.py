"""Writes tests/corpus/invalid/*.yaml: broken and hostile stack files, each from Pulumi.dev.yaml with one
change, headed by the config key its error must name. Run it again after changing the dev stack file:
    python -m tests.corpus.make_corpus
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.support.sandbox_env import dev_config

OUT = Path(__file__).with_name("invalid")

Case = tuple[str, str, tuple[Any, ...], Any]  # name, expected key, path, value ("<delete>" removes)

CASES: list[Case] = [
    ("port-is-a-string", "vllm-fleet:hosts[0].port", ("hosts", 0, "port"), "twenty-two"),
    ("port-out-of-range", "vllm-fleet:hosts[0].port", ("hosts", 0, "port"), 70000),
    ("gpu-count-negative", "vllm-fleet:hosts[0].gpus.count", ("hosts", 0, "gpus", "count"), -1),
    ("gpus-not-a-mapping", "vllm-fleet:hosts[0].gpus", ("hosts", 0, "gpus"), "two"),
    ("unknown-host-key", "vllm-fleet:hosts[0].gpuCount", ("hosts", 0, "gpuCount"), 2),
    ("unknown-top-level-key", "vllm-fleet:deployment", ("deployment",), []),
    ("host-name-with-semicolon", "vllm-fleet:hosts[0].name", ("hosts", 0, "name"), "sandbox;reboot"),
    ("host-name-dotdot", "vllm-fleet:hosts[0].name", ("hosts", 0, "name"), "../sandbox"),
    ("address-with-command", "vllm-fleet:hosts[0].address", ("hosts", 0, "address"), "127.0.0.1 $(reboot)"),
    ("user-with-backticks", "vllm-fleet:hosts[0].user", ("hosts", 0, "user"), "root`id`"),
    (
        "python-path-relative",
        "vllm-fleet:hosts[0].runtime.python",
        ("hosts", 0, "runtime", "python"),
        "opt/vllm-env/bin/python3",
    ),
    (
        "python-path-dotdot",
        "vllm-fleet:hosts[0].runtime.python",
        ("hosts", 0, "runtime", "python"),
        "/opt/../bin/python3",
    ),
    (
        "storage-path-newline",
        "vllm-fleet:storage[0].path",
        ("storage", 0, "path"),
        "/shared\nExecStartPre=/bin/rm -rf /",
    ),
    ("storage-path-space", "vllm-fleet:storage[0].path", ("storage", 0, "path"), "/shared models"),
    ("storage-unknown-host", "vllm-fleet:storage[0].host", ("storage", 0, "host"), "elsewhere"),
    ("storage-too-small", "vllm-fleet:storage[0].capacityGb", ("storage", 0, "capacityGb"), 0.0015),
    ("capacity-negative", "vllm-fleet:storage[0].capacityGb", ("storage", 0, "capacityGb"), -5),
    (
        "model-preset-unknown",
        "vllm-fleet:models.tiny-chat-a.preset",
        ("models", "tiny-chat-a", "preset"),
        "tiny-chat-z",
    ),
    ("model-name-dotdot", "vllm-fleet:models.../etc", ("models", "../etc"), {"preset": "tiny-chat-a"}),
    ("model-repo-traversal", "vllm-fleet:models.tiny-chat-a.repo", ("models", "tiny-chat-a", "repo"), "acme/../../etc"),
    (
        "model-revision-injection",
        "vllm-fleet:models.tiny-chat-a.revision",
        ("models", "tiny-chat-a", "revision"),
        "main; curl x",
    ),
    ("model-dir-slash", "vllm-fleet:models.tiny-chat-a.dir", ("models", "tiny-chat-a", "dir"), "a/../../root"),
    ("model-size-zero", "vllm-fleet:models.tiny-chat-a.sizeGb", ("models", "tiny-chat-a", "sizeGb"), 0),
    (
        "utilization-above-one",
        "vllm-fleet:models.tiny-chat-a.serving.gpuMemoryUtilization",
        ("models", "tiny-chat-a", "serving", "gpuMemoryUtilization"),
        1.5,
    ),
    (
        "extra-arg-subshell",
        "vllm-fleet:models.tiny-chat-a.serving.extraArgs[0]",
        ("models", "tiny-chat-a", "serving", "extraArgs"),
        ["$(reboot)"],
    ),
    (
        "extra-arg-newline",
        "vllm-fleet:models.tiny-chat-a.serving.extraArgs[0]",
        ("models", "tiny-chat-a", "serving", "extraArgs"),
        ["--x\nExecStart=/bin/sh"],
    ),
    (
        "extra-env-backtick",
        "vllm-fleet:models.tiny-chat-a.serving.extraEnv.VLLM_CPU_KVCACHE_SPACE",
        ("models", "tiny-chat-a", "serving", "extraEnv", "VLLM_CPU_KVCACHE_SPACE"),
        "1`id`",
    ),
    (
        "env-name-lowercase",
        "vllm-fleet:deployments[0].environment.nccl_proto",
        ("deployments", 0, "environment"),
        {"nccl_proto": "LL"},
    ),
    (
        "env-token-in-plaintext",
        "vllm-fleet:deployments[0].environment",
        ("deployments", 0, "environment"),
        {"HF_TOKEN": "hf_x"},
    ),
    ("deployment-unknown-host", "vllm-fleet:deployments[0].host", ("deployments", 0, "host"), "gpu-99"),
    ("deployment-unknown-model", "vllm-fleet:deployments[0].model", ("deployments", 0, "model"), "glm-5"),
    ("deployment-gpu-missing", "vllm-fleet:deployments[0].gpus", ("deployments", 0, "gpus"), [7]),
    ("deployment-gpus-repeat", "vllm-fleet:deployments[0].gpus", ("deployments", 0, "gpus"), [0, 0]),
    ("deployment-port-privileged", "vllm-fleet:deployments[0].port", ("deployments", 0, "port"), 80),
    (
        "deployment-served-name-quote",
        "vllm-fleet:deployments[0].servedModelName",
        ("deployments", 0, "servedModelName"),
        "tiny'; rm -rf /",
    ),
    ("deployment-unit-name-bad", "vllm-fleet:deployments[0].unitName", ("deployments", 0, "unitName"), "sshd"),
    (
        "deployment-managed-flag",
        "vllm-fleet:deployments[0].overrides.extraArgs",
        ("deployments", 0, "overrides", "extraArgs"),
        ["--port=9999"],
    ),
    ("deployment-tp-mismatch", "vllm-fleet:deployments[0].gpus", ("deployments", 0, "overrides", "tensorParallel"), 2),
    ("hf-endpoint-not-url", "vllm-fleet:hfEndpoint", ("hfEndpoint",), "file:///etc/passwd"),
    ("tier-unknown", "vllm-fleet:tier", ("tier",), "staging"),
    ("token-in-plaintext", "vllm-fleet:hfToken", ("hfToken",), "hf_plaintext_token"),
]

# Cases that need a second deployment: conflicts between deployments of one host.
SECOND = {
    "name": "chat2",
    "host": "sandbox",
    "model": "tiny-chat-a",
    "gpus": [1],
    "port": 8001,
    "unitName": "vllm-chat-two",
}
PAIR_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("two-deployments-share-a-gpu", "vllm-fleet:deployments[1].gpus", {**SECOND, "gpus": [0]}),
    ("two-deployments-share-a-port", "vllm-fleet:deployments[1].port", {**SECOND, "port": 8000}),
    (
        "two-deployments-share-a-unit",
        "vllm-fleet:deployments[1].unitName",
        {k: v for k, v in SECOND.items() if k != "unitName"},
    ),
]


def write(name: str, key: str, raw: dict[str, Any]) -> None:
    body = yaml.safe_dump({"config": {f"vllm-fleet:{k}": v for k, v in raw.items()}}, sort_keys=False)
    (OUT / f"{name}.yaml").write_text(f"# expect: {key}\n{body}")


def main() -> None:
    base = dev_config()
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.yaml"):
        old.unlink()
    for name, key, path, value in CASES:
        raw = copy.deepcopy(base)
        node: Any = raw
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[path[-1]] = value
        write(name, key, raw)
    for name, key, second in PAIR_CASES:
        raw = copy.deepcopy(base)
        raw["deployments"].append(second)
        write(name, key, raw)


if __name__ == "__main__":
    main()
