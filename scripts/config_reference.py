"""docs/config-reference.md, generated from the config models so that it cannot drift from them.

    .venv/bin/python -m scripts.config_reference > docs/config-reference.md      (or: make config-reference)

Every key of `Pulumi.<stack>.yaml` that `models.config.StackConfig` validates, with its type, default and
rules, is read from pydantic's JSON schema of that model (the types, bounds, patterns and enums pydantic
itself enforces); what a key means comes from the model too: a field's `Field(description=...)` (pydantic puts
it in the schema), else, for a key that holds a model, that model's class docstring; a field with neither stops
the script (a comment above a field is for the code's readers and never reaches the page). The keys the
loader reads outside StackConfig (the secrets, the key files, `defaults`, a model's `preset`) are described
below by hand, and a key of the loader's lists without a description here stops the script.
tests/test_config_reference.py compares the output with the committed page.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from models import config
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
# Fields whose children are another model's, said once there: a deployment's overrides are ServingDefaults'.
NOT_EXPANDED = {"ServingOverrides"}


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


def one_line(text: str) -> str:
    """Text for one cell of a Markdown table: one line, its pipes escaped, and outside code spans its angle
    brackets too (`http://<host>:<port>` would otherwise be read as HTML tags and vanish)."""
    spans = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(span if n % 2 else span.replace("<", "&lt;").replace(">", "&gt;") for n, span in enumerate(spans))


class Reference:
    def __init__(self) -> None:
        self.schema = stack_schema()
        self.defs: dict[str, Any] = self.schema.get("$defs", {})
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
            f"config_reference: no description for {reference.undescribed}: give the field "
            '`Field(description="...")` in its model (or, where it holds a model, a docstring to that model\'s '
            "class); a comment above the field does not reach the page"
        )
    lines += ["", f"## {NAMESPACE}:defaults", "", *textwrap.wrap(DEFAULTS_TEXT, 110), ""]
    lines += ["## Estimates the rules use", "", *textwrap.wrap(ESTIMATES_TEXT, 110)]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
