"""Where an engine's start went, from vLLM's own log lines in the unit's journal.

`journalctl -u UNIT -o short-iso-precise -a` prints each line with the time journald received it (to the
microsecond), the process that wrote it, and the message; `-a` keeps the shard loader's progress bars,
which carry carriage returns, instead of "[77B blob data]". A start is the lines from systemd's last
"Starting ..." of the unit to its "Started ..." (our units are "started" once wait-ready saw the engine
answer a completion). Between them, vLLM logs a line at the end of each part of its start; each phase
is the time from the mark before it to its own mark, so the phases add up to the whole start:

  checks        the unit's ExecStartPre checks (model files, GPUs released, shared memory): until the
                last line of a process other than the engine's before the engine's first line
  imports       the engine process's Python and vLLM imports, until vLLM's first log line
  configuration the API server resolves the config and starts the engine core, until the engine core
                logs "Initializing a V1 LLM engine"
  setup         distributed setup, until "Starting to load model"
  weights       until the last "Loading weights took" / "Model loading took" of every worker
  compile       until "torch.compile takes|took N s in total"
  kv-cache      until "Available KV cache memory" / "... KV cache size: N tokens"
  graphs        until "Graph capturing finished in N secs"
  warmup        until "init engine (profile, create kv cache, warmup model) took"
  api-server    until uvicorn's "Application startup complete." (or "Starting vLLM [API ]server")
  ready-check   wait-ready's probe (health, model list, a one-token completion), until "Started"

A mark that a release or a launch does not log (no compile with --enforce-eager, no CUDA graphs on a
CPU) leaves its time to the next phase that has one. vLLM's own figures (the seconds it reports for the
weights, the compile and the graphs; the checkpoint's filesystem, size and the RAM it saw) are kept
beside the phases. The lines are those of vLLM 0.11 (the reference server's) to 0.32 (the sandbox's);
tests/fixtures/journals/ holds them with their sources. Standard library only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from host.contract import Phase, StartPhases

# `journalctl -o short-iso-precise`: time, host, identifier[pid]: message.
_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) \S+ ([^\s\[:]+)(?:\[(\d+)\])?: ?(.*)$"
)
# vLLM's logger: an optional process prefix ("(EngineCore_DP0 pid=441) ", "(Worker_TP3 pid=12) "), the
# level, its own MM-DD HH:MM:SS and [file.py:line].
_VLLM = re.compile(
    r"^(?:\((?P<process>[^)]*?) pid=(?P<pid>\d+)\) )?(?:INFO|WARNING|DEBUG|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] (?P<text>.*)$"
)


@dataclass(frozen=True)
class JournalLine:
    at: float  # seconds since the epoch, as journald received the line
    source: str  # the syslog identifier: "systemd", or the unit's (its stem)
    pid: int | None
    message: str

    @property
    def vllm(self) -> re.Match[str] | None:
        """vLLM's logger line, or None (another program's, a warning printed by Python, a progress bar)."""
        return _VLLM.match(self.message)


def _timestamp(text: str) -> float:
    if text.endswith("Z"):
        text = text[:-1] + "+0000"
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z" if "." in text else "%Y-%m-%dT%H:%M:%S%z").timestamp()


def parse_journal(text: str) -> list[JournalLine]:
    """The lines of `journalctl -o short-iso-precise [-a]` output; others ("-- Boot ...", "-- No entries
    --") are skipped. A progress bar redraws itself after carriage returns: its line keeps the last state,
    also where the text was read with universal newlines (Python's text mode), which turn each of those
    carriage returns into a line of its own without the journal's prefix."""
    lines: list[JournalLine] = []
    for raw in text.split("\n"):
        match = _LINE.match(raw)
        if match is None:
            if lines and raw.strip() and not raw.startswith("-- "):
                lines[-1] = dataclasses.replace(lines[-1], message=raw.strip().split("\r")[-1])
            continue
        stamp, source, pid, message = match.groups()
        pieces = [piece for piece in message.split("\r") if piece.strip()] or [""]
        lines.append(JournalLine(_timestamp(stamp), source, int(pid) if pid else None, pieces[-1].rstrip()))
    return lines


def _systemd(line: JournalLine, verb: str) -> bool:
    return line.source == "systemd" and line.message.startswith(verb + " ")


def last_start(lines: Sequence[JournalLine]) -> list[JournalLine]:
    """The lines of the unit's last start: from systemd's last "Starting" on (all of them when systemd's
    lines are not there), up to and with its "Started", or to the end while it still starts."""
    begin = max((i for i, line in enumerate(lines) if _systemd(line, "Starting")), default=0)
    out = []
    for line in lines[begin:]:
        out.append(line)
        if _systemd(line, "Started"):
            break
    return out


# The marks that end each phase after the engine's first line: (phase, vLLM's message, which of several
# occurrences marks it). A tensor-parallel engine logs the weights once per worker: the last one ends them.
_MARKS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("configuration", re.compile(r"^Initializing a V1 LLM engine"), "first"),
    ("setup", re.compile(r"^Starting to load model"), "first"),
    ("weights", re.compile(r"^(?:Loading weights took|Model loading took)"), "last"),
    ("compile", re.compile(r"^torch\.compile t(?:akes|ook) [\d.]+ s in total"), "last"),
    ("kv-cache", re.compile(r"^(?:Available KV cache memory|\w+ KV cache size: )"), "last"),
    ("graphs", re.compile(r"^Graph capturing finished in"), "last"),
    ("warmup", re.compile(r"^init engine \(profile, create kv cache, warmup model\) took"), "last"),
    ("api-server", re.compile(r"^Starting vLLM (?:API )?server"), "last"),
)
_STARTUP_COMPLETE = "Application startup complete."  # uvicorn's own line, after vLLM's last
_READY = re.compile(r"^wait-ready .*: ready: ")

# What vLLM reports of its own start, by name: the pattern and how to read each group.
_NUMBER = r"([\d,]+(?:\.\d+)?)"
_REPORTED: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(rf"^Loading weights took {_NUMBER} seconds"), ("weightsSeconds",)),
    (
        re.compile(rf"^Model loading took {_NUMBER} GiB(?: memory)? and {_NUMBER} seconds"),
        ("modelGib", "modelLoadSeconds"),
    ),
    (re.compile(rf"^torch\.compile t(?:akes|ook) {_NUMBER} s in total"), ("compileSeconds",)),
    (re.compile(rf"^Graph capturing finished in {_NUMBER} secs, took {_NUMBER} GiB"), ("graphsSeconds", "graphsGib")),
    (
        re.compile(rf"^init engine \(profile, create kv cache, warmup model\) took {_NUMBER} (?:s|seconds)"),
        ("initEngineSeconds",),
    ),
    (re.compile(rf"^Prefetching checkpoint files into page cache finished in {_NUMBER}s"), ("prefetchSeconds",)),
    (re.compile(rf"^Available KV cache memory: {_NUMBER} GiB"), ("kvCacheGib",)),
    (
        re.compile(
            rf"^Filesystem type for checkpoints: (\S+?)\. Checkpoint size: {_NUMBER} GiB\. Available RAM: {_NUMBER} GiB"
        ),
        ("filesystem", "checkpointGib", "availableRamGib"),
    ),
)
_TEXT_FACTS = frozenset({"filesystem"})
# The release: the engine core's first line (all of 0.11-0.32) or the API server's (0.11: "vLLM API server
# version 0.11.0"; 0.32's banner: "... version 0.32.0").
_VERSION = re.compile(r"(?:Initializing a V1 LLM engine \(v|vLLM API server version |\bversion )(\d+\.\d+[\w.+-]*)")
_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")


def _reported(messages: Iterable[str]) -> dict[str, Any]:
    """vLLM's own figures; of a figure each worker reports, the largest (the slowest worker's)."""
    found: dict[str, Any] = {}
    for text in messages:
        version = _VERSION.search(text)
        if version is not None and "vllmVersion" not in found:
            found["vllmVersion"] = version.group(1)
        for pattern, names in _REPORTED:
            match = pattern.match(text)
            if match is None:
                continue
            for name, value in zip(names, match.groups(), strict=True):
                if name in _TEXT_FACTS:
                    found[name] = value.lower()
                else:
                    number = float(value.replace(",", ""))
                    found[name] = max(number, found.get(name, number))
    return found


def phases_of(lines: Sequence[JournalLine]) -> StartPhases | None:
    """The phases of the last start in `lines` (a unit's journal); None when it holds no engine line."""
    start = last_start(lines)
    if not start:
        return None
    began = start[0].at
    vllm_lines = [(line, match) for line in start if (match := line.vllm) is not None]
    if not vllm_lines:
        return None
    first_line, _ = vllm_lines[0]
    engine_pid = first_line.pid
    marks: dict[str, float] = {}
    # The checks: what ran before the engine's own first line, in processes other than the engine's and
    # wait-ready's (which runs beside the engine from its first second).
    engine_begins = next(
        (line.at for line in start if line.pid == engine_pid and line.source != "systemd"), first_line.at
    )
    checks = [
        line.at
        for line in start
        if line.at <= engine_begins
        and line.source != "systemd"
        and line.pid != engine_pid
        and not line.message.startswith("wait-ready")
    ]
    if checks:
        marks["checks"] = max(checks)
    marks["imports"] = first_line.at
    for name, pattern, which in _MARKS:
        times = [line.at for line, match in vllm_lines if pattern.match(match.group("text"))]
        if times:
            marks[name] = times[0] if which == "first" else times[-1]
    complete = [line.at for line in start if line.message.strip() == _STARTUP_COMPLETE]
    if complete:
        marks["api-server"] = max(complete[-1], marks.get("api-server", 0.0))
    end = start[-1]
    ready = _systemd(end, "Started")
    if not ready:
        readies = [line.at for line in start if _READY.match(line.message)]
        ready = bool(readies)
        if readies:
            end = next(line for line in start if line.at == readies[-1])
    if ready:
        marks["ready-check"] = end.at
    phases = []
    previous = began
    for name, at in sorted(marks.items(), key=lambda item: item[1]):
        if at < previous:
            continue  # logged out of order (a worker's late line): its time went to the phase before
        phases.append(Phase(name, round(at - previous, 3)))
        previous = at
    shards = None
    for line in start:
        match = _SHARDS.search(line.message)
        if match is not None:
            shards = (int(match.group(2)), int(match.group(3)))
    return StartPhases(
        started_at=round(began, 6),
        seconds=round(end.at - began, 3),
        ready=ready,
        phases=tuple(phases),
        reported=_reported(match.group("text") for _, match in vllm_lines),
        shards=shards,
    )


def journal_command(unit: str, cursor: str = "") -> list[str]:
    """journalctl reading `unit`'s lines (after `cursor`) as phases_of reads them."""
    command = ["journalctl", "-u", unit, "-o", "short-iso-precise", "-a", "--no-pager"]
    return [*command, "--after-cursor", cursor] if cursor else command


# The phases in the order a start runs them (each one's time ends at its mark, _MARKS).
ORDER: tuple[str, ...] = (
    "checks", "imports", "configuration", "setup", "weights", "compile", "kv-cache", "graphs", "warmup",
    "api-server", "ready-check",
)  # fmt: skip


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def progress_line(
    model: str, phases: StartPhases | None, elapsed: float, size_bytes: int | None, forecast_seconds: float | None
) -> str:
    """One line of a start while it runs, from its journal so far (`phases`: phases_of of the lines since
    the start) and the controller's forecast: "kimi-k2.5-int4: weights 212 of 547 GB, 9 min; about 7 min
    left". The phase it is in is the one after the last mark reached; while the weights load, how many of
    the checkpoint's shards vLLM's loader has done (its progress bar) and what share of the size that is.
    Time left: the forecast less the time gone, or, once past the forecast, the weights' rate so far."""
    reached = {p.name for p in phases.phases} if phases is not None else set()
    current = next((name for name in reversed(ORDER) if name in reached), None)
    if current is None:
        now = "checks and imports"  # vLLM has logged nothing yet
    elif current == ORDER[-1]:
        now = "ready"
    else:
        now = ORDER[ORDER.index(current) + 1]
    what = now
    rate_left: float | None = None
    if now == "weights" and phases is not None and phases.shards is not None:
        done, total = phases.shards[0], phases.shards[-1]
        if size_bytes and total:
            unit, scale = ("GB", 1e9) if size_bytes >= 1e9 else ("MB", 1e6)
            places = 0 if size_bytes >= 10 * scale else 1
            what = f"weights {size_bytes * done / total / scale:.{places}f} of {size_bytes / scale:.{places}f} {unit}"
        else:
            what = f"weights {done} of {total} shards"
        in_weights = elapsed - sum(p.seconds for p in phases.phases)
        if done and total and in_weights > 0:
            rate_left = in_weights * (total - done) / done
    line = f"{model}: {what}, {_duration(elapsed)}"
    if forecast_seconds and forecast_seconds > elapsed:
        return f"{line}; about {_duration(forecast_seconds - elapsed)} left (forecast {_duration(forecast_seconds)})"
    if forecast_seconds:
        line += f"; past its forecast of {_duration(forecast_seconds)}"
    if rate_left is not None:
        line += f"; the weights about {_duration(rate_left)} more at their rate so far"
    return line
