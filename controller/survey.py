"""The facts every program run decides on: what runs on each host it may change, read over SSH
(controller/transport.py runs host/tools/survey.py there) in every `pulumi preview` and `pulumi up`, all hosts at
once (at most SURVEY_WORKERS sessions). A cordoned host is never asked (controller/checks.py leaves it out).

The two program runs of one `pulumi up` (its preview, then its update) judge one survey: the preview's run
keeps what it read in .cache/survey/, with the config it was read for and the `pulumi` process that runs
both (`pulumi_operation`), and the update's run of that same process takes it, once, within the reuse window
(REUSE_SECONDS, VLLM_FLEET_SURVEY_REUSE_SECONDS; 0 turns it off: an up that waits longer at its prompt
reads again). Every other run reads the hosts afresh: a `pulumi preview` and the `pulumi up` after it are
two processes, and what an operator did on a host between them (the Automation API's `up` runs no
preview) is seen. No survey older than the window decides anything; each run says how old its facts are
(`age_line`)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from controller.known_hosts import HostKeys
from controller.transport import SurveyFailed, ssh_survey
from host.contract import LaunchQuestion, Survey
from host.facts import lineage
from host.swap_files import write_file
from models.config import ResolvedDeployment
from models.hosts import Host
from render import host_bundle
from render.plan import swap_plan
from render.units import render_unit

# How long the survey of a preview's run may decide the update's run that follows it.
REUSE_SECONDS = 120.0
REUSE_ENV = "VLLM_FLEET_SURVEY_REUSE_SECONDS"
# Surveys at once: each is one `ssh` process, so a fleet's surveys take about as long as its slowest.
SURVEY_WORKERS = 16

__all__ = ["REUSE_SECONDS", "SURVEY_WORKERS", "Facts", "SurveyFailed", "age_line", "reuse_seconds", "survey_all"]


def reuse_seconds(env: Mapping[str, str] = os.environ) -> float:
    """The reuse window: REUSE_SECONDS, or the environment's VLLM_FLEET_SURVEY_REUSE_SECONDS (0: never)."""
    value = env.get(REUSE_ENV, "")
    try:
        return max(0.0, min(float(value), REUSE_SECONDS)) if value.strip() else REUSE_SECONDS
    except ValueError:
        return REUSE_SECONDS


def pulumi_operation(proc: Path = Path("/proc"), pid: int | None = None) -> str | None:
    """The `pulumi` process that runs this program (the nearest ancestor of that name: the CLI starts the
    language host, which starts the program), as PID.start-time, which no other process has; None when
    there is none to be found (the preview's survey then serves no update)."""
    for ancestor in lineage(os.getpid() if pid is None else pid, str(proc)):
        try:
            stat = (proc / str(ancestor) / "stat").read_text()
        except OSError:
            return None
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "pulumi":
            return f"{ancestor}.{fields[19]}"  # field 22 of stat: the start time, in clock ticks since boot
    return None


def survey_key(
    stack: str, host: Host, deployments: Sequence[ResolvedDeployment], model_dirs: Sequence[str], operation: str
) -> str:
    """What a kept survey was read for: the `pulumi` process whose update may take it, the host's config,
    its deployments (their adapters too), the model directories asked about and the survey's own code."""
    material = json.dumps(
        {
            "operation": operation,
            "stack": stack,
            "host": host.model_dump(mode="json"),
            "deployments": [rd.deployment.model_dump(mode="json") for rd in deployments],
            "adapters": [[a.model_dump(mode="json") for a in rd.adapters] for rd in deployments],
            "modelDirs": list(model_dirs),
            "survey": host_bundle.version(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class Facts:
    """Each host's survey, by host name, and how it came: read in this run (how long it took), or the
    survey of the preview's run this update follows (how old it is)."""

    surveys: dict[str, Survey] = field(default_factory=dict)
    read_seconds: dict[str, float] = field(default_factory=dict)
    reused_age: dict[str, float] = field(default_factory=dict)


def _take_kept(path: Path, key: str, now: float, window: float) -> tuple[Survey, float] | None:
    """The kept survey at `path` and its age when it was read for `key` at most `window` seconds ago; the
    file goes either way (a survey decides one update at most)."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    try:
        age = now - float(kept["at"])
        if kept["key"] != key or not 0 <= age <= window:
            return None
        return Survey.from_dict(kept["survey"]), age
    except (KeyError, TypeError, ValueError):
        return None


def _keep(path: Path, key: str, at: float, found: Survey) -> None:
    write_file(path, json.dumps({"key": key, "at": at, "survey": found.to_dict()}))


def survey_all(
    stack: str,
    hosts: Sequence[Host],
    deployments: Sequence[ResolvedDeployment],
    model_dirs: Mapping[str, Sequence[str]],
    private_key: str,
    cache_dir: Path,
    *,
    preview: bool,
    operation: str | None,
    window: float = REUSE_SECONDS,
    clock: Callable[[], float] = time.time,
    host_keys: HostKeys | None = None,
) -> Facts:
    """Every host's survey at once. A preview's run (`preview`) reads each host and keeps what it read for
    the update of the same `pulumi` process (`operation`; None: nothing is kept); an update's run takes a
    kept survey of that process and config at most `window` seconds old, and reads the host otherwise. A
    host whose key came from the stack's known_hosts file (`host_keys`) is checked against that file as it
    is. One SurveyFailed names each host that failed."""
    by_host: dict[str, list[ResolvedDeployment]] = {host.name: [] for host in hosts}
    for rd in deployments:
        by_host.setdefault(rd.host.name, []).append(rd)

    def one(host: Host) -> tuple[Survey, float, bool] | SurveyFailed:
        dirs = list(model_dirs.get(host.name, ()))
        key = survey_key(stack, host, by_host[host.name], dirs, operation or "")
        path = cache_dir / f"{stack}.{host.name}.json"
        keeps = window > 0 and operation is not None
        if not preview and keeps:
            kept = _take_kept(path, key, clock(), window)
            if kept is not None:
                return kept[0], kept[1], True
        started = clock()
        try:
            file = host_keys.survey_file(host) if host_keys is not None else None
            found = ssh_survey(
                host, private_key, dirs, known_hosts=file, questions=launch_questions(stack, by_host[host.name])
            )
        except SurveyFailed as error:
            return error
        if preview and keeps:
            _keep(path, key, started, found)
        return found, clock() - started, False

    with ThreadPoolExecutor(max_workers=max(1, min(SURVEY_WORKERS, len(hosts)))) as pool:
        results = dict(zip((host.name for host in hosts), pool.map(one, hosts), strict=True))
    failures = [str(result) for result in results.values() if isinstance(result, SurveyFailed)]
    if failures:
        raise SurveyFailed("\n".join(failures))
    facts = Facts()
    for name, result in results.items():
        assert not isinstance(result, SurveyFailed)
        found, seconds, reused = result
        facts.surveys[name] = found
        (facts.reused_age if reused else facts.read_seconds)[name] = seconds
    return facts


def launch_questions(stack: str, deployments: Sequence[ResolvedDeployment]) -> list[LaunchQuestion]:
    """What the survey compares for each deployment on a host: the engine that serves it now against the
    launch of its unit as this run renders it, as the swap compares it with the staged one."""
    return [LaunchQuestion.of(swap_plan(rd, stack), render_unit(rd, stack).text) for rd in deployments]


def _hosts(names: Sequence[str]) -> str:
    listed = ", ".join(repr(n) for n in sorted(names)[:5])
    return listed + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def age_line(facts: Facts, window: float) -> str:
    """How old the facts this run decides on are, in one line."""
    parts = []
    if facts.read_seconds:
        slowest = max(facts.read_seconds.values())
        parts.append(f"read now over SSH from host {_hosts(list(facts.read_seconds))} (in {slowest:.1f} s)")
    if facts.reused_age:
        oldest = max(facts.reused_age.values())
        parts.append(
            f"those this `pulumi up`'s preview read from host {_hosts(list(facts.reused_age))}, "
            f"{oldest:.0f} s old (kept at most {window:g} s; {REUSE_ENV}=0 reads them again)"
        )
    return "facts about the hosts: " + "; ".join(parts) if parts else "facts about the hosts: none asked"
