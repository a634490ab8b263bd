"""The facts every program run decides on: what runs on each host it may change, read over SSH
(controller/transport.py runs host/survey.py there) in every `pulumi preview` and `pulumi up`, all hosts at
once (at most SURVEY_WORKERS sessions). A cordoned host is never asked (controller/checks.py leaves it out).

The two program runs of one `pulumi up` (its preview, then its update) judge one survey: a preview's run
keeps what it read in .cache/survey/, with the config it was read for, and the update's run that follows
within the reuse window (REUSE_SECONDS, VLLM_FLEET_SURVEY_REUSE_SECONDS; 0 turns it off) takes it, once,
instead of asking again; an up right after the same checkout's `pulumi preview` of the same config does the
same. Any other run reads the hosts afresh, and no survey older than the window decides anything. Each run
says how old its facts are (`age_line`)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from controller.transport import SurveyFailed, ssh_survey
from host.contract import Survey
from models.base import plain
from models.config import ResolvedDeployment
from models.hosts import Host
from render import host_bundle

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


def survey_key(stack: str, host: Host, deployments: Sequence[ResolvedDeployment], model_dirs: Sequence[str]) -> str:
    """What a kept survey was read for: the host's config, its deployments (their adapters too), the model
    directories asked about and the survey's own code. Another config reads the host afresh."""
    material = json.dumps(
        {
            "stack": stack,
            "host": plain(host),
            "deployments": [plain(rd.deployment) for rd in deployments],
            "adapters": [[plain(a) for a in rd.adapters] for rd in deployments],
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
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"key": key, "at": at, "survey": found.to_dict()}))
    temporary.replace(path)


def survey_all(
    stack: str,
    hosts: Sequence[Host],
    deployments: Sequence[ResolvedDeployment],
    model_dirs: Mapping[str, Sequence[str]],
    private_key: str,
    cache_dir: Path,
    *,
    preview: bool,
    window: float = REUSE_SECONDS,
    clock: Callable[[], float] = time.time,
) -> Facts:
    """Every host's survey at once. A preview's run (`preview`) reads each host and keeps what it read for
    the update that follows; an update's run takes a kept survey of the same config at most `window`
    seconds old, and reads the host otherwise. One SurveyFailed names each host that failed."""
    by_host: dict[str, list[ResolvedDeployment]] = {host.name: [] for host in hosts}
    for rd in deployments:
        by_host.setdefault(rd.host.name, []).append(rd)

    def one(host: Host) -> tuple[Survey, float, bool] | SurveyFailed:
        dirs = list(model_dirs.get(host.name, ()))
        key = survey_key(stack, host, by_host[host.name], dirs)
        path = cache_dir / f"{stack}.{host.name}.json"
        if not preview and window > 0:
            kept = _take_kept(path, key, clock(), window)
            if kept is not None:
                return kept[0], kept[1], True
        started = clock()
        try:
            found = ssh_survey(host, private_key, dirs)
        except SurveyFailed as error:
            return error
        if preview and window > 0:
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
            f"those of the preview before this update for host {_hosts(list(facts.reused_age))}, "
            f"{oldest:.0f} s old (kept at most {window:g} s; {REUSE_ENV}=0 reads them again)"
        )
    return "facts about the hosts: " + "; ".join(parts) if parts else "facts about the hosts: none asked"
