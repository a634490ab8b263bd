#!/usr/bin/env python3
"""Whether two vLLM launches are the same engine, as the host's own vLLM reads them.

A launch (a command line and its environment, as a unit runs it) is read by the host's vLLM argument
parser, the one `python -m vllm.entrypoints.openai.api_server` builds (host/vllm_parser.host_vllm),
defaults applied: `--max_model_len=512` and `--max-model-len 512`, `-tp 1` and nothing, a written-out
`--gpu-memory-utilization 0.9` and vLLM's default, `vllm serve <path>` and `python -m
vllm.entrypoints.openai.api_server --model <path>` all parse to the same engine arguments. The VLLM_*
variables it sets are read by vLLM's own table of them (`vllm.envs.environment_variables`), so a default
spelled out is no difference either. The parsed form (`ParsedLaunch`) keeps only what differs from
vLLM's defaults, with those defaults and the flag names its values need for a message, and the model
path as the directory it resolves to on the host.

Importing vLLM takes seconds. A parsed launch is kept in PARSED_CACHE, one file per digest of this
Python, the installed vLLM (version and the digest of its installed-files list, read from its metadata
without importing it), the command line and its environment: a survey whose launches were parsed before
imports no vLLM. The first one after a change (a new launch, another vLLM) parses, and says how long it
took (`Outcome.took`).

`differences` compares two parsed launches without vLLM (the controller calls it too): the interpreter,
the model files, every engine argument but those `Layout` leaves out (what the managed layout changes by
design: address, port, served names), and the environment by effect: Hugging Face and cache variables by
the directory they resolve to (huggingface_hub's and transformers' rules, `cache_directories`), VLLM_*
variables by vLLM's reading of them, variables the managed unit adds that change no answer left out,
every other variable by its value, and a secret's value never shown. One line per difference.

Run as a tool by the vLLM venv's Python, it parses the launches of a JSON document (`--input`, default
stdin) and prints the parsed forms; with `--python` it is the front the survey runs in the host's
python3: it starts that Python on itself (the host package travels on PYTHONPATH) and relays the answer.
Standard library only, besides vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import hashlib
import io
import json
import os
import posixpath
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from host.contract import STATE_DIR
from host.processes import run_captured
from host.swap_files import write_file
from host.vllm_parser import host_vllm, installed_vllm

# Parsed launches, one file each, named by `cache_key`.
PARSED_CACHE = f"{STATE_DIR}/parsed-launches"
# Part of every cache key: a change of what a parsed form holds makes every kept one stale.
FORMAT = 2

# How vLLM's OpenAI server is started: `python -m MODULE ARGS`, or the `serve` subcommand of its CLI.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"

# A variable whose value is a secret: compared by digest, never shown.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|(^|_)KEY$")
# An object's repr names its address, which differs from run to run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


# ---- a launch, before vLLM reads it -----------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One vLLM OpenAI server launch: the interpreter that runs it (its words before the entry point, or
    the `vllm` console script), the entry point (`api_server` or `serve`), the server's own arguments,
    the environment it starts with and the user it runs as (whose home the caches default to)."""

    interpreter: tuple[str, ...]
    form: str  # api_server | serve
    args: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)
    user: str = "root"

    def to_dict(self) -> dict[str, Any]:
        return {
            "interpreter": list(self.interpreter),
            "form": self.form,
            "args": list(self.args),
            "environment": dict(sorted(self.environment.items())),
            "user": self.user,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Launch:
        return cls(
            tuple(data["interpreter"]),
            str(data["form"]),
            tuple(data["args"]),
            {str(k): str(v) for k, v in (data.get("environment") or {}).items()},
            str(data.get("user") or "root"),
        )


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand(word: str, variables: Mapping[str, str]) -> str:
    """`${NAME}` and `$NAME` in one word of an ExecStart= as systemd expands them when the unit starts;
    a name it does not set is left as written (vLLM's parser then says what it makes of it)."""
    return _VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), word)


def split_launch(
    argv: Sequence[str],
    environment: Mapping[str, str] | None = None,
    user: str = "root",
    variables: Mapping[str, str] | None = None,
) -> Launch | None:
    """`argv` as a vLLM OpenAI server launch (None when it is not one): `PYTHON [options] -m
    vllm.entrypoints.openai.api_server ARGS`, `PYTHON -m vllm.entrypoints.cli.main serve ARGS`, or `vllm
    serve ARGS` (the console script, run directly or by a Python). Its words are expanded with
    `variables` and its environment, as systemd does at the start (the placement's port)."""
    env = dict(environment or {})
    words = [expand(w, {**env, **(variables or {})}) for w in argv]
    for index, word in enumerate(words):
        following = words[index + 1 : index + 3]
        if word == "-m" and following[:1] == [API_SERVER_MODULE]:
            return Launch(tuple(words[:index]), "api_server", tuple(words[index + 2 :]), env, user)
        if word == "-m" and following == [CLI_MODULE, "serve"]:
            return Launch(tuple(words[:index]), "serve", tuple(words[index + 3 :]), env, user)
        if posixpath.basename(word) == "vllm" and following[:1] == ["serve"]:
            # Run by its Python (as the kernel runs a script's `#!` line, which a process's command line
            # shows): that Python is the interpreter, not the script.
            interpreter = tuple(words[:index]) or (word,)
            return Launch(interpreter, "serve", tuple(words[index + 2 :]), env, user)
    return None


def cache_key(launch: Launch, installed: tuple[str, str], python: str) -> str:
    """What decides a parsed form, as one digest: this Python, its vLLM, the launch's words and its
    environment (VLLM_* are read by vLLM, the rest by the cache rules; a secret only by its digest)."""
    material = {
        "format": FORMAT,
        "python": python,
        "vllm": list(installed),
        "launch": {**launch.to_dict(), "environment": shown_environment(launch.environment)},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def shown_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment as it may be kept and sent: a secret's value replaced by its digest."""
    return {
        name: "sha256:" + hashlib.sha256(value.encode()).hexdigest() if SECRET_NAME.search(name) else value
        for name, value in sorted(environment.items())
    }


# ---- the parsed form ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedLaunch:
    """A launch as the host's vLLM reads it. `values`: the engine arguments (by argparse dest) that differ
    from vLLM's defaults; `defaults` and `flags`: vLLM's default and flag name of each of those; `vllm_env`:
    the VLLM_* variables it sets whose value vLLM reads otherwise than its default; `environment`: the
    whole environment (secrets as digests), for the rules that are not vLLM's. `error`: vLLM refused it
    (then nothing else is known)."""

    vllm: str
    interpreter: tuple[str, ...]  # (the venv's bin directory, the interpreter's real path, its options...)
    model: str  # the model path as the directory it resolves to on the host (or as written)
    values: Mapping[str, Any]
    defaults: Mapping[str, Any]
    flags: Mapping[str, str]
    vllm_env: Mapping[str, Any]
    vllm_env_defaults: Mapping[str, Any]
    environment: Mapping[str, str]
    home: str
    # The VLLM_* variables it sets that vLLM's table knows (set to their default, they are not in vllm_env).
    vllm_read: tuple[str, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "interpreter": list(self.interpreter), "vllm_read": list(self.vllm_read)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ParsedLaunch:
        return cls(**{**data, "interpreter": tuple(data["interpreter"]), "vllm_read": tuple(data.get("vllm_read", ()))})


def plain(value: Any) -> Any:
    """A parsed value as JSON data that compares as vLLM means it: enums by value, sets sorted, config
    objects (dataclasses, pydantic models) by their fields, anything else by its repr without addresses."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, None)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        with contextlib.suppress(Exception):
            return plain(value.model_dump())
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return _ADDRESS.sub("", repr(value))


@contextlib.contextmanager
def environment_of(variables: Mapping[str, str]) -> Iterator[None]:
    """os.environ as exactly `variables` while the block runs (vLLM's table reads os.environ)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def vllm_variables(
    environment: Mapping[str, str], table: Mapping[str, Callable[[], Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values, defaults): each VLLM_* variable of `environment` that vLLM's `table` knows, as vLLM reads
    it, where that differs from its reading without the variable (a default spelled out is left out)."""
    values: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for name in sorted(environment):
        getter = table.get(name)
        if not name.startswith("VLLM_") or getter is None:
            continue
        with environment_of(environment):
            set_to = _reading(getter)
        with environment_of({k: v for k, v in environment.items() if k != name}):
            default = _reading(getter)
        if set_to != default:
            values[name], defaults[name] = set_to, default
    return values, defaults


def _reading(getter: Callable[[], Any]) -> Any:
    try:
        return plain(getter())
    except Exception as error:  # vLLM's table raises on a value it cannot read (an int that is not)
        return f"<{type(error).__name__}: {error}>"


def option_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each argument's dest -> its long flag (the first `--` spelling), as messages name it."""
    names = {}
    for action in parser._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        if long and action.dest not in names:
            names[action.dest] = long[0]
    return names


def parse_arguments(
    launch: Launch, make_parser: Callable[[], argparse.ArgumentParser]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]] | str:
    """(values, defaults, flags) of the launch's arguments as the parser reads them, only those whose
    value is not the default; or the parser's error. `serve`'s positional model is its --model (vLLM's
    `serve` does the same); the api_server takes --model."""
    parser = make_parser()
    if launch.form == "serve" and not any(a.dest == "model_tag" for a in parser._actions):
        parser.add_argument("model_tag", nargs="?")  # a vLLM whose server parser has no positional model
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(io.StringIO()):
            namespace = vars(parser.parse_args(list(launch.args)))
            baseline = vars(parser.parse_args([]))
    except SystemExit:
        lines = [line for line in captured.getvalue().splitlines() if "error:" in line]
        return (lines[-1].split("error:", 1)[1] if lines else captured.getvalue()).strip() or "rejected"
    except Exception as error:  # FlexibleArgumentParser raises its own errors (a --config it cannot read)
        return f"{type(error).__name__}: {error}"
    if launch.form == "serve" and namespace.get("model_tag") is not None:
        namespace["model"] = namespace["model_tag"]
    if launch.form == "serve":
        namespace.pop("model_tag", None)
        baseline.pop("model_tag", None)
    values: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for dest, value in namespace.items():
        read, default = plain(value), plain(baseline.get(dest))
        if read != default:
            values[dest], defaults[dest] = read, default
            if SECRET_NAME.search(dest.upper()):  # --api-key, --hf-token: kept and compared as a digest
                values[dest] = "sha256:" + hashlib.sha256(json.dumps(read).encode()).hexdigest()
    names = option_names(parser)
    return values, defaults, {dest: names.get(dest, dest) for dest in values}


def first_line(path: str) -> str:
    """A file's first line ("" when it cannot be read): a console script's `#!` names its Python."""
    try:
        with open(path, encoding="utf-8") as script:
            return script.readline()
    except (OSError, UnicodeDecodeError):
        return ""


def interpreter_identity(
    words: Sequence[str],
    resolve: Callable[[str], str] = os.path.realpath,
    read_first_line: Callable[[str], str] = first_line,
) -> tuple[str, ...]:
    """Which Python runs a launch, by effect: its venv (the directory of its bin/) and the interpreter that
    path is, then the interpreter's options. `/opt/v/bin/python3` and `/opt/v/bin/python` are the same; the
    `vllm` console script runs the Python of its first line."""
    path, options = (words[0], tuple(words[1:])) if words else ("", ())
    if posixpath.basename(path) == "vllm":
        line = read_first_line(path)
        if line.startswith("#!") and line[2:].split():
            path = line[2:].split()[0]
    return (posixpath.dirname(posixpath.normpath(path)), resolve(path), *options)


def home_of(user: str) -> str:
    """The user's home (where caches default to, as systemd sets HOME for User=)."""
    import pwd  # not on every platform the controller runs on; only the host asks

    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        return "/root" if user == "root" else f"/home/{user}"


def parse_launch(
    launch: Launch,
    version: str,
    make_parser: Callable[[], argparse.ArgumentParser],
    table: Mapping[str, Callable[[], Any]],
) -> ParsedLaunch:
    """What this vLLM (`make_parser`, and `table`: vllm.envs') reads of one launch: what a cache keeps.
    The facts of the host (which Python, the model's directory, the user's home) are `on_this_host`'s."""
    environment = shown_environment(launch.environment)
    parsed = parse_arguments(launch, make_parser)
    if isinstance(parsed, str):
        return ParsedLaunch(version, (), "", {}, {}, {}, {}, {}, environment, "", (), parsed)
    values, defaults, flags = parsed
    vllm_env, vllm_env_defaults = vllm_variables(launch.environment, table)
    read = tuple(sorted(name for name in launch.environment if name.startswith("VLLM_") and name in table))
    model = str(values.get("model") or defaults.get("model") or "")
    return ParsedLaunch(version, (), model, values, defaults, flags, vllm_env, vllm_env_defaults, environment, "", read)


def on_this_host(
    parsed: ParsedLaunch,
    launch: Launch,
    resolve: Callable[[str], str] = os.path.realpath,
    home: Callable[[str], str] = home_of,
    read_first_line: Callable[[str], str] = first_line,
) -> ParsedLaunch:
    """`parsed` with what this host says now, never kept: the Python that runs it, the directory its model
    path resolves to (a link moved since is seen) and its user's home."""
    model = resolve(parsed.model) if parsed.model.startswith("/") else parsed.model
    return dataclasses.replace(
        parsed,
        interpreter=interpreter_identity(launch.interpreter, resolve, read_first_line),
        model=model,
        home=home(launch.user),
    )


# ---- the tool: parse with this vLLM (cached), or have the venv's Python do it ------------------------


@dataclass(frozen=True)
class Outcome:
    """Parsed launches in the order asked, the vLLM that read them, how many were not in the cache and
    the seconds their parse took (importing vLLM: the first preview after a change waits for it)."""

    vllm: str
    parsed: tuple[ParsedLaunch, ...]
    fresh: int = 0
    took: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"vllm": self.vllm, "parsed": [p.to_dict() for p in self.parsed], "fresh": self.fresh, "took": self.took}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        parsed = tuple(ParsedLaunch.from_dict(p) for p in data["parsed"])
        return cls(str(data["vllm"]), parsed, int(data.get("fresh", 0)), float(data.get("took", 0.0)))

    def note(self) -> str | None:
        """What a preview says when it waited for vLLM's parser (None: every launch was known)."""
        if not self.fresh:
            return None
        return (
            f"read {self.fresh} launch(es) with this host's vLLM {self.vllm} argument parser in {self.took:.1f} s "
            "(kept on the host: the next preview reads them from there)"
        )


def _kept(cache: Path, key: str) -> ParsedLaunch | None:
    try:
        return ParsedLaunch.from_dict(json.loads((cache / f"{key}.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep(cache: Path, key: str, parsed: ParsedLaunch) -> None:
    """Keep a parsed launch (one vLLM refused too: the same words are refused again); a cache that cannot
    be written only costs the next survey vLLM's import."""
    with contextlib.suppress(OSError):
        write_file(cache / f"{key}.json", json.dumps(parsed.to_dict(), sort_keys=True))


def parse_all(launches: Sequence[Launch], cache: Path) -> Outcome:
    """Every launch as this Python's vLLM reads it: from the cache where it was parsed before, else parsed
    now (importing vLLM once) and kept."""

    installed = installed_vllm()
    if installed is None:
        raise ImportError(f"{sys.executable} has no vLLM installed")
    keys = [cache_key(launch, installed, sys.executable) for launch in launches]
    found = [_kept(cache, key) for key in keys]
    started = time.monotonic()
    missing = [index for index, parsed in enumerate(found) if parsed is None]
    if missing:
        # Parsing computes nothing: keep the OpenMP runtime vLLM loads off the machine's topology
        # (host/tools/vllm_args_check.py's main says what it did on a busy host).
        os.environ.setdefault("KMP_AFFINITY", "disabled")
        os.environ.setdefault("OMP_PROC_BIND", "false")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import importlib

        version, make_parser, _ = host_vllm()
        table = importlib.import_module("vllm.envs").environment_variables
        for index in missing:
            found[index] = parse_launch(launches[index], version, make_parser, table)
            _keep(cache, keys[index], found[index])  # type: ignore[arg-type]
    parsed = tuple(on_this_host(p, launch) for p, launch in zip(found, launches, strict=True) if p is not None)
    took = round(time.monotonic() - started, 2) if missing else 0.0
    return Outcome(installed[0], parsed, len(missing), took)


def package_root() -> str:
    """Where this host package is imported from (its archive, or a checkout): the PYTHONPATH on which
    another Python runs it."""
    return str(Path(__file__).parent.parent)


class ParseFailed(Exception):
    pass


def parse_with(python: str, launches: Sequence[Launch], cache: str = PARSED_CACHE, timeout: float = 300) -> Outcome:
    """`parse_all` run by `python` (the vLLM venv's, which the caller's python3 need not be): one process,
    which imports vLLM only for launches its cache does not hold."""
    document = json.dumps({"launches": [launch.to_dict() for launch in launches]})
    environment = {**os.environ, "PYTHONPATH": package_root()}
    try:
        result = run_captured(
            [python, "-m", "host.launch_identity", "--cache", cache], timeout=timeout, input=document, env=environment
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ParseFailed(f"{python} could not read the launches with its vLLM: {error}") from None
    if result.returncode != 0:
        raise ParseFailed(f"{python} could not read the launches with its vLLM: {result.stderr.strip()[-400:]}")
    return Outcome.from_dict(json.loads(result.stdout))


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--input", help='JSON {"launches": [...]} (default: stdin)')
    cli.add_argument("--cache", default=PARSED_CACHE, help="directory of parsed launches")
    cli.add_argument("--python", help="parse with this Python's vLLM (this process need not have one)")
    options = cli.parse_args(argv)
    text = Path(options.input).read_text(encoding="utf-8") if options.input else sys.stdin.read()
    launches = [Launch.from_dict(entry) for entry in json.loads(text)["launches"]]
    try:
        if options.python:
            outcome = parse_with(options.python, launches, options.cache)
        else:
            outcome = parse_all(launches, Path(options.cache))
    except (ImportError, ParseFailed) as error:
        print(f"launch-identity: {error}", file=sys.stderr)
        return 1
    json.dump(outcome.to_dict(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


# ---- how two parsed launches differ (no vLLM needed) -------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What a comparison leaves out: engine arguments (argparse dests) and variables that the managed
    layout sets by design. The model is always compared, as the directory it resolves to."""

    arguments: frozenset[str] = frozenset({"model", "model_tag"})
    variables: frozenset[str] = frozenset()
    # How the messages name the two sides: the launch that runs, the one that replaces it.
    there: str = "there"
    here: str = "in the stack"
    other: str = "the stack"


# A take-over in place: the engine moves behind the front door (address, port) and serves the stack's
# ids beside its own; its GPUs (CUDA_VISIBLE_DEVICES) are compared as GPUs and its scratch and compile
# cache are the managed unit's own. The Hugging Face token is the stack's download credential (its secret
# file, staged only by the up that takes over): the managed engine loads verified local files offline.
ADOPTION = Layout(
    frozenset({"model", "model_tag", "host", "port", "served_model_name"}),
    frozenset({"CUDA_VISIBLE_DEVICES", "VLLM_CACHE_ROOT", "TMPDIR", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}),
)
# A unit of the same deployment rewritten: everything the engine reads is compared.
SAME_UNIT = Layout(there="now", here="in the new unit", other="the new unit")

# Variables every managed unit sets (render/launch.engine_environment) that change no answer the engine
# gives (usage statistics, telemetry, no Hub calls for files that are local, GPU index order): a launch
# without them runs the same; one that sets another value differs.
MANAGED_VARIABLES = frozenset(
    {"VLLM_NO_USAGE_STATS", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_OFFLINE", "CUDA_DEVICE_ORDER"}
)
# The variables the cache rules below read: compared by the directories they resolve to, not by value.
CACHE_VARIABLES = frozenset(
    {
        "HOME",
        "XDG_CACHE_HOME",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_ASSETS_CACHE",
        "HUGGINGFACE_ASSETS_CACHE",
        "HF_TOKEN_PATH",
        "HF_XET_CACHE",
        "HF_MODULES_CACHE",
        "TRANSFORMERS_CACHE",
        "PYTORCH_TRANSFORMERS_CACHE",
        "PYTORCH_PRETRAINED_BERT_CACHE",
        "TORCH_HOME",
    }
)


def _path(value: str, home: str) -> str:
    """A cache path as the libraries read it: `~` and `$VAR` expanded, normalised."""
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    return posixpath.normpath(value)


def cache_directories(environment: Mapping[str, str], home: str) -> dict[str, str]:
    """Where the Hugging Face libraries and torch keep their caches under `environment`, by the rules of
    huggingface_hub (constants.py: HF_HOME from XDG_CACHE_HOME or ~/.cache; the hub cache from HF_HUB_CACHE,
    its legacy HUGGINGFACE_HUB_CACHE, or HF_HOME/hub; assets, token and Xet likewise), transformers 4.x
    (utils/hub.py: TRANSFORMERS_CACHE, else PYTORCH_TRANSFORMERS_CACHE, else PYTORCH_PRETRAINED_BERT_CACHE,
    else the hub cache; modules under HF_HOME; transformers 5 reads only the hub cache) and torch
    (TORCH_HOME, else XDG_CACHE_HOME/torch)."""
    env = environment
    home = env.get("HOME", home)
    xdg = _path(env.get("XDG_CACHE_HOME", f"{home}/.cache"), home)
    hf_home = _path(env.get("HF_HOME", f"{xdg}/huggingface"), home)
    hub = _path(env.get("HF_HUB_CACHE", env.get("HUGGINGFACE_HUB_CACHE", f"{hf_home}/hub")), home)
    transformers = env.get(
        "TRANSFORMERS_CACHE", env.get("PYTORCH_TRANSFORMERS_CACHE", env.get("PYTORCH_PRETRAINED_BERT_CACHE", hub))
    )
    return {
        "the Hugging Face home": hf_home,
        "the Hugging Face hub cache": hub,
        "transformers' cache": _path(transformers, home),
        "the Hugging Face assets cache": _path(
            env.get("HF_ASSETS_CACHE", env.get("HUGGINGFACE_ASSETS_CACHE", f"{hf_home}/assets")), home
        ),
        "the Hugging Face token file": _path(env.get("HF_TOKEN_PATH", f"{hf_home}/token"), home),
        "the Xet cache": _path(env.get("HF_XET_CACHE", f"{hf_home}/xet"), home),
        "transformers' modules (remote code)": _path(env.get("HF_MODULES_CACHE", f"{hf_home}/modules"), home),
        "torch's cache": _path(env.get("TORCH_HOME", f"{xdg}/torch"), home),
    }


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, sort_keys=True)


def _named(value: Any, default: Any, is_default: bool) -> str:
    return f"{_shown(value)} (vLLM's default)" if is_default else _shown(value)


def argument_differences(have: ParsedLaunch, wanted: ParsedLaunch, layout: Layout) -> list[str]:
    """One line per engine argument the two launches read differently (missing: vLLM's default)."""
    lines = []
    for dest in sorted((set(have.values) | set(wanted.values)) - layout.arguments):
        default = wanted.defaults.get(dest, have.defaults.get(dest))
        there, here = have.values.get(dest, default), wanted.values.get(dest, default)
        if there == here:
            continue
        flag = have.flags.get(dest) or wanted.flags.get(dest) or dest
        if SECRET_NAME.search(dest.upper()):
            lines.append(
                f"{flag} is {'another' if dest in have.values and dest in wanted.values else 'set on one side only'} (not shown)"
            )
            continue
        lines.append(
            f"{flag} is {_named(there, default, dest not in have.values)} {layout.there}, "
            f"{_named(here, default, dest not in wanted.values)} {layout.here}"
        )
    return lines


def environment_differences(have: ParsedLaunch, wanted: ParsedLaunch, layout: Layout) -> list[str]:
    """One line per variable whose effect differs: VLLM_* by vLLM's reading, cache variables by the
    directories they resolve to, managed-only variables left out where one side lacks them, the rest by
    value (a secret named, never shown)."""
    env, stack_env = have.environment, wanted.environment

    def left_out(name: str) -> bool:
        managed_only = name in MANAGED_VARIABLES and (name not in env or name not in stack_env)
        return name in layout.variables or name.startswith("VLLM_FLEET_") or managed_only

    lines = []
    read_by_vllm = set(have.vllm_env) | set(wanted.vllm_env)
    for name in sorted(read_by_vllm):
        default = wanted.vllm_env_defaults.get(name, have.vllm_env_defaults.get(name))
        there, here = have.vllm_env.get(name, default), wanted.vllm_env.get(name, default)
        if there != here and not left_out(name):
            lines.append(
                f"vLLM reads {name} as {_named(there, default, name not in have.vllm_env)} {layout.there}, "
                f"{_named(here, default, name not in wanted.vllm_env)} {layout.here}"
            )
    # Read by vLLM's table: compared above (one set to its default is in neither vllm_env).
    known_to_vllm = read_by_vllm | set(have.vllm_read) | set(wanted.vllm_read)
    for name in sorted(set(env) | set(stack_env)):
        if left_out(name) or name in known_to_vllm or name in CACHE_VARIABLES or env.get(name) == stack_env.get(name):
            continue
        if SECRET_NAME.search(name):
            both = name in env and name in stack_env
            lines.append(f"its {name} is {'another' if both else 'set on one side only'} (not shown)")
            continue
        there = f"{name}={env[name]}" if name in env else f"no {name}"
        wanted_text = f"{name}={stack_env[name]}" if name in stack_env else f"no {name}"
        lines.append(f"its environment has {there}, {layout.other}'s {wanted_text}")
    theirs, ours = cache_directories(env, have.home), cache_directories(stack_env, wanted.home)
    for what, directory in theirs.items():
        if directory != ours[what]:
            lines.append(f"{what} is {directory} {layout.there}, {ours[what]} {layout.here}")
    return lines


def differences(have: ParsedLaunch, wanted: ParsedLaunch, layout: Layout = ADOPTION) -> list[str]:
    """How the launch that runs (`have`) differs from the stack's (`wanted`), each as one line; empty:
    the same engine, as the host's vLLM reads both."""
    for parsed, whose in ((have, "its launch"), (wanted, f"{layout.other}'s launch")):
        if parsed.error is not None:
            return [f"vLLM {parsed.vllm} on this host rejects {whose}: {parsed.error}"]
    lines = []
    if have.interpreter != wanted.interpreter:
        lines.append(
            f"it runs the Python {have.interpreter[1]}, {layout.other} {wanted.interpreter[1]} (hosts[].runtime.python)"
        )
    if have.model.rstrip("/") != wanted.model.rstrip("/"):
        lines.append(f"it serves the model files in {have.model}, {layout.other} those in {wanted.model}")
    return lines + argument_differences(have, wanted, layout) + environment_differences(have, wanted, layout)


if __name__ == "__main__":
    sys.exit(main())
