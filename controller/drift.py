"""Drift: where a host differs from what the stack applied, said one way for the preview (controller/checks.py)
and for `make status` (scripts/status.py), both from the host's survey, and the drift-repair counts through
which the next plain `pulumi up` puts it back.

A repair count is a parameter of the step that repairs: the host records the count of the step's last run,
and the program renders one more while the survey finds drift, which changes the step, so `pulumi up` runs
it (and `pulumi preview` shows it); once it ran, the host's count equals the rendered one and nothing
changes until the next drift. The activation (host/tools/swap.py) starts a stopped unit and puts an edited unit
or environment file back; the download step (model-sync sync) fetches missing or changed model files again
and verifies them, while the engine keeps serving what it loaded; the adapters step loads the wanted
adapters again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from host.contract import MODEL_NO_MANIFEST, GpuHolder, Survey, owner_key
from models.config import ResolvedDeployment
from render.units import render_unit


@dataclass(frozen=True)
class Applied:
    """What the stack applies for one deployment on its host, which drift is measured against: rendered by
    the program (`applied`), or read back from the stack's outputs by `make status` (`from_status_entry`)."""

    owner: str
    unit: str
    unit_sha256: str
    model_dir: str
    gpus: tuple[int, ...]

    @classmethod
    def from_status_entry(cls, entry: Mapping[str, Any]) -> Applied:
        """From a deployment's status entry in the stack's outputs (render/report.spec)."""
        return cls(
            str(entry["owner"]),
            str(entry["unit"]),
            str(entry["unitSha256"]),
            str(entry["modelDir"]),
            tuple(int(g) for g in entry.get("gpus") or ()),
        )


def applied(rd: ResolvedDeployment, stack: str) -> Applied:
    return Applied(
        owner_key(stack, rd.deployment.name),
        rd.unit_name,
        hashlib.sha256(render_unit(rd, stack).text.encode()).hexdigest(),
        rd.model_path,
        tuple(rd.deployment.gpus),
    )


def unit_drift(want: Applied, found: Survey) -> list[str]:
    """What differs in the deployment's unit on the host from what the stack applied: missing, edited by
    hand (against the unit its deployment staged there, else the applied digest), stopped or failed, not
    enabled, or its secret environment file changed. The activation repairs each of them."""
    unit = found.unit(want.unit)
    if unit is None or unit.sha256 is None:
        return [f"{want.unit} is missing from the host"]
    problems = []
    expected = unit.staged_sha256 or want.unit_sha256
    if unit.sha256 != expected:
        problems.append(f"{want.unit} was edited on the host (sha256 {unit.sha256[:12]}, applied {expected[:12]})")
    if unit.stopped:
        state = unit.active_state + (f" ({unit.sub_state})" if unit.sub_state == "auto-restart" else "")
        problems.append(f"{want.unit} is {state}: it serves nothing (stopped by hand, or it failed)")
    if not unit.enabled:
        problems.append(f"{want.unit} is not enabled: a reboot would not start it")
    if unit.env_matches_staged is False:
        problems.append(f"{want.unit}'s environment file differs from the one the stack staged")
    return problems


def model_drift(model_dir: str, found: Survey) -> str | None:
    """What differs in a model directory from the files model-sync verified there (None: nothing, or the
    survey did not check it)."""
    files = found.models.get(model_dir)
    if files is None or files.verified:
        return None
    return f"model files in {model_dir}: {files.describe()}"


def gpu_drift(want: Applied, holders: Sequence[GpuHolder]) -> list[str]:
    """Processes of other units (or of none) on the deployment's GPUs."""
    return [
        f"PID {h.pid} of {h.unit_name or 'no unit'} holds GPU(s) "
        f"{', '.join(str(g) for g in sorted(set(h.gpus) & set(want.gpus)))} of the deployment"
        for h in holders
        if h.unit_name != want.unit and set(h.gpus) & set(want.gpus)
    ]


def drift(want: Applied, found: Survey) -> list[str]:
    """Everything that differs on the host from what the stack applied, one line each (empty: none): what
    `make status` prints, from the same survey and rules as the preview's repairs."""
    state = found.deployment(want.owner)
    lines = unit_drift(want, found)
    lines += list(state.adapters.drift) if state.adapters is not None else []
    model = model_drift(want.model_dir, found)
    lines += [model] if model is not None else []
    return lines + gpu_drift(want, found.gpu_holders)


def activation_repairs(stack: str, rd: ResolvedDeployment, found: Survey) -> tuple[int, list[str]]:
    """(the drift-repair count the deployment's activation step renders, the drift it repairs). The host's
    count (each activation writes it), plus one while its unit drifted (`unit_drift`). A deployment never
    activated here, or with a swap to another unit pending, activates anyway: nothing to count."""
    state = found.deployment(owner_key(stack, rd.deployment.name))
    if state.record is None or state.record.unit != rd.unit_name:
        return state.repairs, []
    problems = unit_drift(applied(rd, stack), found)
    return state.repairs + (1 if problems else 0), problems


def download_repairs(stack: str, model_dir: str, found: Survey) -> tuple[int, str | None]:
    """(the drift-repair count a download step renders, the drift it repairs): the count the stack's last
    download into `model_dir` recorded, plus one while files there are missing or differ from what was
    verified (or the directory has no verified manifest at all)."""
    files = found.models.get(model_dir)
    if files is None:
        return 0, None
    done = files.repairs.get(stack, 0)
    return (done, None) if files.verified else (done + 1, model_drift(model_dir, found))


def download_line(model_name: str, host: str, model_dir: str, found: Survey) -> str:
    """What the preview says of a download step that runs for drift."""
    files = found.models.get(model_dir)
    if files is not None and files.state == MODEL_NO_MANIFEST:
        return f"model {model_name} on host {host!r}: {model_dir} holds no verified files; this update downloads and verifies them"
    return (
        f"model {model_name} on host {host!r}: {model_drift(model_dir, found)}; this update fetches them again and "
        "verifies them, and the engine serving them keeps serving what it loaded"
    )


def adapter_repairs(stack: str, rd: ResolvedDeployment, found: Survey) -> int:
    """The drift-repair count the deployment's adapters step renders: the host's count, plus one when its
    engine's adapters differ from the wanted ones (one loaded or unloaded by hand), which re-runs the step."""
    adapters = found.deployment(owner_key(stack, rd.deployment.name)).adapters
    if adapters is None:
        return 0
    return adapters.repairs + (1 if adapters.drift else 0)


def adapter_lines(stack: str, rd: ResolvedDeployment, found: Survey) -> list[str]:
    """What this update does to the deployment's LoRA adapters: added, updated, removed, and that no
    engine restarts for it (the adapters step loads them at runtime)."""
    if rd.serving.lora is None:
        return []
    on_host = found.deployment(owner_key(stack, rd.deployment.name)).adapters
    before = dict(on_host.wanted) if on_host is not None else {}
    after = {a.name: a for a in rd.adapters}
    changes = [f"adds {n} ({a.spec.repo}@{a.spec.revision[:12]})" for n, a in after.items() if n not in before]
    changes += [
        f"updates {n} ({before[n][:12]} -> {a.spec.revision[:12]})"
        for n, a in after.items()
        if n in before and before[n] != a.spec.revision
    ]
    changes += [f"removes {n}" for n in before if n not in after]
    lines = []
    if changes:
        lines.append(
            f"deployment {rd.deployment.name!r}: LoRA adapters: {', '.join(changes)}; loaded into the serving "
            "engine at runtime, no restart"
        )
    for problem in on_host.drift if on_host is not None else ():
        lines.append(f"deployment {rd.deployment.name!r}: {problem}; this update loads the wanted adapters again")
    return lines
