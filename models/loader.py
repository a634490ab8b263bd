"""Turn the raw `vllm-fleet:*` config values into a validated StackConfig, or one readable error.

The same function serves `__main__.py` (values from `pulumi.Config`) and the tests (values read from the
real `Pulumi.<stack>.yaml` files), so a typo in a stack file fails in `make test` before `pulumi preview`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from models.base import to_camel
from models.config import StackConfig
from models.defaults import Provenance, annotate_rule_error, apply_defaults, key_path
from models.rules import stack_errors
from models.types import PATTERN_WORDS

NAMESPACE = "vllm-fleet"
CATALOG_PATH = Path(__file__).with_name("catalog.yaml")
# The stack keys this program reads; any other `vllm-fleet:` key is a typo worth stopping for.
KNOWN_KEYS = (
    "tier",
    "hfEndpoint",
    "defaults",
    "hosts",
    "knownHostsFile",
    "storage",
    "models",
    "adapters",
    "deployments",
    "access",
    "monitoring",
)
STRUCTURED_KEYS = ("defaults", "hosts", "storage", "models", "adapters", "deployments", "access", "monitoring")
SECRET_KEYS = ("sshPrivateKey", "hfToken", "apiKeys", "tlsPrivateKey")
# Keys read by the controller only: paths to the SSH and TLS key files (the sandbox generates both per machine).
CONTROLLER_KEYS = ("sshPrivateKeyFile", "tlsPrivateKeyFile")
# libyaml's loader where PyYAML was built with it: the catalog parses in 6 ms instead of 35 ms, on every run.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigError(Exception):
    """A stack config problem; the message names the key, the value and the fix."""


def load_catalog(path: Path = CATALOG_PATH) -> dict[str, dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=SAFE_LOADER)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the catalog must be a mapping of preset name to model fields")
    return data


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; lists and scalars in the override replace the preset's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _resolve_models(raw_models: Any, catalog: Mapping[str, Mapping[str, Any]]) -> Any:
    if not isinstance(raw_models, Mapping):
        return raw_models  # let pydantic report the type error with the key
    resolved: dict[str, Any] = {}
    problems: list[str] = []
    for name, entry in raw_models.items():
        if not isinstance(entry, Mapping):
            resolved[name] = entry
            continue
        entry = dict(entry)
        preset_name = entry.pop("preset", None)
        if preset_name is None:
            resolved[name] = {"dir": name, **entry}
            continue
        preset = catalog.get(preset_name) if isinstance(preset_name, str) else None
        if preset is None:
            problems.append(
                f"vllm-fleet:models.{name}.preset: unknown preset {preset_name!r}; use one of "
                f"{sorted(catalog)} from models/catalog.yaml, or drop `preset` and give repo, dir and sizeGb"
            )
            continue
        resolved[name] = _merge(preset, entry)
    if problems:
        raise ConfigError("\n".join(problems))
    return resolved


def _format_location(loc: tuple[int | str, ...]) -> str:
    head, *rest = loc
    return f"{NAMESPACE}:{head}{key_path(tuple(rest))}"


# What a shell, a unit file or a path would read differently: a value with one of these was refused for it.
UNSAFE_TEXT = ("'", '"', "`", "$", ";", "&", "|", "<", ">", "\\", " ", "\n", "\t", "..")
# pydantic's error types whose own message speaks of Python types, in the words of the YAML the user wrote.
TYPE_WORDS = {
    "list_type": "must be a YAML list, e.g. [0, 1]",
    "tuple_type": "must be a YAML list, e.g. [0, 1]",
    "dict_type": "must be a mapping of `key: value` lines",
    "model_type": "must be a mapping of `key: value` lines",
    "missing": "is required; add it (docs/config-reference.md lists every key)",
    "int_parsing": "must be a whole number, written without units",
    "float_parsing": "must be a number, written without units",
    "finite_number": "must be a finite number",
}


def _plain_message(item: Mapping[str, Any], message: str) -> str:
    """pydantic's message for one error, in the terms of the stack file and with the fix where one is known."""
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden":
        key = str(item["loc"][-1]) if item["loc"] else ""
        camel = to_camel(key)
        # Config keys are camelCase (models/base.py: ConfigModel): a snake_case spelling is the likely slip.
        hint = f" (config keys are camelCase: {camel}?)" if camel != key else ""
        return f"unknown key{hint}; check its spelling against docs/config-reference.md"
    if kind == "string_pattern_mismatch":
        pattern = item["ctx"]["pattern"]
        words = PATTERN_WORDS.get(pattern)
        unsafe = isinstance(value, str) and any(text in value for text in UNSAFE_TEXT)
        problem = (
            "has characters that are refused here (shell metacharacters, spaces, quotes, newlines and '..')"
            if unsafe
            else "is not in the form this key takes"
        )
        return f"{problem}: {words} (pattern {pattern})" if words else f"{problem}; it must match {pattern}"
    if kind == "missing" and item["loc"] and isinstance(item["loc"][-1], int):
        # An entry of a fixed-length list (backendPorts): the list is short, not a key unwritten.
        return "missing: the list takes more entries than it was given (docs/config-reference.md says how many)"
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f'{message}; quote it in the YAML ("{value}")'
    return TYPE_WORDS.get(kind, message)


def _format_validation_error(error: ValidationError, prov: Provenance) -> str:
    lines: list[str] = []
    # An error in a value that came from vllm-fleet:defaults is one line however many entries inherited it.
    inherited_by: dict[str, list[str]] = {}
    for item in error.errors():
        loc = item["loc"]
        message = item["msg"].removeprefix("Value error, ")
        if not loc:
            # An error of the config as a whole names its keys itself.
            lines.append(message)
            continue
        key = _format_location(loc)
        from_default = False
        if len(loc) >= 2 and isinstance(loc[0], str) and isinstance(loc[1], int):
            key, from_default = prov.locate(loc[0], loc[1], tuple(loc[2:]))
        value = item.get("input")
        shown = "" if isinstance(value, Mapping | list) else f" (got {value!r})"
        message = _plain_message(item, message)
        line = f"{key}: {message}{shown}"
        if from_default:
            assert isinstance(loc[0], str) and isinstance(loc[1], int)
            if line not in inherited_by:
                lines.append(line)
            inherited_by.setdefault(line, []).append(prov.label(loc[0], loc[1]))
        else:
            lines.append(line)
    return "\n".join(_inherited_note(line, inherited_by.get(line)) for line in lines)


def _inherited_note(line: str, entries: list[str] | None) -> str:
    if not entries:
        return line
    more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
    return f"{line} (inherited by {entries[0]}{more})"


def _encrypted(value: Any) -> bool:
    """An encrypted config value: `{secure: ...}`, or an object whose every leaf is one (`config set --path`)."""
    if not isinstance(value, Mapping) or not value:
        return False
    return "secure" in value or all(_encrypted(v) for v in value.values())


def parse_stack_config(raw: Mapping[str, Any], catalog: Mapping[str, Mapping[str, Any]] | None = None) -> StackConfig:
    """Validate the `vllm-fleet:` values (namespace stripped) of one stack."""
    unknown = sorted(set(raw) - set(KNOWN_KEYS) - set(SECRET_KEYS) - set(CONTROLLER_KEYS))
    if unknown:
        raise ConfigError(
            "\n".join(
                f"{NAMESPACE}:{key}: unknown config key; known keys are {', '.join(KNOWN_KEYS)}" for key in unknown
            )
        )
    for key in SECRET_KEYS:
        value = raw.get(key)
        if value is not None and not _encrypted(value):
            raise ConfigError(
                f"{NAMESPACE}:{key}: stored in plaintext; remove it and run "
                f"`pulumi config set --secret {NAMESPACE}:{key}` so it is encrypted"
            )
    data = {key: raw[key] for key in KNOWN_KEYS if key in raw}
    # vllm-fleet:defaults merged under every host, storage and deployment entry (models/defaults.py).
    data, provenance, problems = apply_defaults(data)
    if problems:
        raise ConfigError("\n".join(problems))
    data["models"] = _resolve_models(data.get("models", {}), catalog if catalog is not None else load_catalog())
    try:
        # By the stack file's camelCase keys alone: the models' Python names are for the code that builds them.
        stack = StackConfig.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, provenance)) from None
    # The rules across keys, once every key is valid on its own; they already name their keys (the
    # default's too, when the value came from vllm-fleet:defaults).
    errors = [annotate_rule_error(line, provenance) for line in stack_errors(stack)]
    if errors:
        raise ConfigError("\n".join(errors))
    return stack


def read_key_file(key: str, value: str, made_by: str) -> str:
    """The text of a key file a `...File` config key names on this machine; a missing one is refused with
    the key and the fix (the sandbox makes its own: `made_by` says what)."""
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"{NAMESPACE}:{key}: {value} does not exist on this machine; for the dev sandbox run "
            f"`sandbox/host.sh up` ({made_by}), otherwise fix the path"
        )
    return path.read_text()


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `vllm-fleet:` keys of a `Pulumi.<stack>.yaml`, namespace stripped, as the engine passes them."""
    with path.open(encoding="utf-8") as handle:
        document = yaml.safe_load(handle) or {}
    config = document.get("config") or {}
    prefix = NAMESPACE + ":"
    return {key[len(prefix) :]: value for key, value in config.items() if key.startswith(prefix)}


def load_stack_file(path: Path) -> StackConfig:
    return parse_stack_config(read_stack_file(path))
