"""`vllm-fleet:defaults`: what every host, storage and deployment entry has unless it says otherwise.

A fleet of equal servers repeats the same GPUs, runtime, storage layout, NCCL environment and SSH key in
every entry, and the engine hands the program the whole config in one environment variable (PULUMI_CONFIG),
which Linux caps at 128 KiB. So the stack writes the shared part once:

    vllm-fleet:defaults:
      host: {gpus: {...}, runtime: {...}}        # merged under every vllm-fleet:hosts entry
      storage: {path: /shared, capacityGb: ...}   # under every vllm-fleet:storage entry, and the storage of
                                                  # every host that no entry names (named after the host)
      deployment: {model: ..., gpus: [...], environment: {...}}   # under every vllm-fleet:deployments entry

The entry wins: a mapping (gpus, runtime, environment, overrides) merges key by key, a list or a scalar
of the entry replaces the default's. The merge runs on the raw values, before validation, and remembers
which values came from the defaults, so an error names the key the user wrote: the default's key when
the value came from there (once, however many entries inherited it), the entry's own otherwise, with the
default it was merged with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "vllm-fleet"
# Section of vllm-fleet:defaults -> the list key whose entries it goes under.
SECTIONS = {"host": "hosts", "storage": "storage", "deployment": "deployments"}
LIST_KEYS = {v: k for k, v in SECTIONS.items()}
# Keys a default cannot give: every entry needs its own name, and every storage belongs to its own host.
NOT_DEFAULTED = {"host": ("name",), "storage": ("name", "host"), "deployment": ("name",)}

Path = tuple[int | str, ...]


def key_path(path: Path) -> str:
    """`.gpus.count`, `.gpus[2]`: a path inside an entry as the stack file spells it. pydantic marks an error
    in a mapping's key, not its value, with a last part `[key]`: that is the name the user wrote."""
    return "".join(
        f"[{part}]" if isinstance(part, int) else " (the name itself)" if part == "[key]" else f".{part}"
        for part in path
    )


@dataclass
class Provenance:
    """Which values of each merged entry came from vllm-fleet:defaults, to name the key the user wrote."""

    # (list key, index) -> paths inside the entry whose whole value is the default's.
    inherited: dict[tuple[str, int], set[Path]] = field(default_factory=dict)
    # (list key, index) -> paths where the entry's mapping was merged with the default's mapping.
    merged: dict[tuple[str, int], set[Path]] = field(default_factory=dict)
    # Storage indices that no entry wrote: defaults.storage made them for the host named here.
    implied_storage: dict[int, str] = field(default_factory=dict)
    # (list key, index) -> the entry's name, for messages.
    names: dict[tuple[str, int], str] = field(default_factory=dict)

    def label(self, list_key: str, index: int) -> str:
        if list_key == "storage" and index in self.implied_storage:
            return f"the storage of host {self.implied_storage[index]!r}"
        name = self.names.get((list_key, index))
        return f"{list_key}[{index}]" + (f" {name!r}" if name else "")

    def locate(self, list_key: str, index: int, path: Path) -> tuple[str, bool]:
        """The key to name for an error at `vllm-fleet:<list_key>[index]<path>`, and whether it is the
        default's key (an error several entries share)."""
        section = LIST_KEYS.get(list_key)
        own = f"{NAMESPACE}:{list_key}[{index}]{key_path(path)}"
        if section is None:
            return own, False
        default_key = f"{NAMESPACE}:defaults.{section}"
        inherited = self.inherited.get((list_key, index), set())
        if any(path[:n] in inherited for n in range(1, len(path) + 1)):
            return default_key + key_path(path), True
        if list_key == "storage" and index in self.implied_storage:
            # The storage's name and host: what defaults.storage gives a host that no entry names.
            return default_key, True
        if path and path in self.merged.get((list_key, index), set()):
            # A mapping both gave (environment, gpus): the error may be in either part.
            return f"{own} (merged with {default_key}{key_path(path)})", False
        return own, False


def _merge(default: Mapping[str, Any], entry: Mapping[str, Any], path: Path, prov: set[Path], mixed: set[Path]) -> Any:
    merged = dict(entry)
    for key, value in default.items():
        if key not in entry:
            merged[key] = value
            prov.add((*path, key))
        elif isinstance(value, Mapping) and isinstance(entry[key], Mapping):
            mixed.add((*path, key))
            merged[key] = _merge(value, entry[key], (*path, key), prov, mixed)
    return merged


def apply_defaults(data: dict[str, Any]) -> tuple[dict[str, Any], Provenance, list[str]]:
    """The stack's values with vllm-fleet:defaults merged under every entry (the `defaults` key removed),
    where each value came from, and the problems of the defaults themselves (each naming its key)."""
    prov = Provenance()
    defaults = data.pop("defaults", None)
    if defaults is None:
        return data, prov, []
    problems: list[str] = []
    if not isinstance(defaults, Mapping):
        return data, prov, [f"{NAMESPACE}:defaults: must be a mapping with host, storage and/or deployment"]
    for section, value in defaults.items():
        if section not in SECTIONS:
            problems.append(
                f"{NAMESPACE}:defaults.{section}: unknown section; use host, storage or deployment "
                "(merged under each vllm-fleet:hosts, storage and deployments entry)"
            )
        elif not isinstance(value, Mapping):
            problems.append(f"{NAMESPACE}:defaults.{section}: must be a mapping of {SECTIONS[section]} fields")
        else:
            for key in NOT_DEFAULTED[section]:
                if key in value:
                    problems.append(
                        f"{NAMESPACE}:defaults.{section}.{key}: not a default; every entry of "
                        f"vllm-fleet:{SECTIONS[section]} gives its own"
                    )
    if problems:
        return data, prov, problems
    for section, list_key in SECTIONS.items():
        default = defaults.get(section)
        entries = data.get(list_key)
        if isinstance(entries, list):
            for i, entry in enumerate(entries):
                if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                    prov.names[(list_key, i)] = entry["name"]
        if default is None or not isinstance(entries, list):
            continue
        merged_entries = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                merged_entries.append(entry)  # pydantic names the type error
                continue
            inherited, mixed = (
                prov.inherited.setdefault((list_key, i), set()),
                prov.merged.setdefault((list_key, i), set()),
            )
            merged_entries.append(_merge(default, entry, (), inherited, mixed))
        data[list_key] = merged_entries
    store = defaults.get("storage")
    hosts = data.get("hosts")
    if store is not None and isinstance(hosts, list):
        storage = data.get("storage", [])
        if isinstance(storage, list):
            storage = data["storage"] = list(storage)
            taken = {s.get("host") for s in storage if isinstance(s, Mapping)}
            for host in hosts:
                name = host.get("name") if isinstance(host, Mapping) else None
                if isinstance(name, str) and name not in taken:
                    index = len(storage)
                    storage.append({"name": name, "host": name, **store})
                    prov.implied_storage[index] = name
                    prov.inherited[("storage", index)] = {(key,) for key in store}
    return data, prov, problems


RULE_KEY = re.compile(r"^vllm-fleet:(hosts|storage|deployments)\[(\d+)\]((?:\.[A-Za-z]+)*): ")


def annotate_rule_error(line: str, prov: Provenance) -> str:
    """A cross-key rule's message (models/rules.py), which names an entry's key: say so when the value
    there came from vllm-fleet:defaults."""
    match = RULE_KEY.match(line)
    if match is None:
        return line
    list_key, index = match.group(1), int(match.group(2))
    path: Path = tuple(p for p in match.group(3).split(".") if p)
    key, from_default = prov.locate(list_key, index, path)
    if list_key == "storage" and index in prov.implied_storage:
        key = f"{key} ({prov.label(list_key, index)})"
    elif from_default:
        key = f"{match.group(0)[:-2]} (from {key})"
    return key + ": " + line[match.end() :]
