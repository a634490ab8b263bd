"""docs/config-reference.md, generated from the config models so that it cannot drift from them.

    .venv/bin/python -m scripts.config_reference > docs/config-reference.md      (or: make config-reference)

Every key of `Pulumi.<stack>.yaml` that `models.config.StackConfig` validates, with its type, default and
rules, is read from pydantic's JSON schema of that model (the types, bounds, patterns and enums pydantic
itself enforces); what a key means comes from the model: a field's `description`, else the comment lines
written above the field in its class, else the class's docstring for a key that holds a model. The keys the
loader reads outside StackConfig (the secrets, the key files, `defaults`, a model's `preset`) are described
below by hand, and a key of the loader's lists without a description here stops the script.
tests/test_config_reference.py compares the output with the committed page.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from models import access, adapters, config, hosts, monitoring
from models.base import to_camel
from models.loader import CONTROLLER_KEYS, KNOWN_KEYS, NAMESPACE, SECRET_KEYS, load_catalog

# What each top-level key is for, in a line (a key's fields say the rest). Every key of the loader's lists
# needs one: the script refuses to write a page that leaves one out.
TOP_LEVEL = {
    "tier": "`production` (pinned revisions, pinned host keys and a shared backend required) or `development`",
    "hfEndpoint": "Hugging Face endpoint or mirror (`HF_ENDPOINT` on the hosts); unset means the Hub",
    "defaults": "what hosts, storage and deployments share, written once (see below)",
    "hosts": "the GPU servers, one entry each",
    "knownHostsFile": "the hosts' SSH host keys, an OpenSSH known_hosts file ([host-keys.md](host-keys.md))",
    "storage": "where each host keeps model files, one entry per host",
    "models": "the models that may be on disk, by name",
    "adapters": "LoRA adapters by the name clients send ([adapters.md](adapters.md))",
    "deployments": "what serves where: a model on a host's GPUs behind its front door",
    "access": "who may call every deployment, enforced by the front door ([access.md](access.md))",
    "monitoring": "thresholds of the generated Prometheus rules ([monitoring.md](monitoring.md))",
}
# Keys the loader reads that are no field of StackConfig: secrets travel as Pulumi outputs, never in a model.
OUTSIDE_THE_MODEL = {
    "sshPrivateKey": "secret: the SSH key the controller logs in with (`pulumi config set --secret "
    "vllm-fleet:sshPrivateKey < KEY`)",
    "sshPrivateKeyFile": "instead of the secret, a key file on this machine (the sandbox generates one)",
    "hfToken": "secret: the Hugging Face token (`pulumi config set --secret vllm-fleet:hfToken`, which "
    "prompts); it reaches hosts on stdin and lands only in a 0600 file",
    "apiKeys": "secret: client name -> API key (16-256 of `A-Za-z0-9._-`), one `pulumi config set --secret "
    "--path 'vllm-fleet:apiKeys.<client>' < FILE` each; every `/v1/` request needs one of them",
    "tlsPrivateKey": "secret: the private key of `access.tls` (`pulumi config set --secret "
    "vllm-fleet:tlsPrivateKey < KEY.pem`)",
    "tlsPrivateKeyFile": "instead of the secret, a key file on this machine (the sandbox generates one)",
}
DEFAULTS_TEXT = (
    "`vllm-fleet:defaults` takes three entries, `host`, `storage` and `deployment`, each with any fields of a "
    "`hosts[]`, `storage[]` or `deployments[]` entry but `name` (and a storage's `host`). They are merged under "
    "every entry before validation, the entry winning (a mapping merges key by key, a list or a scalar "
    "replaces the default's); `storage` also gives each host that no storage entry names a storage of its own, "
    "named after the host ([fleets.md](fleets.md))."
)
ESTIMATES_TEXT = (
    "Weights take their on-disk size in GPU memory, split over tensor x pipeline "
    "parallel GPUs, and at least 10% of `tensorParallel x pipelineParallel x memoryGib x gpuMemoryUtilization` "
    "must remain for the KV cache (the GPUs one engine uses: a blue/green `gpus` list of twice as many does not "
    "raise it). Models wanted on a storage (served there, or `keep: true`) must fit `capacityGb - freeMarginGb`. "
    "The unit's start timeout is 600 s plus 6 s per GB of model unless `startTimeoutSeconds` says otherwise."
)
# What a field means where its model says nothing of it (no description, no comment above it). A field
# that has neither, nor an entry here, stops the script: a new key comes with its line on the page.
DESCRIBED = {
    "hosts[].name": "the host's name, which storage and deployments refer to",
    "hosts[].address": "the address the controller reaches the host's sshd at (an IP address or a DNS name)",
    "hosts[].port": "sshd's port",
    "hosts[].user": "the user the controller logs in as over SSH",
    "hosts[].hostKey": "the host's SSH key as `ssh-keyscan -t ed25519 ADDRESS` prints it; wins over "
    "`knownHostsFile` ([host-keys.md](host-keys.md))",
    "hosts[].gpus.count": "how many GPUs the host has",
    "hosts[].gpus.model": "the GPUs' model, as nvidia-smi names it",
    "hosts[].gpus.memoryGib": "each GPU's memory, for the rule that the weights and a KV cache fit",
    "hosts[].gpus.interconnect": "how the GPUs talk to each other",
    "hosts[].gpus.computeCapability": "the GPUs' CUDA compute capability (e.g. `12.0`)",
    "hosts[].runtime.python": "the python of the host's vLLM venv; the engines and vllm-args-check run with it",
    "hosts[].runtime.vllmVersion": "optional: the vLLM release the venv must have (an assertion; unset, the "
    "survey reads it and version-dependent rendering follows that reading)",
    "hosts[].dialTimeoutSeconds": "seconds one SSH connection attempt may take",
    "hosts[].cluster.address": "this host's address on the private network (`VLLM_HOST_IP`)",
    "hosts[].cluster.interface": "that network's interface (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`)",
    "storage[].name": "the storage's name",
    "storage[].host": "the host it belongs to (one storage per host)",
    "storage[].path": "where models live on the host (e.g. `/shared`)",
    "storage[].hfHome": "`HF_HOME` for downloads; default `<path>/huggingface`",
    "storage[].capacityGb": "the storage's size: the models wanted there must fit it, less `freeMarginGb`",
    "storage[].freeMarginGb": "space always left free",
    "storage[].owner": "the Unix user that owns the model files",
    "models.<name>.repo": "the Hugging Face repository",
    "models.<name>.revision": "the commit to download; a production stack needs the 40-hex commit, not a branch",
    "models.<name>.dir": "its folder under the storage's path",
    "models.<name>.sizeGb": "its size on disk, for the disk and GPU memory rules",
    "models.<name>.shards": "how many safetensors files it has",
    "models.<name>.quantization": "a label for people (e.g. `int4`)",
    "models.<name>.architecture": "a label for people (e.g. `DeepseekV3ForCausalLM`)",
    "models.<name>.notes": "free text for people",
    "models.<name>.serving.tensorParallel": "vLLM's `--tensor-parallel-size`",
    "models.<name>.serving.pipelineParallel": "vLLM's `--pipeline-parallel-size`",
    "models.<name>.serving.expertParallel": "vLLM's `--enable-expert-parallel`",
    "models.<name>.serving.maxModelLen": "vLLM's `--max-model-len`; unset, the model's own",
    "models.<name>.serving.gpuMemoryUtilization": "vLLM's `--gpu-memory-utilization`",
    "models.<name>.serving.toolCallParser": "vLLM's `--tool-call-parser`",
    "models.<name>.serving.reasoningParser": "vLLM's `--reasoning-parser`",
    "models.<name>.serving.enableAutoToolChoice": "vLLM's `--enable-auto-tool-choice`",
    "models.<name>.serving.trustRemoteCode": "vLLM's `--trust-remote-code`",
    "models.<name>.serving.attentionBackend": "vLLM's attention backend (a flag, or `VLLM_ATTENTION_BACKEND` "
    "before vLLM 0.12)",
    "models.<name>.serving.loadFormat": "vLLM's `--load-format`",
    "models.<name>.serving.modelLoaderExtraConfig": "vLLM's `--model-loader-extra-config`, a JSON object",
    "models.<name>.serving.extraArgs": "more vLLM flags; the ones the project manages are refused, naming the key "
    "that sets them",
    "models.<name>.serving.extraEnv": "more environment of the engine (`VLLM_*` and others); managed ones are refused",
    "models.<name>.serving.lora.maxLoraRank": "vLLM's `--max-lora-rank`: the largest rank an adapter may have",
    "models.<name>.serving.lora.maxCpuLoras": "vLLM's `--max-cpu-loras`",
    "deployments[].name": "the deployment's name (its steps, its state on the host, its unit by default)",
    "deployments[].host": "the host it serves on (the head, for a model across hosts)",
    "deployments[].model": "the name of a `vllm-fleet:models` entry; changing it is a swap ([swaps.md](swaps.md))",
    "deployments[].servedModelName": "the model id clients send; default the model's name",
    "deployments[].unitName": "the systemd unit's name (`vllm-...`); default from the model's name; the name "
    "of a hand-made unit to adopt it in place ([first-deployment.md](first-deployment.md))",
    "deployments[].environment": "more environment of the engine (e.g. NCCL tuning)",
    "deployments[].overrides": "any field of the model's `serving`, for this deployment only",
    "deployments[].gpuReleaseThresholdMib": "a GPU counts as free below this much used memory",
    "deployments[].rollout.group": "the group's name: deployments that serve the same thing on several hosts",
    "deployments[].distributedBackend": "a model across hosts: vLLM's own multi-node engine (`mp`); `ray` is "
    "refused by the preview for now",
    "deployments[].smokeBenchmark.requests": "how many completions",
    "deployments[].smokeBenchmark.inputLen": "tokens of each random prompt",
    "deployments[].smokeBenchmark.outputLen": "tokens each completion generates",
    "deployments[].smokeBenchmark.concurrency": "how many at once",
    "access.tls.certificateFile": "the PEM chain, server certificate first, a file beside the stack file",
    "monitoring.waitingForSeconds": "how long requests must wait above `waitingRequests` before the alert fires",
    "monitoring.kvCacheForSeconds": "how long the KV cache must stay above `kvCacheFraction` before the alert fires",
    "adapters.<name>.repo": "the Hugging Face repository of the adapter",
    "adapters.<name>.revision": "the commit to download; a production stack needs the 40-hex commit",
    "adapters.<name>.sizeGb": "its size on disk, counted in the storage's capacity",
    "adapters.<name>.keep": "keep its files when no deployment serves it",
}
# Fields whose children are another model's, said once there: a deployment's overrides are ServingDefaults'.
NOT_EXPANDED = {"ServingOverrides"}
MODULES = (config, hosts, access, adapters, monitoring)
FIELD_LINE = re.compile(r"^ {4}(\w+): ")


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    rules: str
    description: str


def stack_schema() -> dict[str, Any]:
    """pydantic's JSON schema of the stack's config, by the keys the stack file spells (the models' aliases)."""
    return config.StackConfig.model_json_schema(by_alias=True, mode="validation")


def model_classes() -> dict[str, type]:
    """The config models by class name, as the schema's `$defs` name them."""
    found: dict[str, type] = {}
    for module in MODULES:
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                found[name] = value
    return found


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment lines, written above it in the class body (or after it on its line), by the key
    the stack file spells it with."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if line.startswith("    #") and not line.startswith("     "):
            above.append(stripped.lstrip("# ").rstrip())
            continue
        match = FIELD_LINE.match(line)
        if match:
            trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join([*above, trailing]).strip()
            if text:
                comments[to_camel(match.group(1))] = text
        above = []
    return comments


def one_line(text: str) -> str:
    """Text for one cell of a Markdown table: one line, its pipes escaped, and outside code spans its angle
    brackets too (`http://<host>:<port>` would otherwise be read as HTML tags and vanish)."""
    spans = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(span if n % 2 else span.replace("<", "&lt;").replace(">", "&gt;") for n, span in enumerate(spans))


class Reference:
    def __init__(self) -> None:
        self.schema = stack_schema()
        self.defs: dict[str, Any] = self.schema.get("$defs", {})
        self.classes = model_classes()
        self.comments = {name: field_comments(cls) for name, cls in self.classes.items()}
        self.undescribed: list[str] = []

    def resolve(self, node: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The schema a node stands for (its `$ref` followed) and the name of the definition, if any."""
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            return self.defs[name], name
        return node, None

    def without_null(self, node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        options = node.get("anyOf")
        if options and any(o.get("type") == "null" for o in options):
            rest = [o for o in options if o.get("type") != "null"]
            if len(rest) == 1:
                return {**rest[0], **{k: v for k, v in node.items() if k != "anyOf"}}, True
        return node, False

    def type_name(self, node: dict[str, Any]) -> str:
        node, nullable = self.without_null(node)
        target, name = self.resolve(node)
        if name is not None:
            text = "enum" if "enum" in target else f"`{name}`"
        elif "anyOf" in node:
            text = " or ".join(self.type_name(option) for option in node["anyOf"])
        else:
            kind = node.get("type", "any")
            if kind == "array":
                items = node.get("items") or (node.get("prefixItems") or [{}])[0]
                text = f"list of {self.type_name(items)}"
            elif kind == "object":
                values = node.get("additionalProperties") or next(
                    iter(node.get("patternProperties", {}).values()), None
                )
                text = f"mapping of name to {self.type_name(values)}" if isinstance(values, dict) else "mapping"
            else:
                text = {"integer": "int", "number": "number", "boolean": "bool", "string": "string"}.get(kind, kind)
        return f"{text} or null" if nullable else text

    def rules(self, node: dict[str, Any]) -> str:
        node, _ = self.without_null(node)
        target, _name = self.resolve(node)
        parts: list[str] = []
        if "enum" in target:
            parts.append("one of " + ", ".join(f"`{value}`" for value in target["enum"]))
        # JSON schema's names, and pydantic's own where a validator runs before the constraint (the models'
        # Int and Float refuse YAML's true and false first): pydantic then writes `ge`, not `minimum`.
        for keys, word in (
            (("minimum", "ge"), "≥"),
            (("exclusiveMinimum", "gt"), "more than"),
            (("maximum", "le"), "≤"),
            (("exclusiveMaximum", "lt"), "less than"),
            (("minLength", "min_length"), "length ≥"),
            (("maxLength", "max_length"), "length ≤"),
            (("minItems",), "items ≥"),
            (("maxItems",), "items ≤"),
        ):
            for key in keys:
                if key in node:
                    parts.append(f"{word} {node[key]}")
        if "pattern" in node:
            parts.append(f"matches `{node['pattern']}`")
        items = node.get("items")
        if isinstance(items, dict) and node.get("type") == "array":
            inner = self.rules(items)
            if inner:
                parts.append(f"each {inner}")
        for pattern in node.get("patternProperties", {}):
            parts.append(f"names match `{pattern}`")
        return "; ".join(parts)

    def default(self, node: dict[str, Any], required: bool) -> str:
        if required:
            return "required"
        if "default" not in node:
            return "-"
        value = node["default"]
        if isinstance(value, dict) and value:
            # A model's default: its fields' own (an override left unset is none).
            return "see its fields" if any(v is not None for v in value.values()) else "none set"
        return f"`{json.dumps(value)}`"

    def description(self, path: str, owner: str | None, key: str, node: dict[str, Any]) -> str:
        if owner == "StackConfig":
            return TOP_LEVEL[key]
        if node.get("description"):
            return one_line(node["description"])
        comment = self.comments.get(owner or "", {}).get(key)
        if comment:
            return one_line(comment)
        described = DESCRIBED.get(path.removeprefix(f"{NAMESPACE}:"))
        if described:
            return one_line(described)
        target, name = self.resolve(self.without_null(node)[0])
        if name is not None and target.get("description"):
            return one_line(target["description"])
        self.undescribed.append(path)
        return ""

    def rows(self, path: str, owner: str | None, key: str, node: dict[str, Any], required: bool) -> Iterator[Row]:
        yield Row(
            path=path,
            type=self.type_name(node),
            default=self.default(node, required),
            rules=self.rules(node),
            description=self.description(path, owner, key, node),
        )
        yield from self.children(path, node)

    def children(self, path: str, node: dict[str, Any]) -> Iterator[Row]:
        node, _ = self.without_null(node)
        target, name = self.resolve(node)
        if name in NOT_EXPANDED:
            return
        if name is not None and "properties" in target:
            required = set(target.get("required", ()))
            for key, child in target["properties"].items():
                yield from self.rows(f"{path}.{key}", name, key, child, key in required)
        elif node.get("type") == "array" and isinstance(node.get("items"), dict):
            yield from self.children(f"{path}[]", node["items"])
        elif node.get("type") == "object":
            values = node.get("additionalProperties") or next(iter(node.get("patternProperties", {}).values()), None)
            if isinstance(values, dict):
                yield from self.children(f"{path}.<name>", values)

    def top_level(self) -> list[tuple[str, list[Row]]]:
        properties: dict[str, Any] = self.schema["properties"]
        required = set(self.schema.get("required", ()))
        sections = []
        for key, node in properties.items():
            rows = list(self.rows(f"{NAMESPACE}:{key}", "StackConfig", key, node, key in required))
            if key == "models":
                presets = ", ".join(f"`{name}`" for name in sorted(load_catalog()))
                preset = Row(
                    f"{NAMESPACE}:models.<name>.preset",
                    "string",
                    "-",
                    f"one of {presets}",
                    "a preset of models/catalog.yaml: its fields, under what the entry gives; without one, "
                    "give `repo`, `dir` and `sizeGb`",
                )
                rows.insert(1, preset)
            sections.append((key, rows))
        return sections


def check_coverage(reference: Reference) -> None:
    """Every key the loader reads is on the page: a field of StackConfig or one described by hand here."""
    in_model = set(reference.schema["properties"])
    loader_keys = set(KNOWN_KEYS) | set(SECRET_KEYS) | set(CONTROLLER_KEYS)
    missing = sorted(k for k in loader_keys - in_model if k not in OUTSIDE_THE_MODEL and k != "defaults")
    undescribed = sorted(k for k in in_model if k not in TOP_LEVEL)
    if missing or undescribed:
        raise SystemExit(
            f"config_reference: keys without a description: {missing + undescribed}; add them to TOP_LEVEL or "
            "OUTSIDE_THE_MODEL in scripts/config_reference.py"
        )


def table(rows: list[Row]) -> list[str]:
    lines = ["| key | type | default | rules | what |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| `{row.path}` | {row.type} | {row.default} | {one_line(row.rules)} | {row.description} |")
    return lines


def render() -> str:
    reference = Reference()
    check_coverage(reference)
    lines = [
        "# Config reference",
        "",
        "<!-- Generated by `python -m scripts.config_reference` (make config-reference) from the config models;",
        "     do not edit: tests/test_config_reference.py compares this page with the models. -->",
        "",
        "Every key of `Pulumi.<stack>.yaml`, validated before anything touches a host; an error names the key",
        "and the fix. `[]` stands for every entry of a list, `<name>` for every entry of a mapping. Types, defaults",
        "and rules are pydantic's, from `models/`; a rule across keys (ports, GPUs, memory and disk budgets) is",
        "in `models/rules.py`.",
        "",
        "| key | what |",
        "| --- | --- |",
    ]
    for key in TOP_LEVEL:
        lines.append(f"| [`{NAMESPACE}:{key}`](#{NAMESPACE}{key.lower()}) | {TOP_LEVEL[key]} |")
    for key, text in OUTSIDE_THE_MODEL.items():
        lines.append(f"| `{NAMESPACE}:{key}` | {text} |")
    for key, rows in reference.top_level():
        lines += ["", f"## {NAMESPACE}:{key}", "", *table(rows)]
    if reference.undescribed:
        raise SystemExit(
            f"config_reference: no description for {reference.undescribed}: give the field a comment in its model "
            "(or a Field description), or an entry in DESCRIBED of scripts/config_reference.py"
        )
    lines += ["", f"## {NAMESPACE}:defaults", "", *textwrap.wrap(DEFAULTS_TEXT, 110), ""]
    lines += ["## Estimates the rules use", "", *textwrap.wrap(ESTIMATES_TEXT, 110)]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
