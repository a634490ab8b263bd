#!/usr/bin/env python3
"""vllm-fleet vllm-args-check: have the host's own vLLM parse a deployment's launch before anything stops.

A flag that one vLLM release accepts can be unknown to another (`--disable-log-requests` was removed in
v0.12, `--attention-backend` came with it), and vLLM rejects a bad flag only when it starts, that is,
after the old model was stopped. This tool runs in the unit step, while the old model still serves: it
imports the vLLM of the unit's Python, builds the same argument parser `python -m
vllm.entrypoints.openai.api_server` builds, parses the rendered arguments and runs vLLM's own check of
the parsed serve arguments. On failure it names the flag, the stack config key it came from and the
vLLM version, and exits 1. It loads no model and touches no GPU.

Importing vLLM takes seconds (7 s on the sandbox, more on a busy host), on every swap. An accepted
launch is remembered in ARGS_CHECK_CACHE by a digest of what decides the verdict: this Python, the
installed vLLM (its version and the digest of its installed-files list, read from its metadata without
importing it), the arguments and the VLLM_* environment of the check. What only names the model (the
values of --model, the positional model and --served-model-name, and the unit's name) is left out: the
parser takes any string there and vLLM's check of the serve arguments reads none of them (it loads no
model), so a swap to another model with the same flags, the commonest swap, needs no import. Any other
change (another vLLM, a new flag or value) checks afresh, and a rejection is never remembered.

It also judges the VLLM_* variables the unit sets that vLLM reads only at start (the attention backend:
one this vLLM has, and a variable it still reads).

Usage: vllm-args-check --spec FILE, where FILE is JSON {"unit": ..., "args": [...], "origins": {flag: key},
"environment": {VLLM_*: value}} (args are those after `-m vllm.entrypoints.openai.api_server`). Standard
library only, besides vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.contract import STATE_DIR
from host.swap_files import write_file
from host.vllm_parser import host_vllm, installed_vllm

# Accepted launches, one file each, named by verdict_key.
ARGS_CHECK_CACHE = f"{STATE_DIR}/args-check"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str


def flags_named(error: str, args: Sequence[str]) -> list[str]:
    """The flags of `args` that an argparse error message names, in the order of `args`."""
    named = []
    for arg in args:
        if not arg.startswith("-"):
            continue
        flag = arg.split("=", 1)[0]
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", error) and flag not in named:
            named.append(flag)
    return named


def explain(version: str, unit: str, error: str, args: Sequence[str], origins: Mapping[str, str]) -> str:
    error = " ".join(error.split())
    flags = flags_named(error, args)
    if flags:
        blamed = "; ".join(f"{flag} (from {origins.get(flag, 'the deployment serving config')})" for flag in flags)
        return (
            f"vLLM {version} on this host rejects the launch of {unit}: {blamed}: {error}. "
            "Change that config key (this host's vLLM decides which flags exist); nothing was stopped."
        )
    return f"vLLM {version} on this host rejects the launch of {unit}: {error}. Nothing was stopped."


def check(
    args: Sequence[str],
    unit: str,
    origins: Mapping[str, str],
    version: str,
    make_parser: Callable[[], argparse.ArgumentParser],
    validate: Callable[[argparse.Namespace], Any] | None,
) -> Verdict:
    parser = make_parser()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            namespace = parser.parse_args(list(args))
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return Verdict(False, f"vLLM {version} printed help instead of parsing the launch of {unit}")
        lines = [line for line in captured.getvalue().splitlines() if "error:" in line]
        error = lines[-1].split("error:", 1)[1].strip() if lines else captured.getvalue().strip()
        return Verdict(False, explain(version, unit, error, args, origins))
    if validate is not None:
        try:
            validate(namespace)
        except Exception as error:  # vLLM raises TypeError/ValueError/its own errors here
            return Verdict(False, explain(version, unit, f"{type(error).__name__}: {error}", args, origins))
    return Verdict(True, f"vLLM {version} accepts the launch of {unit} ({len(args)} arguments)")


# Where vLLM keeps the attention backends VLLM_ATTENTION_BACKEND may name, newest layout first.
BACKEND_ENUMS = (
    ("vllm.v1.attention.backends.registry", "AttentionBackendEnum"),
    ("vllm.attention.backends.registry", "AttentionBackendEnum"),
    ("vllm.attention.backends.registry", "_Backend"),
    ("vllm.platforms.interface", "_Backend"),
)


def check_environment(
    environment: Mapping[str, str],
    unit: str,
    origins: Mapping[str, str],
    version: str,
    backends: Sequence[str] | None,
    known_variables: Sequence[str] | None,
) -> Verdict:
    """The VLLM_* variables the unit sets that this vLLM judges only when it starts: the attention backend
    must be one it has, and it must still read the variable (releases with --attention-backend warn and
    later drop it). `backends`/`known_variables` None: this vLLM does not say, so nothing is refused."""
    backend = environment.get("VLLM_ATTENTION_BACKEND")
    if backend is None:
        return Verdict(True, "")
    where = origins.get("VLLM_ATTENTION_BACKEND", "the deployment serving config")
    if known_variables is not None and "VLLM_ATTENTION_BACKEND" not in known_variables:
        return Verdict(
            False,
            f"vLLM {version} on this host no longer reads VLLM_ATTENTION_BACKEND (from {where}), which the unit {unit} "
            "sets: this release takes the backend as --attention-backend (serving.attentionBackend, with the host's "
            "vLLM version known). Nothing was stopped.",
        )
    if backends is not None and backend not in backends:
        return Verdict(
            False,
            f"vLLM {version} on this host has no attention backend {backend!r} (VLLM_ATTENTION_BACKEND, from {where}) "
            f"for the unit {unit}; it has {', '.join(sorted(backends))}. Nothing was stopped.",
        )
    return Verdict(True, f"VLLM_ATTENTION_BACKEND={backend} is a backend of vLLM {version}")


def host_backends() -> tuple[list[str] | None, list[str] | None]:
    """The attention backends this vLLM has and the environment variables it reads (None: cannot tell)."""
    backends = None
    for module_name, attribute in BACKEND_ENUMS:
        try:
            backends = list(getattr(importlib.import_module(module_name), attribute).__members__)
            break
        except (ImportError, AttributeError):
            continue
    try:
        known = list(importlib.import_module("vllm.envs").environment_variables)
    except (ImportError, AttributeError):
        known = None
    return backends, known


# The flags whose values only name what is served (see the module's docstring).
NAMING_FLAGS = ("--model", "--served-model-name")
NAMED = "<named>"


def without_names(args: Sequence[str]) -> list[str]:
    """`args` with each value of NAMING_FLAGS (`--served-model-name` takes several) and a leading positional
    model (`serve MODEL ...`) replaced by one placeholder: what the verdict does not depend on."""
    kept: list[str] = []
    naming = not args or not args[0].startswith("-")
    for arg in args:
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            naming = flag in NAMING_FLAGS and "=" not in arg
            # `--model=/x` and `--model /x` parse alike: both are kept as `--model <named>`.
            kept += [flag, NAMED] if flag in NAMING_FLAGS and "=" in arg else [arg]
        elif naming:
            if kept[-1:] != [NAMED]:
                kept.append(NAMED)
        else:
            kept.append(arg)
    return kept


def verdict_key(spec: Mapping[str, Any], installed: tuple[str, str], python: str, env: Mapping[str, str]) -> str:
    """What decides the verdict, as one digest: the Python, the vLLM, the launch's flags and the VLLM_*
    environment (not the unit's name, the model's or the names it is served under)."""
    material = {
        "python": python,
        "vllm": list(installed),
        "args": without_names(spec["args"]),
        "environment": {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_")},
        # The unit's own VLLM_* variables the check judges (the attention backend).
        "unitEnvironment": dict(sorted((spec.get("environment") or {}).items())),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def cached_verdict(cache: Path, key: str, unit: str) -> Verdict | None:
    try:
        data = json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))
        return Verdict(
            True,
            f"vLLM {data['version']} accepts the launch of {unit} (remembered from {data['at']}, when it accepted "
            f"that of {data['unit']}: same vLLM, flags and environment)",
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(cache: Path, key: str, verdict: Verdict, version: str, unit: str) -> None:
    """Keep an accepted verdict; a cache that cannot be written only costs the next check its import."""
    if not verdict.accepted:
        return
    try:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        write_file(cache / f"{key}.json", json.dumps({"version": version, "unit": unit, "at": at}))
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--spec", required=True, help="JSON file with unit, args and origins")
    cli.add_argument("--cache", default=ARGS_CHECK_CACHE, help="directory of remembered accepted launches")
    options = cli.parse_args(argv)
    with open(options.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    cache = Path(options.cache)
    installed = installed_vllm()
    key = verdict_key(spec, installed, sys.executable, os.environ) if installed is not None else None
    if key is not None and (remembered := cached_verdict(cache, key, spec["unit"])) is not None:
        print(remembered.message)
        return 0
    # Parsing computes nothing: keep the OpenMP runtime that importing vLLM loads from probing the
    # machine's topology by pinning itself to each CPU in turn (Intel OpenMP's default), which on a host
    # whose CPUs a serving engine keeps busy was seen to hang the import in sched_setaffinity. Nor may it
    # bind this process to one CPU (GNU OpenMP's OMP_PROC_BIND): seen here pinned to the core a CPU
    # engine spins on, starved for 17 minutes, unkillable because it could not run its own exit.
    os.environ.setdefault("KMP_AFFINITY", "disabled")
    os.environ.setdefault("OMP_PROC_BIND", "false")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        version, make_parser, validate = host_vllm()
    except ImportError as error:
        print(f"vllm-args-check: cannot load this host's vLLM argument parser: {error}", file=sys.stderr)
        return 1
    verdict = check(spec["args"], spec["unit"], spec.get("origins", {}), version, make_parser, validate)
    if verdict.accepted and spec.get("environment"):
        backends, known = host_backends()
        environment = check_environment(
            spec["environment"], spec["unit"], spec.get("origins", {}), version, backends, known
        )
        if not environment.accepted or environment.message:
            verdict = Verdict(
                environment.accepted,
                verdict.message + "; " + environment.message if environment.accepted else environment.message,
            )
    if key is not None:
        remember(cache, key, verdict, version, spec["unit"])
    print(verdict.message, file=sys.stdout if verdict.accepted else sys.stderr)
    return 0 if verdict.accepted else 1


if __name__ == "__main__":
    sys.exit(main())
