"""A unit file as systemd reads it, and which part of it is the engine's launch.

What a running engine read only when it started is its launch: the command line (ExecStart=), its
environment (Environment= and the contents of its EnvironmentFile=s, the files winning, as systemd merges
them), the user it runs as and its working directory (and the model files its command line names, which
the caller compares by their manifest). Everything else in a unit (comments, Description=, timeouts, the
restart policy, ExecStartPre=/ExecStartPost=/ExecStopPost= tools, limits, which apply at the next start)
takes effect with a rewrite and a `systemctl daemon-reload`: the engine keeps running. `launch_change`
says which, with each difference, for the unit that runs and the one that replaces it.

Why a parse and not systemd itself: the question is asked by the preview on the controller, where the new
unit exists only as rendered text, and by the swap on the host before it acts. Having systemd read a
staged copy means writing it into a unit directory under a temporary name and making PID 1 load it: a
unit systemd keeps until its garbage collection, listed by `systemctl list-units`, loaded beside the swap's
own daemon-reloads. So the settings of the launch are parsed here, by systemd's rules for them (sections,
comments, continuation lines, `Key=` resetting a list, quoting and C escapes, `%%`, the `-`/`@`/`+`/`!`
prefixes), and tests/test_unit_file.py loads the rendered unit and a hand-made one full of quoting into the
sandbox's systemd 252 and pins this parse to its answer over D-Bus (`busctl get-property`, exact words:
`systemctl show -p ExecStart` joins argv[] with spaces, unquoted). `from_bus` reads that answer, for a
unit systemd holds. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def bridge_stem(unit_stem: str) -> str:
    """The name (without .service) of the unit that serves a restart's new launch beside the unit
    `unit_stem`, which systemd cannot rename (host/bridge.py)."""
    return f"{unit_stem}-bridge"


# The settings of [Service] that are the launch; the rest of a unit takes effect without a restart.
LAUNCH_SETTINGS = ("ExecStart", "Environment", "EnvironmentFile", "User", "WorkingDirectory")
WHITESPACE = " \t\n\r"
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}


def words(text: str, cunescape: bool = True) -> list[str]:
    """`text` split as systemd's extract_first_word does with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE: white space
    separates, single and double quotes group (anywhere in a word), a backslash escapes inside quotes too,
    C escapes (\\n, \\t, \\xNN, \\NNN, \\s, ...) are decoded, an unknown one keeps its character."""
    found: list[str] = []
    index, length = 0, len(text)
    while True:
        while index < length and text[index] in WHITESPACE:
            index += 1
        if index >= length:
            return found
        word: list[str] = []
        quote = ""
        while index < length:
            char = text[index]
            if char == "\\" and index + 1 < length:
                decoded, index = _escape(text, index + 1, cunescape)
                word.append(decoded)
                continue
            if quote:
                if char == quote:
                    quote = ""
                else:
                    word.append(char)
            elif char in "'\"":
                quote = char
            elif char in WHITESPACE:
                break
            else:
                word.append(char)
            index += 1
        found.append("".join(word))


def _escape(text: str, index: int, cunescape: bool) -> tuple[str, int]:
    """The character(s) an escape at `index` (just after its backslash) stands for, and where it ends."""
    char = text[index]
    if not cunescape:
        return char, index + 1
    if char in _C_ESCAPES:
        return _C_ESCAPES[char], index + 1
    if char == "x" and _is_hex(text[index + 1 : index + 3], 2):
        return chr(int(text[index + 1 : index + 3], 16)), index + 3
    if char in "uU":
        digits = 4 if char == "u" else 8
        if _is_hex(text[index + 1 : index + 1 + digits], digits):
            return chr(int(text[index + 1 : index + 1 + digits], 16)), index + 1 + digits
    if (
        char in "01234567"
        and len(text[index : index + 3]) == 3
        and all(c in "01234567" for c in text[index : index + 3])
    ):
        return chr(int(text[index : index + 3], 8)), index + 3
    return char, index + 1  # \\ \" \' and, relaxed, any other character as itself


def _is_hex(text: str, digits: int) -> bool:
    return len(text) == digits and all(c in "0123456789abcdefABCDEF" for c in text)


def specifiers(value: str, unit: str = "") -> str:
    """The specifiers systemd resolves as it loads a setting: `%%` and the unit's names (`%n`, `%N`, `%p`,
    `%i`); any other is left as written (the units vllm-fleet renders use none)."""
    stem = unit.rsplit(".", 1)[0]
    prefix, _, instance = stem.partition("@")
    names = {"%": "%", "n": unit, "N": stem, "p": prefix, "i": instance}
    out: list[str] = []
    index = 0
    while index < len(value):
        if value[index] == "%" and index + 1 < len(value) and value[index + 1] in names:
            out.append(names[value[index + 1]])
            index += 2
            continue
        out.append(value[index])
        index += 1
    return "".join(out)


def lines(text: str) -> list[tuple[str, str]]:
    """The unit's lines as systemd reads them: ('section', '[Name]') for a section, ('#', text) for a
    comment, ('setting', 'Key=value') for a setting, a continuation line (a backslash at its end) joined to
    the next with a space, comment lines inside one skipped."""
    found: list[tuple[str, str]] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if pending is not None and line[:1] in ("#", ";"):
            continue  # a comment between continuation lines is dropped
        if pending is None and line[:1] in ("#", ";"):
            found.append(("#", line))
            continue
        if line.endswith("\\"):
            pending = (pending or "") + line[:-1] + " "
            continue
        line = (pending or "") + line
        pending = None
        if not line:
            continue
        found.append(("section", line) if line.startswith("[") else ("setting", line))
    if pending is not None and pending.strip():
        found.append(("setting", pending.strip()))
    return found


@dataclass(frozen=True)
class UnitLaunch:
    """The launch of a unit as systemd holds it: its ExecStart= words (None: it has none), its Environment=
    assignments in order (later ones win), its EnvironmentFile=s (path, whether a missing one is fine),
    its User= and WorkingDirectory= (a leading `-`: a missing directory is fine)."""

    exec_start: tuple[str, ...] | None
    environment: tuple[tuple[str, str], ...] = ()
    environment_files: tuple[tuple[str, bool], ...] = ()
    user: str = ""
    working_directory: str = ""

    def variables(self, files: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The environment it starts with: Environment=, then each EnvironmentFile's variables (the
        contents in `files` by path; one not given or None sets nothing), which win, as in systemd."""
        merged = dict(self.environment)
        for path, _optional in self.environment_files:
            content = (files or {}).get(path)
            if content is not None:
                merged.update(environment_file(content))
        return merged


@dataclass(frozen=True)
class UnitFile:
    """A unit file read as systemd reads it: its launch, its other settings by (section, key) in order,
    and its comments."""

    launch: UnitLaunch
    settings: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    comments: tuple[str, ...] = ()


def read_unit(text: str, unit: str = "") -> UnitFile:
    """`text` (a unit file, its drop-ins appended) as systemd reads it; `unit` resolves the name specifiers."""
    section = ""
    exec_start: list[str] | None = None
    environment: list[tuple[str, str]] = []
    files: list[tuple[str, bool]] = []
    user = working_directory = ""
    settings: dict[tuple[str, str], tuple[str, ...]] = {}
    comments: list[str] = []
    for kind, line in lines(text):
        if kind == "#":
            comments.append(line)
            continue
        if kind == "section":
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if section != "Service" or key not in LAUNCH_SETTINGS:
            settings[(section, key)] = (*settings.get((section, key), ()), value)
            continue
        value = specifiers(value, unit)
        if key == "ExecStart":
            command = value.lstrip("@-:+!")
            exec_start = words(command) if command else None  # an empty ExecStart= resets it
        elif key == "Environment":
            if not value:
                environment = []
                continue
            environment += [(w.split("=", 1)[0], w.split("=", 1)[1]) for w in words(value) if "=" in w]
        elif key == "EnvironmentFile":
            if not value:
                files = []
                continue
            files.append((value[1:], True) if value.startswith("-") else (value, False))
        elif key == "User":
            user = value
        else:
            working_directory = value
    launch = UnitLaunch(
        tuple(exec_start) if exec_start is not None else None, tuple(environment), tuple(files), user, working_directory
    )
    return UnitFile(launch, settings, tuple(comments))


def environment_file(text: str) -> dict[str, str]:
    """An EnvironmentFile's variables: KEY=VALUE lines, comments (`#`, `;`) and blank lines skipped, a value
    in quotes unquoted, a trailing backslash continuing the line (systemd's load_env_file)."""
    variables: dict[str, str] = {}
    for kind, line in lines(text):
        if kind != "setting":
            continue
        key, equals, value = line.partition("=")
        if not equals:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = "".join(words(value)) if value[0] == '"' else value[1:-1]
        variables[key.strip()] = value
    return variables


def from_bus(properties: Mapping[str, str]) -> UnitLaunch:
    """A unit's launch from what systemd holds, each property as `busctl --json=short get-property
    org.freedesktop.systemd1 <unit path> org.freedesktop.systemd1.Service <name>` prints it."""

    def data(name: str) -> Any:
        text = properties.get(name)
        return json.loads(text)["data"] if text else None

    commands = data("ExecStart") or []
    argv = tuple(str(word) for word in commands[-1][1]) if commands else None
    environment = tuple((a.split("=", 1)[0], a.split("=", 1)[1]) for a in data("Environment") or [] if "=" in a)
    files = tuple((str(path), bool(optional)) for path, optional in data("EnvironmentFiles") or [])
    directory = str(data("WorkingDirectory") or "")
    # systemd marks a WorkingDirectory that may be missing with `!` on the bus, `-` in the unit file.
    directory = "-" + directory[1:] if directory.startswith("!") else directory
    return UnitLaunch(argv, environment, files, str(data("User") or ""), directory)


# ---- what a rewrite of the unit does to the engine ---------------------------------------------------

KEEPS_RUNNING = "unit updated, the engine keeps running (its launch is unchanged)"


@dataclass(frozen=True)
class LaunchChange:
    """What replacing a unit does: `launch` says how the launch differs (one line each: then the engine
    restarts to take it), `other` which settings outside the launch change (a rewrite and a reload)."""

    launch: tuple[str, ...]
    other: tuple[str, ...]

    @property
    def restart(self) -> bool:
        return bool(self.launch)

    @property
    def unchanged(self) -> bool:
        return not self.launch and not self.other

    def describe(self) -> str:
        if self.restart:
            return "its launch changes, so the engine restarts: " + "; ".join(self.launch)
        if self.other:
            return f"{KEEPS_RUNNING}; it changes {', '.join(self.other)}"
        return "the unit is unchanged"


EngineDifferences = Callable[[UnitLaunch, Mapping[str, str], UnitLaunch, Mapping[str, str]], list[str]]


def literal_differences(
    old: UnitLaunch, old_env: Mapping[str, str], new: UnitLaunch, new_env: Mapping[str, str]
) -> list[str]:
    """The command line word for word and the environment variable by variable (no value of an
    EnvironmentFile is shown: they hold the secrets)."""
    lines = []
    if old.exec_start != new.exec_start:
        lines.append(f"ExecStart= is {_command(new.exec_start)}, was {_command(old.exec_start)}")
    secret = {name for name in set(old_env) | set(new_env) if name not in dict(old.environment) | dict(new.environment)}
    for name in sorted(set(old_env) | set(new_env)):
        if old_env.get(name) == new_env.get(name):
            continue
        if name in secret:
            lines.append(f"{name} from its environment file changes (not shown)")
        elif name not in new_env:
            lines.append(f"its environment no longer sets {name}")
        elif name not in old_env:
            lines.append(f"its environment sets {name}={new_env[name]}")
        else:
            lines.append(f"its environment sets {name}={new_env[name]}, was {old_env[name]}")
    return lines


_SECRET_FLAG = re.compile(r"^--?[\w-]*(token|secret|password|api[-_]key)", re.IGNORECASE)


def _command(argv: Sequence[str] | None) -> str:
    """A command line as a message shows it: the value of a flag that is a secret (--api-key) hidden."""
    if argv is None:
        return "(none)"
    shown: list[str] = []
    for word in argv:
        if shown and _SECRET_FLAG.match(shown[-1]) and "=" not in shown[-1]:
            shown.append("(not shown)")
        elif _SECRET_FLAG.match(word) and "=" in word:
            shown.append(word.split("=", 1)[0] + "=(not shown)")
        else:
            shown.append(word)
    return " ".join(shown)


def launch_change(
    old_text: str,
    new_text: str,
    old_files: Mapping[str, str | None] | None = None,
    new_files: Mapping[str, str | None] | None = None,
    model_files: tuple[str, str] | None = None,
    engine_differences: EngineDifferences = literal_differences,
    unit: str = "",
) -> LaunchChange:
    """What replacing the unit `old_text` with `new_text` does to its engine. `old_files`/`new_files`: the
    contents of its environment files by path, before and after (a file given in neither counts as
    unchanged: the placement the swap writes); `model_files`: the identity of its model files (their
    manifest's digest) before and after; `engine_differences`: how the command line and environment are
    compared (word for word here; host/launch_identity's reading by vLLM where the caller has it)."""
    old, new = read_unit(old_text, unit), read_unit(new_text, unit)
    launch = engine_differences(
        old.launch, old.launch.variables(old_files), new.launch, new.launch.variables(new_files)
    )
    if old.launch.user != new.launch.user:
        launch.append(f"it runs as {new.launch.user or 'root'}, was {old.launch.user or 'root'} (User=)")
    if old.launch.working_directory != new.launch.working_directory:
        launch.append(f"WorkingDirectory= is {new.launch.working_directory}, was {old.launch.working_directory}")
    if model_files is not None and model_files[0] != model_files[1]:
        launch.append("its model files change (another manifest)")
    other = [
        f"{key}=" if section in ("Service", "Unit", "Install") else f"[{section}] {key}="
        for section, key in sorted(set(old.settings) | set(new.settings))
        if old.settings.get((section, key)) != new.settings.get((section, key))
    ]
    if old.launch.environment_files != new.launch.environment_files:
        # Which files it reads: their contents are compared where given, but another file is another launch.
        launch.append("its EnvironmentFile= list changes")
    if old.comments != new.comments:
        other.append("its comments")
    return LaunchChange(tuple(launch), tuple(other))
