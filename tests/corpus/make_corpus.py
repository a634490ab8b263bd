"""Writes tests/corpus/invalid/*.yaml: broken and hostile stack files, each from Pulumi.dev.yaml with one
change, headed by the config key its error must name. Run it again after changing the dev stack file:
    python -m tests.corpus.make_corpus
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from sandbox.sandbox_env import dev_config

OUT = Path(__file__).with_name("invalid")


def config_key(path: tuple[Any, ...]) -> str:
    """The stack config key of the value at `path`, as errors name it: vllm-fleet:hosts[0].port."""
    return f"vllm-fleet:{path[0]}" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path[1:])


class Case(NamedTuple):
    """A stack file that sets the value at `path` to `value`, whose error must name `key` (by default the
    key of that value)."""

    name: str
    path: tuple[Any, ...]
    value: Any
    key: str = ""


# The error of a bad extra argument names the argument by its index.
FIRST_EXTRA_ARG = "vllm-fleet:models.tiny-chat-a.serving.extraArgs[0]"

CASES: list[Case] = [
    Case("port-is-a-string", ("hosts", 0, "port"), "twenty-two"),
    Case("port-out-of-range", ("hosts", 0, "port"), 70000),
    Case("gpu-count-negative", ("hosts", 0, "gpus", "count"), -1),
    Case("gpus-not-a-mapping", ("hosts", 0, "gpus"), "two"),
    Case("unknown-host-key", ("hosts", 0, "gpuCount"), 2),
    Case("unknown-top-level-key", ("deployment",), []),
    Case("host-name-with-semicolon", ("hosts", 0, "name"), "sandbox;reboot"),
    Case("host-name-dotdot", ("hosts", 0, "name"), "../sandbox"),
    Case("address-with-command", ("hosts", 0, "address"), "127.0.0.1 $(reboot)"),
    Case("user-with-backticks", ("hosts", 0, "user"), "root`id`"),
    Case("python-path-relative", ("hosts", 0, "runtime", "python"), "opt/vllm-env/bin/python3"),
    Case("python-path-dotdot", ("hosts", 0, "runtime", "python"), "/opt/../bin/python3"),
    Case("storage-path-newline", ("storage", 0, "path"), "/shared\nExecStartPre=/bin/rm -rf /"),
    Case("storage-path-space", ("storage", 0, "path"), "/shared models"),
    Case("storage-unknown-host", ("storage", 0, "host"), "elsewhere"),
    Case("storage-too-small", ("storage", 0, "capacityGb"), 0.0015),
    Case("capacity-negative", ("storage", 0, "capacityGb"), -5),
    Case("model-preset-unknown", ("models", "tiny-chat-a", "preset"), "tiny-chat-z"),
    Case("model-name-dotdot", ("models", "../etc"), {"preset": "tiny-chat-a"}),
    Case("model-repo-traversal", ("models", "tiny-chat-a", "repo"), "acme/../../etc"),
    Case("model-revision-injection", ("models", "tiny-chat-a", "revision"), "main; curl x"),
    Case("model-dir-slash", ("models", "tiny-chat-a", "dir"), "a/../../root"),
    Case("model-size-zero", ("models", "tiny-chat-a", "sizeGb"), 0),
    Case("utilization-above-one", ("models", "tiny-chat-a", "serving", "gpuMemoryUtilization"), 1.5),
    Case("extra-arg-subshell", ("models", "tiny-chat-a", "serving", "extraArgs"), ["$(reboot)"], key=FIRST_EXTRA_ARG),
    Case(
        "extra-arg-newline",
        ("models", "tiny-chat-a", "serving", "extraArgs"),
        ["--x\nExecStart=/bin/sh"],
        key=FIRST_EXTRA_ARG,
    ),
    Case("extra-env-backtick", ("models", "tiny-chat-a", "serving", "extraEnv", "VLLM_CPU_KVCACHE_SPACE"), "1`id`"),
    Case(
        "env-name-lowercase",
        ("deployments", 0, "environment"),
        {"nccl_proto": "LL"},
        key="vllm-fleet:deployments[0].environment.nccl_proto",
    ),
    Case("env-token-in-plaintext", ("deployments", 0, "environment"), {"HF_TOKEN": "hf_x"}),
    Case("deployment-unknown-host", ("deployments", 0, "host"), "gpu-99"),
    Case("deployment-unknown-model", ("deployments", 0, "model"), "glm-5"),
    Case("deployment-gpu-missing", ("deployments", 0, "gpus"), [7]),
    Case("deployment-gpus-repeat", ("deployments", 0, "gpus"), [0, 0]),
    Case("deployment-port-privileged", ("deployments", 0, "port"), 80),
    Case("deployment-served-name-quote", ("deployments", 0, "servedModelName"), "tiny'; rm -rf /"),
    Case("deployment-unit-name-bad", ("deployments", 0, "unitName"), "sshd"),
    Case("deployment-managed-flag", ("deployments", 0, "overrides", "extraArgs"), ["--port=9999"]),
    Case(
        "deployment-tp-mismatch",
        ("deployments", 0, "overrides", "tensorParallel"),
        2,
        key="vllm-fleet:deployments[0].gpus",
    ),
    Case("hf-endpoint-not-url", ("hfEndpoint",), "file:///etc/passwd"),
    Case("tier-unknown", ("tier",), "staging"),
    Case("token-in-plaintext", ("hfToken",), "hf_plaintext_token"),
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
    for name, path, value, key in CASES:
        raw = copy.deepcopy(base)
        node: Any = raw
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        node[path[-1]] = value
        write(name, key or config_key(path), raw)
    for name, key, second in PAIR_CASES:
        raw = copy.deepcopy(base)
        raw["deployments"].append(second)
        write(name, key, raw)


if __name__ == "__main__":
    main()
