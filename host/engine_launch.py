"""How the engine that serves a deployment was launched, read from its process, against the stack's launch.

What a running engine read when it started is its launch, and only its process still holds it: its
command line (/proc/PID/cmdline), its environment as it was exec'd (/proc/PID/environ) and its user. A
unit file edited since, reloaded into systemd or not, says what the next start runs, not what runs. The
survey answers this for every deployment it is asked about (host/contract.LaunchQuestion), and the
preview and the swap judge on that answer alike (host/judgement.py):

  same-unit  the deployment's own managed unit serves behind the front door: the unit that replaces it
             against the running engine (host/unit_file.launch_change: the command line and environment
             from the process, User=, WorkingDirectory= and the EnvironmentFile= list from the two unit
             files; what changes outside the launch is a rewrite and a reload). Word for word first, and
             the host's vLLM reads both only when the words differ (host/launch_identity.SAME_UNIT).
  take-over  a hand-made engine serves it (the one running unit of the managed name or of `replaces`):
             its launch against the stack's as the host's vLLM reads both, the managed layout left out
             (host/launch_identity.ADOPTION).

The environment compared is the variables either side declares (Environment=, its EnvironmentFile=s'
contents, the placement): systemd adds its own to every service (INVOCATION_ID, JOURNAL_STREAM, PATH,
HOME, ...), which no unit spelled. A secret's value never leaves the host (launch_identity compares it by
digest). Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from host import launch_identity as identity
from host.contract import (
    ETC_DIR,
    SAME_UNIT,
    TAKE_OVER,
    ActiveRecord,
    DeploymentState,
    EngineReading,
    LaunchQuestion,
    Unit,
)
from host.unit_file import UnitLaunch, launch_change, literal_differences, read_unit

Parse = Callable[[str, Sequence[identity.Launch], str], identity.Outcome]
# At most this long for vLLM's parser (its import: 7 s on the sandbox, more on a busy host), well inside
# the controller's wait for the survey (controller/transport.SURVEY_TIMEOUT).
PARSE_TIMEOUT = 120.0


def parse_on_host(python: str, launches: Sequence[identity.Launch], cache: str) -> identity.Outcome:
    return identity.parse_with(python, launches, cache, timeout=PARSE_TIMEOUT)


@dataclass(frozen=True)
class Process:
    """A running engine's launch as its process holds it."""

    pid: int
    argv: tuple[str, ...]
    environment: Mapping[str, str]
    user: str = "root"


def _read(path: str | Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def text_of(path: str | Path) -> str | None:
    data = _read(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _user_of(uid: int) -> str:
    import pwd  # the host's; the controller never reads a process

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def read_process(pid: int, proc: str = "/proc", user_of: Callable[[int], str] = _user_of) -> Process | None:
    """The command line, environment and user `pid` was exec'd with (None: it is gone, or not readable)."""
    if pid <= 0:
        return None
    cmdline = _read(f"{proc}/{pid}/cmdline")
    environ = _read(f"{proc}/{pid}/environ")
    status = text_of(f"{proc}/{pid}/status")
    if not cmdline or environ is None:
        return None
    argv = tuple(word.decode("utf-8", errors="replace") for word in cmdline.split(b"\0")[:-1] or [cmdline])
    environment = {}
    for entry in environ.split(b"\0"):
        name, equals, value = entry.decode("utf-8", errors="replace").partition("=")
        if equals and name:
            environment[name] = value
    uid = next((line.split()[1] for line in (status or "").splitlines() if line.startswith("Uid:")), "0")
    return Process(pid, argv, environment, user_of(int(uid)) if uid.isdigit() else "root")


@dataclass
class Comparison:
    """What one comparison by vLLM found out besides the differences: how it compared, the parser's note."""

    how: str = "word for word"
    note: str | None = None
    readable: bool = True
    problems: list[str] = field(default_factory=list)


def _by_vllm(
    python: str,
    have: identity.Launch | None,
    wanted: identity.Launch | None,
    layout: identity.Layout,
    cache: str,
    parse: Parse,
    seen: Comparison,
) -> list[str] | None:
    """The differences the host's vLLM reads between two launches (None: it could not read them; `seen`
    says why)."""
    if have is None or wanted is None:
        whose = "the engine's" if have is None else "the stack's"
        seen.readable, seen.how = False, "not read"
        seen.problems.append(f"{whose} command line is not a vLLM OpenAI server's")
        return None
    try:
        outcome = parse(python, [have, wanted], cache)
    except identity.ParseFailed as error:
        seen.readable, seen.how = False, "not read"
        seen.problems.append(str(error))
        return None
    seen.how, seen.note = f"as this host's vLLM {outcome.vllm} reads them", outcome.note()
    return identity.differences(outcome.parsed[0], outcome.parsed[1], layout)


def running_differences(
    process: Process,
    python: str,
    variables: Mapping[str, str],
    cache: str,
    parse: Parse,
    seen: Comparison,
) -> Callable[[UnitLaunch, Mapping[str, str], UnitLaunch, Mapping[str, str]], list[str]]:
    """launch_change's comparison of the command line and environment, with the running process in place
    of the unit that serves: word for word (the new unit's words expanded as systemd does at its start),
    then by the host's vLLM where the words differ; word for word again where vLLM cannot read them."""

    def compare(old: UnitLaunch, old_env: Mapping[str, str], new: UnitLaunch, new_env: Mapping[str, str]) -> list[str]:
        names = set(old_env) | set(new_env)
        running_env = {name: value for name, value in process.environment.items() if name in names}
        expanded = tuple(identity.expand(word, {**new_env, **variables}) for word in new.exec_start or ())
        if process.argv == expanded and running_env == dict(new_env):
            return []
        declared = dict(old.environment) | dict(new.environment)
        running = UnitLaunch(process.argv, tuple((k, v) for k, v in running_env.items() if k in declared))
        literal = literal_differences(running, running_env, UnitLaunch(expanded, new.environment), new_env)
        before = identity.split_launch(process.argv, running_env, process.user)
        after = identity.split_launch(new.exec_start or (), new_env, new.user or "root", variables)
        read = _by_vllm(python, before, after, identity.SAME_UNIT, cache, parse, seen)
        return literal if read is None else read

    return compare


def same_unit_reading(
    question: LaunchQuestion,
    unit: Unit,
    record: ActiveRecord,
    process: Process,
    etc_dir: str = ETC_DIR,
    cache: str = identity.PARSED_CACHE,
    parse: Parse = parse_on_host,
) -> EngineReading:
    """The deployment's own unit, serving behind the front door, against the unit that replaces it."""
    stem = unit.name.removesuffix(".service")
    env_path, placement_path = f"{etc_dir}/{stem}.env", f"{etc_dir}/{stem}.placement.env"
    placement = text_of(placement_path)
    before = {env_path: text_of(env_path), placement_path: placement}
    after = {env_path: text_of(question.env_file) if question.env_file else None, placement_path: placement}
    installed = (text_of(unit.fragment) or "") if unit.fragment else ""
    port = {"VLLM_FLEET_BACKEND_PORT": str(record.backend_port)} if record.backend_port is not None else {}
    seen = Comparison()
    compare = running_differences(process, question.python, port, cache, parse, seen)
    change = launch_change(installed, question.unit_text, before, after, None, compare, unit.name)
    return EngineReading(
        unit=unit.name,
        kind=SAME_UNIT,
        pid=process.pid,
        differences=change.launch,
        unit_changes=change.other,
        # Where vLLM cannot read them, the words decide: a restart for every difference it would find.
        how=seen.how if seen.readable else f"word for word ({'; '.join(seen.problems)})",
        note=seen.note,
    )


def take_over_reading(
    question: LaunchQuestion,
    unit: Unit,
    unit_text: str,
    process: Process,
    cache: str = identity.PARSED_CACHE,
    parse: Parse = parse_on_host,
) -> EngineReading:
    """A hand-made engine that serves the deployment against the stack's launch, the managed layout left
    out: what it reads from its own unit's files and the stack's, the environment of the process."""
    theirs = read_unit(unit_text, unit.name).launch
    declared = theirs.variables({path: text_of(path) for path, _optional in theirs.environment_files})
    stack = read_unit(question.unit_text, question.unit).launch
    # The stack's secret file is the one staged on the host; its placement is the layout's, left out.
    staged = text_of(question.env_file) if question.env_file else None
    stack_env = stack.variables({path: staged for path, _optional in stack.environment_files})
    names = set(declared) | set(stack_env)
    running_env = {name: value for name, value in process.environment.items() if name in names}
    have = identity.split_launch(process.argv, running_env, process.user)
    port = {"VLLM_FLEET_BACKEND_PORT": str(question.port)}
    wanted = identity.split_launch(stack.exec_start or (), stack_env, stack.user or "root", port)
    seen = Comparison()
    read = _by_vllm(question.python, have, wanted, identity.ADOPTION, cache, parse, seen)
    return EngineReading(
        unit=unit.name,
        kind=TAKE_OVER,
        pid=process.pid,
        differences=tuple(seen.problems) if read is None else tuple(read),
        how=seen.how,
        note=seen.note,
        readable=seen.readable,
    )


def reading(
    question: LaunchQuestion,
    units: Sequence[Unit],
    unit_texts: Mapping[str, str],
    state: DeploymentState,
    read: Callable[[int], Process | None] = read_process,
    etc_dir: str = ETC_DIR,
    cache: str = identity.PARSED_CACHE,
    parse: Parse = parse_on_host,
) -> EngineReading | None:
    """The answer to `question` on this host (None: no engine of the deployment to compare runs, or it runs
    a launch no comparison decides: one adopted in place, or another model's unit before a swap).
    `unit_texts`: each unit's file with its drop-ins, as systemd reads it."""
    by_name = {unit.name: unit for unit in units}
    record = state.record
    if record is not None:
        unit = by_name.get(record.unit)
        if (
            record.unit != question.unit
            or record.adopted is not None
            or record.placement is None
            or unit is None
            or not unit.managed
            or not unit.running
            or unit.adopted_in_place
        ):
            return None
        process = read(unit.main_pid)
        return None if process is None else same_unit_reading(question, unit, record, process, etc_dir, cache, parse)
    serving = [
        unit
        for name in dict.fromkeys((question.unit, *question.replaces))
        if (unit := by_name.get(name)) is not None and not unit.managed and unit.running
    ]
    if len(serving) != 1:
        return None
    process = read(serving[0].main_pid)
    if process is None:
        return None
    return take_over_reading(question, serving[0], unit_texts.get(serving[0].name, ""), process, cache, parse)
