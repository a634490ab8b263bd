"""What a host's deployments are doing now, read-only (the `status` tool, host/tools/status.py, prints it as
one JSON document on stdout).

The controller pipes the host package into the host's python3 over SSH (render/host_bundle.py) (`make status`,
scripts/status.py), and the serving step's swap runs it once the deployment serves (the post-deploy report;
its `--bench` runs the smoke benchmark). It takes one JSON argument, {"deployments": [StatusRequest...]}
(host/contract.py; render/report.spec renders each), and answers a StatusReport: per deployment,
  unit        ActiveState, SubState, since (ActiveEnterTimestamp, or the last state change), enabled
  model       its directory against the manifest model-sync verified (repo, revision, "verified",
              "changed: FILES", "incomplete download", "no manifest"), sizes and mtimes only
  metrics     vllm:num_requests_running / waiting from the engine's /metrics on loopback (null when it does not answer)
  vllmVersion the installed vllm distribution of the deployment's python
  lastLoadSeconds  from the journal: the last start job of the unit, from "Starting" to "Started" (the unit's
              ExecStartPost waits until the model serves, so this is the load time)
  adapters    its LoRA adapters: wanted, loaded, drift
  lastStart   its unit's last start as the swap recorded it (host/start_records.py): seconds, phases from the
              journal, the forecast it came with and the downtime it made
  bench       the smoke benchmark (host/smoke_bench.py: random token-id prompts, streamed) when asked:
              output tokens/s, median TTFT and TPOT in ms
and once for the host: its GPUs (nvidia-smi index, memory used/total) and, with `--survey` (`make status`),
the host's survey (host/survey.py, the one the preview reads), from which the controller judges drift with
the preview's own rules (controller/drift.py). Standard library only.
"""

from __future__ import annotations

import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from host import smoke_bench, survey
from host.adapters import adapter_state
from host.contract import STATE_DIR, DeploymentStatus, GpuUse, StatusReport, StatusRequest
from host.model_files import model_state
from host.processes import stdout_of
from host.start_records import read_records
from host.systemd import parse_show

_METRIC = re.compile(r"^(vllm:num_requests_(?:running|waiting))(?:\{[^}]*\})?\s+([0-9.eE+-]+)$")


def unit_facts(unit: str) -> dict[str, str]:
    return parse_show(
        stdout_of("systemctl", "show", unit, "--property=ActiveState,SubState,UnitFileState,ActiveEnterTimestamp,StateChangeTimestamp")
    )  # fmt: skip


def parse_metrics(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _METRIC.match(line.strip())
        if match:
            key = "running" if match.group(1).endswith("running") else "waiting"
            found[key] = found.get(key, 0.0) + float(match.group(2))
    return found


def engine_url(unit: str, fallback: str) -> str:
    """The serving engine on loopback, at the port its placement file names (the swap writes it): the
    front door lets only listed addresses read /metrics and wants an API key for the API."""
    path = f"/etc/vllm-fleet/{unit.removesuffix('.service')}.placement.env"
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("VLLM_FLEET_BACKEND_PORT="):
                    return f"http://127.0.0.1:{int(line.split('=', 1)[1])}"
    except (OSError, ValueError):
        pass
    return fallback


def metrics(base_url: str) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as response:
            return parse_metrics(response.read().decode(errors="replace"))
    except (OSError, ValueError):
        return None


def vllm_version(python: str) -> str | None:
    out = stdout_of(python, "-c", "import importlib.metadata as m; print(m.version('vllm'))").strip()
    return out or None


def start_jobs_journal(unit: str) -> list[str]:
    """journalctl reading only what systemd logged of `unit`'s start jobs (their last 200 lines): a 30-minute
    load logs thousands of engine lines, which a read of the unit's last N lines would have to get past
    (and took ~0.1 s of every report for 2,000 of them, where this takes ~10 ms)."""
    return [
        "journalctl", "-u", unit, "JOB_TYPE=start", "-o", "json", "--output-fields=JOB_TYPE,JOB_RESULT",
        "--no-pager", "-n", "200",
    ]  # fmt: skip


def last_load_seconds(journal_json: str) -> float | None:
    """From `journalctl -u UNIT -o json` lines: the last start job's "Starting" to its "Started" (seconds)."""
    starting: int | None = None
    loaded: float | None = None
    for line in journal_json.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("JOB_TYPE") != "start":
            continue
        at = int(entry.get("__REALTIME_TIMESTAMP", 0))
        result = entry.get("JOB_RESULT")
        if result is None:
            starting = at
        elif result == "done" and starting is not None:
            loaded, starting = round((at - starting) / 1e6, 1), None
    return loaded


def bench(base_url: str, served_name: str, model_dir: str, spec: dict[str, int]) -> dict[str, Any]:
    """The smoke benchmark through the serving engine (host/smoke_bench.py says why not `vllm bench serve`)."""
    return smoke_bench.run(
        base_url,
        served_name,
        requests=int(spec["requests"]),
        input_len=int(spec["inputLen"]),
        output_len=int(spec["outputLen"]),
        concurrency=int(spec["concurrency"]),
        vocab=smoke_bench.vocab_size(model_dir),
    )


def gpus() -> tuple[GpuUse, ...]:
    out = []
    for line in stdout_of(
        "nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"
    ).splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and all(c.isdigit() for c in cells):
            out.append(GpuUse(int(cells[0]), int(cells[1]), int(cells[2])))
    return tuple(out)


def measure(spec: dict[str, Any], with_bench: bool) -> dict[str, Any]:
    """What the report asks of the engines themselves: their load (/metrics), then the smoke benchmarks
    (one engine at a time). A swap runs this as soon as its new engine answers, before the front door
    switches to it (host/tools/swap.py), and hands it to `report`."""
    wanted = requests(spec)
    engines = {d.owner: engine_url(d.unit, d.front_door) for d in wanted}
    # Read before the smoke benchmark sends requests, which the engine would count as running.
    loads = {owner: metrics(url) for owner, url in engines.items()}
    benched = {
        d.owner: bench(engines[d.owner], d.served_name, d.model_dir, d.bench) for d in wanted if with_bench and d.bench
    }
    return {"loads": loads, "bench": benched}


def requests(spec: dict[str, Any]) -> list[StatusRequest]:
    return [StatusRequest.from_dict(entry) for entry in spec.get("deployments", [])]


def report(
    spec: dict[str, Any], with_bench: bool, measured: dict[str, Any] | None = None, with_survey: bool = False
) -> StatusReport:
    """The report of `spec`'s deployments; `measured`: what `measure` found, when it already ran;
    `with_survey`: the host's survey beside it (its model directories those of the deployments)."""
    wanted = requests(spec)
    # The engines' part (the benchmarks) and the reads that wait on other programs (a python for the vLLM
    # version, journalctl, nvidia-smi: ~0.25 s one after another on the sandbox, and up to three times that
    # beside a swap's benchmark and old engine's exit on 2 cores) run side by side: the report is every
    # deploy's last wait.
    with ThreadPoolExecutor(max_workers=3 + 2 * len(wanted)) as pool:
        engines_part = pool.submit(measure, spec, with_bench) if measured is None else None
        gpus_now = pool.submit(gpus)
        surveyed = pool.submit(survey.survey, [d.model_dir for d in wanted]) if with_survey else None
        starts = pool.submit(read_records)
        waits = {
            d.owner: (
                pool.submit(vllm_version, d.python),
                pool.submit(stdout_of, *start_jobs_journal(d.unit)),
            )
            for d in wanted
        }
        if engines_part is not None:
            measured = engines_part.result()
        assert measured is not None
        deployments = {}
        for d in wanted:
            props = unit_facts(d.unit)
            version, journal = waits[d.owner]
            deployments[d.owner] = DeploymentStatus(
                unit=d.unit,
                active_state=props.get("ActiveState", "unknown"),
                sub_state=props.get("SubState", ""),
                since=props.get("ActiveEnterTimestamp") or props.get("StateChangeTimestamp") or "",
                enabled=props.get("UnitFileState", ""),
                model=model_state(Path(d.model_dir), Path(STATE_DIR)),
                metrics=measured["loads"].get(d.owner),
                vllm_version=version.result(),
                # LoRA adapters: wanted, loaded by the serving engine, drift (None: the deployment has none).
                adapters=adapter_state(Path(d.state_dir)),
                last_load_seconds=last_load_seconds(journal.result()),
                bench=measured["bench"].get(d.owner),
                last_start=max(
                    (r for r in starts.result() if r.owner == d.owner and r.unit == d.unit),
                    key=lambda r: r.at,
                    default=None,
                ),
            )
        return StatusReport(deployments, gpus_now.result(), surveyed.result() if surveyed is not None else None)
