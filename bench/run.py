"""`make bench`: converge overhead, swap overhead, the swap forecast's error, front-door reloads under a
client, download throughput and fleet-scale preview, measured side by side in one run on this machine, medians of at least 5 runs,
written to bench/RESULTS.md with PNG plots. Needs `make up` first (the dev stack deployed on the sandbox,
the mirror running). Never part of `make test`. `make bench ARGS=swap` runs one section and reports only it;
`make bench ARGS="--keep swap"` runs it and keeps the other sections of the last bench/results.json, each
marked with the date and commit it was measured at."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import engine_trace, forecast_error  # noqa: E402
from controller import config_limit  # noqa: E402
from controller.config_limit import MAX_ARG_STRLEN  # noqa: E402
from models.loader import load_stack_file, read_stack_file  # noqa: E402
from render.checkout import CACHE  # noqa: E402
from sandbox import engine, sandbox_env  # noqa: E402
from sandbox.processes import run_captured  # noqa: E402
from sandbox.sandbox_env import on_host  # noqa: E402
from scripts.fleet_stack import fleet_files, known_hosts_name  # noqa: E402

OUT = ROOT / "bench"
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
# The no-op pairs: on this 2-core machine one `pulumi up` of either side varies by +-0.3 s from run to run,
# as much as the difference measured, so the up's ratio of the medians of 5-6 pairs was 1.38x, 1.51x and
# 1.46x in three runs within an hour; 11 pairs cost a minute more. On 2026-12-05 the pairs' own ratios of
# one 11-pair run spread from 0.93 to 1.33 and two runs within the hour judged the up 1.28x and 1.19x: 21 pairs
# (odd, so the median is a pair's) cost two minutes more and narrow the median's spread by about a quarter.
NOOP_RUNS = int(os.environ.get("BENCH_NOOP_RUNS", "21"))
# The dev stack, or with VLLM_FLEET_SANDBOX_NAME=fleet-N its copy pointed at that sandbox host.
STACK, STACK_FILE = sandbox_env.dev_stack()
STACK_HOSTS = load_stack_file(STACK_FILE).hosts
ENV = engine.engine_env(
    ROOT / ".state", {"PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", "vllm-fleet-dev-sandbox")}
)


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    run_captured(command, cwd=cwd, env=env or ENV, check=True)
    return time.monotonic() - started


def median(values: list[float]) -> float:
    return statistics.median(values)


def medians(rows: list[dict[str, Any]], *columns: str) -> dict[str, float]:
    """`median_<column>` for each of `columns`: the median of that column over `rows`."""
    return {f"median_{column}": median([row[column] for row in rows]) for column in columns}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of what `values` sample, at least `confidence` sure:
    the k-th smallest and the k-th largest value, k the largest rank at which both tails of Binomial(n, 1/2)
    below k together stay within 1 - confidence (with 21 pairs, the 6th of each end: 97.3%). On this
    2-core machine one run of pairs spreads from 0.93x to 1.33x, so a median alone does not say how near
    the target a result is."""
    ordered = sorted(values)
    n = len(ordered)
    k, below = 0, 0.0  # k values at each end may lie outside: P(Binomial(n, 1/2) < k + 1) = below
    while True:
        next_below = below + math.comb(n, k) / 2**n
        if 2 * next_below > 1 - confidence or k + 1 > (n + 1) // 2:
            break
        k, below = k + 1, next_below
    if k == 0:
        raise ValueError(f"{n} values cannot bound a median at {confidence:.0%}")
    return ordered[k - 1], ordered[n - k]


# ---- 1. no-op converge against the floor ------------------------------------------------------------


# The empty program's stack, in its project of the bench's own (empty_project).
FLOOR_STACK = "floor"


def empty_project(tmp: Path, env: dict[str, str]) -> Path:
    """The floor: the same engine and backend running a Python program that declares nothing. Its project
    has a name of the bench's own: the bench removes its stack at the end, and a project called `floor` in
    the same backend (one timed by hand, say) lost its stack to that."""
    project = tmp / "floor"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: vllm-fleet-bench-floor\nruntime:\n  name: python\n  options:\n    virtualenv: .venv\n"
    )
    (project / "__main__.py").write_text("import pulumi  # noqa: F401\n")
    (project / ".venv").symlink_to(ROOT / ".venv")
    run_captured(["pulumi", "stack", "select", "--create", FLOOR_STACK], cwd=project, env=env, check=True)
    return project


def fresh_pulumi_home(tmp: Path) -> dict[str, str]:
    """The engine's environment with a PULUMI_HOME of this run's own, its plugins those of make setup. The
    CLI reads its folder of automatic logs (one file per command, kept 7 days or 500 MB) at every start:
    after a `make test` it holds thousands of files, which added ~90 ms to every command of both sides and
    so flattered the ratio. A fresh folder measures what a new machine sees."""
    return {**ENV, "PULUMI_HOME": str(engine.home_with_shared_plugins(tmp / "pulumi-home"))}


def graph_replay_project(tmp: Path, env: dict[str, str]) -> Path:
    """The graph floor (bench/graph_replay.py): a project of vllm-fleet's name on the same stack whose
    program declares the stack's resources from its exported state and nothing else. The export holds the
    stack's secrets in plaintext (the sandbox's SSH key), so it is written only into this run's temporary
    folder, readable by its owner alone. Its preview must be a no-op, or the bench stops: a replay that
    differed would time something else (and its `up` would change the stack)."""
    project = tmp / "graph-replay"
    project.mkdir(mode=0o700)
    (project / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (project / f"Pulumi.{STACK}.yaml").write_text(STACK_FILE.read_text())
    (project / "__main__.py").write_text((OUT / "graph_replay.py").read_text())
    (project / ".venv").symlink_to(ROOT / ".venv")
    exported = run_captured(
        ["pulumi", "stack", "export", "--stack", STACK, "--show-secrets"], cwd=ROOT, env=env, check=True
    ).stdout
    descriptor = os.open(project / "graph.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as graph:
        graph.write(exported)
    run_captured(["pulumi", "preview", "--stack", STACK, "--expect-no-changes"], cwd=project, env=env, check=True)
    return project


def ssh_sessions() -> int:
    """SSH logins the sandbox's sshd accepted so far; read with nsenter, so reading opens none."""
    out = run_captured(
        [
            str(sandbox_env.HOST_SH),
            "exec",
            "sh",
            "-c",
            "journalctl -u ssh --no-pager -o cat | grep -c 'Accepted publickey' || true",
        ],
        check=True,
    ).stdout
    return int(out.strip() or 0)


def pair_ratios(results: dict[str, list[float]], verb: str) -> list[float]:
    """Each interleaved pair's own ratio, ours over the empty program's."""
    return [ours / floor for ours, floor in zip(results[verb], results[f"floor_{verb}"], strict=True)]


def pair_differences(results: dict[str, list[float]], verb: str) -> list[float]:
    """Each interleaved pair's own difference, ours minus the empty program's, in seconds."""
    return [ours - floor for ours, floor in zip(results[verb], results[f"floor_{verb}"], strict=True)]


def bench_noop(tmp: Path) -> dict[str, Any]:
    env = {**fresh_pulumi_home(tmp), "VLLM_FLEET_BENCH_ROOT": str(ROOT)}
    floor = empty_project(tmp, env)
    replay = graph_replay_project(tmp, env)
    results: dict[str, list[float]] = {
        "preview": [],
        "up": [],
        "floor_preview": [],
        "floor_up": [],
        "graph_preview": [],
        "graph_up": [],
    }
    # A warm-up: the engine's and the program's files in the page cache, the host package compressed once.
    # Every counted run reads the host (controller/survey.py): a preview once, an up once (its update takes
    # its preview's survey).
    timed(["pulumi", "preview", "--stack", STACK, "--expect-no-changes"], ROOT, env)
    sessions_before = ssh_sessions()
    for _ in range(NOOP_RUNS):
        results["preview"].append(timed(["pulumi", "preview", "--stack", STACK, "--expect-no-changes"], ROOT, env))
        results["floor_preview"].append(timed(["pulumi", "preview", "--stack", FLOOR_STACK], floor, env))
        results["graph_preview"].append(
            timed(["pulumi", "preview", "--stack", STACK, "--expect-no-changes"], replay, env)
        )
        results["up"].append(timed(["pulumi", "up", "--stack", STACK, "--yes", "--expect-no-changes"], ROOT, env))
        results["floor_up"].append(timed(["pulumi", "up", "--stack", FLOOR_STACK, "--yes"], floor, env))
        results["graph_up"].append(
            timed(["pulumi", "up", "--stack", STACK, "--yes", "--expect-no-changes"], replay, env)
        )
    sessions = ssh_sessions() - sessions_before
    traces = traced_noop_ups({"ours": ROOT, "graph": replay, "floor": floor}, tmp, env)
    run_captured(["pulumi", "stack", "rm", FLOOR_STACK, "--yes", "--force"], cwd=floor, env=env)
    med = {k: median(v) for k, v in results.items()}
    pairs = {verb: pair_ratios(results, verb) for verb in ("preview", "up")}
    extra = {verb: pair_differences(results, verb) for verb in ("preview", "up")}
    # How sure each pairs' median is (median_interval), as [low, high]; a short sanity run has too few pairs
    # to say, and median_interval refuses it.
    intervals: dict[str, list[float]] = {}
    for verb in ("preview", "up"):
        with contextlib.suppress(ValueError):
            intervals[f"pair_ratio_{verb}_interval"] = list(median_interval(pairs[verb]))
            intervals[f"pair_extra_{verb}_interval"] = list(median_interval(extra[verb]))
    return {
        "runs": results,
        "median": med,
        "ratio_preview": med["preview"] / med["floor_preview"],
        "ratio_up": med["up"] / med["floor_up"],
        # The measure: each interleaved pair's own ratio, then their median. A pair shares the
        # machine's moment (its load, its caches), which the two medians, taken apart, do not.
        "pair_ratio_preview": median(pairs["preview"]),
        "pair_ratio_up": median(pairs["up"]),
        # Issue 43's measure: what the program, its survey included, adds to the empty program, in seconds.
        "pair_extra_preview": median(extra["preview"]),
        "pair_extra_up": median(extra["up"]),
        **intervals,
        "ratio_graph_preview": med["graph_preview"] / med["floor_preview"],
        "ratio_graph_up": med["graph_up"] / med["floor_up"],
        "ssh_sessions_during_noop": sessions,
        "ssh_sessions_expected": 2 * NOOP_RUNS * len(STACK_HOSTS),
        "trace": traces,
    }


# Traced runs per program: each `up` under tracing is slower (the SDK instruments the program's gRPC calls),
# so they are timed apart from the pairs above, and only to say where the time goes.
TRACED_RUNS = 3


def traced_noop_ups(projects: dict[str, Path], tmp: Path, env: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per program, the median seconds of each part of a no-op `pulumi up` (bench/engine_trace.py), from
    the engine's OpenTelemetry spans. The traces hold the stack's secrets: they are written into this run's
    temporary folder (its owner's alone) and deleted as soon as they are read. A trace the engine did not
    write, or one bench/engine_trace.py cannot cut, leaves the table out with the reason: it only says where the
    time goes, and the timed pairs before it stand."""
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in projects}
    for i in range(TRACED_RUNS):
        for name, project in projects.items():
            trace = tmp / f"trace-{name}-{i}.json"
            stack = FLOOR_STACK if name == "floor" else STACK
            try:
                timed(["pulumi", "up", "--stack", stack, "--yes", "--otel-traces", f"file://{trace}"], project, env)
                parts[name].append(engine_trace.read_breakdown(trace))
            except (subprocess.CalledProcessError, OSError, ValueError) as error:
                print(f"bench: noop: no breakdown of the traced ups ({name}: {error}); the table is left out")
                return {}
            finally:
                trace.unlink(missing_ok=True)
    return {name: {part: median([run[part] for run in runs]) for part in runs[0]} for name, runs in parts.items()}


# ---- 2. swaps: downtime as the client feels it, per mode, and the controller's overhead -------------

TIMING = re.compile(r"timing: (.+)$", re.M)
PUBLIC_URL = sandbox_env.api_url(8000)


def engine_start_to_ready(unit: str, since: str) -> float:
    """From the engine's process start to wait-ready's "ready", from the journal. The process starts
    right after the last ExecStartPre (clean-shm) logs; its own first line comes seconds later, after
    vLLM's imports, which are the engine's time, not ours."""
    lines = on_host(f"journalctl -u {unit} --since '{since}' -o short-unix --no-pager").splitlines()
    first_engine = next(i for i, line in enumerate(lines) if "APIServer pid=" in line)
    start = next(float(line.split()[0]) for line in reversed(lines[:first_engine]) if "clean-shm:" in line)
    ready = next(float(line.split()[0]) for line in lines if "wait-ready" in line and ": ready:" in line)
    return ready - start


def timings(out: str) -> dict[str, float]:
    match = TIMING.search(out)
    if match is None:
        raise RuntimeError(f"no timing line in the swap's output:\n{out[-2000:]}")
    return {k: float(v.rstrip("s")) for k, v in (pair.split("=") for pair in match.group(1).split())}


def the_two_models() -> tuple[str, str, str]:
    """The dev stack file's text as it is, the tiny model it serves, and the other one (a swap's target)."""
    current = read_stack_file(STACK_FILE)["deployments"][0]["model"]
    return STACK_FILE.read_text(), current, "tiny-chat-b" if current == "tiny-chat-a" else "tiny-chat-a"


def serving(original: str, current: str, model: str, stop_start: bool) -> str:
    """The dev stack file's text with `model` in place of `current`, every model kept on disk (so no swap
    downloads), and swapMode stop-start where asked."""
    text = original.replace(f"      model: {current}\n", f"      model: {model}\n")
    text = text.replace("      keep: false\n", "      keep: true\n")
    return text.replace("      port: 8000\n", "      port: 8000\n      swapMode: stop-start\n") if stop_start else text


def pulumi_up() -> str:
    """`pulumi up` of the dev stack as its file says now; what it printed."""
    return run_captured(["pulumi", "up", "--stack", STACK, "--yes"], cwd=ROOT, env=ENV, check=True).stdout


def served_name() -> str:
    """The name the dev stack's deployment serves under (its model's name unless it names one)."""
    deployment = read_stack_file(STACK_FILE)["deployments"][0]
    return str(deployment.get("servedModelName", deployment["model"]))


def bench_swap() -> dict[str, Any]:
    """Swaps of the dev stack between the two tiny models (both kept on disk, so no swap downloads), with
    the downtime probe sending a completion every 100 ms through the front door: first blue/green (the
    dev stack lists two GPUs), then stop-then-start (swapMode: stop-start). The first swaps are a warm-up."""
    from scripts.downtime_probe import DowntimeProbe

    original, current, other = the_two_models()
    served = served_name()

    def up_with(model: str, mode: str) -> tuple[str, float]:
        STACK_FILE.write_text(serving(original, current, model, stop_start=mode == "stop-start"))
        started = time.monotonic()
        out = pulumi_up()
        return out, time.monotonic() - started

    rows: list[dict[str, Any]] = []
    probe = DowntimeProbe(PUBLIC_URL, served).start()
    try:
        up_with(current, "auto")  # warm-up: keep both models on disk
        up_with(other, "auto")
        up_with(current, "auto")
        # One cycle across both modes, so every swap changes the model (a same-model run would be a no-op).
        models = itertools.cycle((other, current))
        for mode in ("auto", "stop-start"):
            for _ in range(RUNS):
                model = next(models)
                since = on_host("date '+%Y-%m-%d %H:%M:%S'").strip()
                window_start = time.monotonic()
                out, total = up_with(model, mode)
                time.sleep(1)
                seen = probe.report(window_start, time.monotonic())
                timed = timings(out)
                engine_time = engine_start_to_ready(f"vllm-{model.replace('.', '')}.service", since)
                rows.append(
                    {
                        "mode": "blue-green"
                        if timed.get("blue_green") or "swap mode: blue-green" in out
                        else "stop-start",
                        "model": model,
                        "total": total,
                        "stop": timed.get("stop", 0.0),
                        "start_to_ready": timed["start_to_ready"],
                        "engine_start_to_ready": engine_time,
                        "prewarm": timed.get("prewarm", 0.0),
                        "overhead": total - engine_time,
                        "longest_gap": seen["longest_gap_s"],
                        "failed": seen["failed"],
                        "stalled": seen["stalled"],
                        "requests": seen["requests"],
                    }
                )
                print(f"bench: swap {rows[-1]}", flush=True)
    finally:
        probe.stop()
        STACK_FILE.write_text(original)
        pulumi_up()
    modes: dict[str, Any] = {}
    for mode in ("blue-green", "stop-start"):
        picked = [r for r in rows if r["mode"] == mode]
        if picked:
            modes[mode] = {
                "swaps": len(picked),
                **medians(picked, "longest_gap"),
                "max_longest_gap": max(r["longest_gap"] for r in picked),
                # Each swap's gap beyond its own engine's start-to-ready (what a stop-then-start adds).
                "max_gap_beyond_start": max(r["longest_gap"] - r["start_to_ready"] for r in picked),
                "failed": sum(r["failed"] for r in picked),
                "stalled": sum(r["stalled"] for r in picked),
                "requests": sum(r["requests"] for r in picked),
                **medians(picked, "start_to_ready", "total", "overhead"),
                "median_engine": median([r["engine_start_to_ready"] for r in picked]),
            }
    return {"rows": rows, "modes": modes}


# ---- 2a. the swap forecast against the start that came ----------------------------------------------

TOOLS_DIR = "/usr/local/lib/vllm-fleet"


def bench_forecast() -> dict[str, Any]:
    """Stop-then-start swaps of the dev stack between the two tiny models (both kept on disk), each a plain
    `pulumi up` whose activation carries the program's forecast to the host, read back from the start
    record the host kept beside what came (bench/forecast_error.py)."""
    from host.contract import StartRecord, Survey

    original, current, other = the_two_models()
    python = read_stack_file(STACK_FILE)["hosts"][0].get("runtime", {}).get("python", "/opt/vllm-env/bin/python3")

    def up(model: str) -> str:
        STACK_FILE.write_text(serving(original, current, model, stop_start=True))
        return pulumi_up()

    def swap(model: str) -> StartRecord:
        up(model)
        found = Survey.from_json(on_host(f"{python} {TOOLS_DIR}/survey"))
        return max((r for r in found.starts if r.loaded.model == model), key=lambda r: r.at)

    try:
        up(current)  # both models on disk, the current one serving (a first deploy, or nothing to do)
        # Each model's first swap goes on the rates; from its second on, on its own starts here.
        return forecast_error.run_series([other, current] * RUNS, swap, load=lambda: os.getloadavg()[0])
    finally:
        STACK_FILE.write_text(original)
        pulumi_up()


# ---- 2b. pre-warm: what reading the model into the page cache before the stop saves the load --------

BIG_MODEL = "/shared/bench-prewarm"
MAKE_BIG_MODEL = f"""
import json, os, shutil, torch
from safetensors.torch import save_file
src, dst = "/shared/tiny-chat-a", "{BIG_MODEL}"
os.makedirs(dst, exist_ok=True)
for name in os.listdir(src):
    if name.endswith((".json", ".jinja", ".txt")) and not name.startswith("model"):
        shutil.copy(os.path.join(src, name), dst)
config = json.load(open(os.path.join(src, "config.json")))
h, i, layers = 1024, 4096, 32
config.update(hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=16,
              num_key_value_heads=16, tie_word_embeddings=False)
json.dump(config, open(os.path.join(dst, "config.json"), "w"))
vocab = config["vocab_size"]
torch.manual_seed(0)
def w(*shape):
    return (torch.randn(*shape) * 0.02).to(torch.bfloat16)
shards, weight_map = [dict(), dict(), dict(), dict()], dict()
shards[0]["model.embed_tokens.weight"] = w(vocab, h)
for n in range(layers):
    p = f"model.layers.{{n}}."
    part = shards[1 + n * 3 // layers]
    part[p + "input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    part[p + "post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        part[p + "self_attn." + proj + ".weight"] = w(h, h)
    part[p + "mlp.gate_proj.weight"] = w(i, h)
    part[p + "mlp.up_proj.weight"] = w(i, h)
    part[p + "mlp.down_proj.weight"] = w(h, i)
shards[3]["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
shards[3]["lm_head.weight"] = w(vocab, h)
for k, part in enumerate(shards):
    name = f"model-{{k + 1:05d}}-of-00004.safetensors"
    save_file(part, os.path.join(dst, name), metadata={{"format": "pt"}})
    weight_map.update({{t: name for t in part}})
json.dump({{"metadata": {{}}, "weight_map": weight_map}}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
"""
EVICT = f"""
import os
for root, _, files in os.walk("{BIG_MODEL}"):
    for name in files:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
"""
LOAD_UNIT = "vllm-fleet-bench-load.service"


# Below Linux's ephemeral range (32768-60999): at 38000 a client connection that had that local port made
# the engine's bind fail (EADDRINUSE) in one run.
LOAD_PORT = 31800


def load_once(prewarmed: bool) -> dict[str, float]:
    """Evict the model from the page cache, pre-warm it or not, start an engine on it and time it to
    /health; the bytes its processes read from storage (/proc/PID/io read_bytes: the sandbox's cgroups are
    v1 here, so there is no per-unit io.stat) are what the page cache did not serve."""
    on_host(f"/opt/vllm-env/bin/python3 -c '{EVICT}'")
    prewarm_s = 0.0
    if prewarmed:
        started = time.monotonic()
        on_host(f"/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/prewarm cache --dir {BIG_MODEL} --margin-gib 2")
        prewarm_s = time.monotonic() - started
    on_host(
        f"systemd-run --unit={LOAD_UNIT} --collect --quiet -p KillMode=control-group "
        "-E CUDA_VISIBLE_DEVICES=3 -E VLLM_CPU_KVCACHE_SPACE=1 -E VLLM_CPU_OMP_THREADS_BIND=nobind "
        "-E HF_HUB_OFFLINE=1 -E VLLM_NO_USAGE_STATS=1 -E TMPDIR=/tmp "
        f"/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server --model {BIG_MODEL} "
        f"--host 127.0.0.1 --port {LOAD_PORT} --enforce-eager --dtype float32 --max-model-len 512"
    )
    started = time.monotonic()
    try:
        while (
            on_host(f"curl -sf -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{LOAD_PORT}/health || true").strip()
            != "200"
        ):
            if time.monotonic() - started > 600:
                raise RuntimeError(f"{LOAD_UNIT} did not answer /health within 600 s")
            if on_host(f"systemctl is-active {LOAD_UNIT} || true").strip() not in ("active", "activating"):
                raise RuntimeError(f"{LOAD_UNIT} exited before it answered: journalctl -u {LOAD_UNIT}")
            time.sleep(0.5)
        ready_s = time.monotonic() - started
        read = on_host(
            f"for p in $(cat /sys/fs/cgroup/systemd/system.slice/{LOAD_UNIT}/cgroup.procs); do "
            "awk '/^read_bytes/ {print $2}' /proc/$p/io 2>/dev/null; done | awk '{s += $1} END {print s + 0}'"
        )
    finally:
        on_host(f"systemctl stop {LOAD_UNIT}", check=False)
    return {"start_to_health_s": ready_s, "read_bytes": float(read.strip() or 0), "prewarm_s": prewarm_s}


RELOADS = int(os.environ.get("BENCH_RELOADS", "300"))


def bench_reloads() -> dict[str, Any]:
    """The front door reloaded RELOADS times (each swap's switch is one reload) at random 0.1-0.4 s
    intervals while the downtime probe sends a completion every 100 ms through it: the requests that
    fail. With keep-alive, a reload closes the old workers' idle client connections, and a request sent
    on one as it closes fails; the front door keeps none (keepalive_timeout 0)."""
    from scripts.downtime_probe import DowntimeProbe

    probe = DowntimeProbe(PUBLIC_URL, served_name()).start()
    try:
        time.sleep(2)
        on_host(
            f"for i in $(seq {RELOADS}); do systemctl reload vllm-fleet-frontdoor.service; "
            "sleep 0.$((RANDOM % 4 + 1)); done",
            timeout=RELOADS * 2 + 60,
        )
        time.sleep(1)
    finally:
        probe.stop()
    return {"reloads": RELOADS, **probe.report()}


def bench_prewarm() -> dict[str, Any]:
    on_host(
        f"test -s {BIG_MODEL}/model-00004-of-00004.safetensors || /opt/vllm-env/bin/python3 -c '{MAKE_BIG_MODEL}'",
        timeout=900,
    )
    size = int(on_host(f"du -sb {BIG_MODEL} | cut -f1").strip())
    load_once(prewarmed=False)  # warm-up: vLLM's own imports into the page cache
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "prewarmed": []}
    for _ in range(RUNS):
        runs["cold"].append(load_once(prewarmed=False))
        runs["prewarmed"].append(load_once(prewarmed=True))
    summary = {
        mode: {key: median([r[key] for r in rows]) for key in ("start_to_health_s", "read_bytes", "prewarm_s")}
        for mode, rows in runs.items()
    }
    return {"bytes": size, "runs": runs, "median": summary}


# ---- 3. download throughput ---------------------------------------------------------------------------

# 64 shards as Kimi's checkpoint has, 1 GiB in all: big enough that the download's fixed costs (client
# start-up, metadata) do not decide the ratio.
BIG_REPO = "bench/big-64x16m"


def make_big_repo(shards: int = 64, shard_mib: int = 16) -> int:
    repo = ROOT / CACHE / "mirror" / "repos" / BIG_REPO
    if not (repo / f"model-{shards:05d}-of-{shards:05d}.safetensors").exists():
        repo.mkdir(parents=True, exist_ok=True)
        for i in range(1, shards + 1):
            (repo / f"model-{i:05d}-of-{shards:05d}.safetensors").write_bytes(os.urandom(shard_mib << 20))
        (repo / "config.json").write_text('{"model_type": "bench"}\n')
    return sum(p.stat().st_size for p in repo.iterdir())


MIRROR_PID_FILE = ROOT / ".run" / "mirror" / "pid"
# The sandbox's stand-in for a network: the socat pair that carries the mirror's port into the sandbox's
# namespace (sandbox/host.sh start_forwarders), one child of each per connection.
FORWARDER_PID_FILES = [ROOT / ".sandbox" / "pids" / f"fwd-mirror-{side}" for side in ("in", "out")]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads) and of the children it has reaped (/proc/PID/stat
    fields 14-17): a forking forwarder's connections are its children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds(times_output: str) -> float:
    """The children's user + system CPU from bash's `times` (its second line: "0m1.234s 0m0.567s")."""
    line = times_output.strip().splitlines()[-1]
    total = 0.0
    for part in line.split():
        minutes, seconds = part.rstrip("s").split("m")
        total += int(minutes) * 60 + float(seconds)
    return total


def bench_download() -> dict[str, Any]:
    """model-sync (hf download, then every file hashed against the Hub's sha256) against plain `hf download`
    of the same 1 GiB repo from the same mirror, interleaved. Each run also records the CPU seconds of the
    client side (the command and its children, from bash's `times`), of the mirror and of the sandbox's port
    forwarders that carry its bytes (from /proc): on two cores, all of them and the hashing share them. A
    second set runs with the mirror and the forwarders pinned to CPU 0 and the client side to CPU 1
    (taskset), so the serving side takes nothing from the client."""
    size = make_big_repo()
    mirror_pid = int(MIRROR_PID_FILE.read_text().strip())
    forwarder_pids = [int(path.read_text().strip()) for path in FORWARDER_PID_FILES]

    def forwarders_cpu() -> float:
        return sum(process_cpu_seconds(pid) for pid in forwarder_pids)

    env = f"HF_ENDPOINT={sandbox_env.MIRROR_URL} HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_DISABLE_PROGRESS_BARS=1"
    commands = {
        "component": f"{env} /opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/model-sync sync --repo {BIG_REPO} --revision main --dir /shared/bench-component >/dev/null",
        "plain": f"{env} /opt/vllm-env/bin/hf download {BIG_REPO} --revision main --local-dir /shared/bench-plain >/dev/null",
    }
    directories = {"component": "/shared/bench-component", "plain": "/shared/bench-plain"}
    runs: dict[str, list[dict[str, float]]] = {"component": [], "plain": [], "component_pinned": [], "plain_pinned": []}

    def one(mode: str, pin: str = "") -> dict[str, float]:
        on_host(f"rm -rf {directories[mode]}")
        mirror_before, forwarders_before = process_cpu_seconds(mirror_pid), forwarders_cpu()
        started = time.monotonic()
        out = on_host(f"{pin}bash -c {shlex.quote(commands[mode] + '; times')}", timeout=900)
        wall = time.monotonic() - started
        return {
            "wall": wall,
            "client_cpu": children_cpu_seconds(out),
            "mirror_cpu": process_cpu_seconds(mirror_pid) - mirror_before,
            "forwarders_cpu": forwarders_cpu() - forwarders_before,
        }

    for _ in range(RUNS):
        runs["component"].append(one("component"))
        runs["plain"].append(one("plain"))
    # The mirror and the forwarders (the connections they fork inherit it) on CPU 0, the client side on CPU 1.
    serving_side = [mirror_pid, *forwarder_pids]
    for pid in serving_side:
        run_captured(["taskset", "-a", "-p", "-c", "0", str(pid)], check=True)
    try:
        for _ in range(RUNS):
            runs["component_pinned"].append(one("component", "taskset -c 1 "))
            runs["plain_pinned"].append(one("plain", "taskset -c 1 "))
    finally:
        for pid in serving_side:
            run_captured(["taskset", "-a", "-p", "-c", f"0-{(os.cpu_count() or 1) - 1}", str(pid)], check=True)
    rerun: list[float] = []
    for _ in range(RUNS):
        started = time.monotonic()
        on_host(commands["component"])
        rerun.append(time.monotonic() - started)
    on_host("rm -rf /shared/bench-component /shared/bench-plain")
    summary = {
        mode: {
            **medians(picked, "wall", "client_cpu", "mirror_cpu", "forwarders_cpu"),
            # CPUs kept busy by all of them together: near the machine's count, the run waited for CPU.
            "cores_busy": median(
                [(r["client_cpu"] + r["mirror_cpu"] + r["forwarders_cpu"]) / r["wall"] for r in picked]
            ),
        }
        for mode, picked in runs.items()
    }
    for figures in summary.values():
        figures["throughput_mb_s"] = size / figures["median_wall"] / 1e6
    return {
        "bytes": size,
        "cpus": os.cpu_count(),
        "runs": runs,
        "modes": summary,
        "throughput_mb_s": {mode: summary[mode]["throughput_mb_s"] for mode in ("component", "plain")},
        "ratio": summary["plain"]["median_wall"] / summary["component"]["median_wall"],
        "ratio_pinned": summary["plain_pinned"]["median_wall"] / summary["component_pinned"]["median_wall"],
        "median_rerun": median(rerun),
        "reruns": len(rerun),
    }


# ---- 4. fleet-scale preview ---------------------------------------------------------------------------


def tree_rss_kib(root_pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        ppid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        found = re.search(r"^VmRSS:\s+(\d+)", status, re.M)
        rss[int(entry)] = int(found.group(1)) if found else 0
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def config_size(stack_yaml: str, hosts: int) -> config_limit.ConfigSize:
    """The config as the engine hands it to the program (PULUMI_CONFIG, one JSON object of strings, structured
    values JSON-encoded again), which Linux caps at MAX_ARG_STRLEN: its bytes, the bytes each host adds and
    the largest fleet of this shape one stack holds (controller/config_limit.py, which the preview's warning
    uses too)."""
    value = config_limit.engine_value(yaml.safe_load(stack_yaml)["config"])
    return config_limit.measure(value, hosts)


def known_hosts_read_ms(project: Path, stack: str, hosts: int, hashed: bool = False) -> float:
    """What reading the stack's known_hosts file costs every run (controller/known_hosts.resolve: the file
    parsed, checked against `ssh-keygen -lf`, each host's key looked up): the median of 3, in ms. `hashed`:
    the same fleet's file with its names hashed, as `ssh-keygen -H` writes them."""
    from controller import known_hosts
    from models.loader import parse_stack_config

    config = parse_stack_config(read_stack_file(project / f"Pulumi.{stack}.yaml"))
    if hashed:
        hashed_stack = f"{stack}-hashed"
        (project / known_hosts_name(hashed_stack)).write_text(
            fleet_files(hosts, hashed_stack, hashed=True)[known_hosts_name(hashed_stack)]
        )
        # Not validated again (model_copy): the name is the one scripts/fleet_stack.py wrote the file under.
        config = config.model_copy(update={"known_hosts_file": known_hosts_name(hashed_stack)})
    times = []
    for _ in range(3):
        started = time.perf_counter()
        known_hosts.resolve(config, project)
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


def busy_cpu_seconds() -> float:
    """CPU seconds every process of this machine has spent so far (/proc/stat: all but idle and iowait)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_preview(project: Path, stack: str, env: dict[str, str], cap_s: float | None = None) -> dict[str, Any]:
    """Wall seconds, peak resident KiB of the whole process tree, CPU seconds of the tree (the engine with
    the language host, the program and the provider it reaped; other load on the machine inflates the wall
    time, not this), the resources the preview would create, and how many cores others' processes kept busy
    meanwhile (the machine's busy CPU less the tree's, over the wall time). A preview still running after
    `cap_s` is stopped (its process group killed) and said to be (`stopped`): its figures are lower bounds."""
    with tempfile.TemporaryFile("w+") as out:
        busy_before, own_before = busy_cpu_seconds(), own_cpu_seconds()
        process = subprocess.Popen(
            ["pulumi", "preview", "--stack", stack],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        peak = 0
        stopped = False
        started = time.monotonic()
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss_kib(process.pid))
            if cap_s is not None and not stopped and time.monotonic() - started > cap_s:
                os.killpg(process.pid, signal.SIGKILL)
                stopped = True
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        # The machine's busy CPU meanwhile, less this bench's own (its walks of /proc for the peak).
        busy = busy_cpu_seconds() - busy_before - (own_cpu_seconds() - own_before)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what the engine left behind (a provider), if anything
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    if process.returncode != 0 and not stopped:
        raise RuntimeError(f"preview of {stack} failed:\n{text[-3000:]}")
    created = re.search(r"\+ (\d+) to create", text)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "s": elapsed,
        "peak_kib": peak,
        "cpu_s": cpu,
        "resources": float(created.group(1)) if created else 0.0,
        "others_cores": max(0.0, (busy - cpu) / elapsed),
        "stopped": stopped,
        # Whether the program warned that the config nears the engine's limit (controller/config_limit.py).
        "warned_config_limit": float("of the engine's limit of" in text),
    }


# What fleet operators run (docs/fleets.md, "Previewing a fleet"): a preview persists no state, yet this engine's
# file backend serializes the whole snapshot after every step of one and throws it away, which makes a
# preview quadratic in its resources; PULUMI_SKIP_CHECKPOINTS keeps only the final one. Never for `up`.
PREVIEW_ENV = {"PULUMI_SKIP_CHECKPOINTS": "true"}


# The fleet sizes measured; BENCH_FLEET_SIZES=32,128 measures fewer.
FLEET_SIZES = tuple(int(n) for n in os.environ.get("BENCH_FLEET_SIZES", "32,128,256,1024").split(","))
# Above this many hosts each preview runs once (the machine is shared) and the checkpointed comparison,
# quadratic in the resources (128 hosts: minutes, gigabytes), is left out.
FLEET_LARGE = 128


def fleet_project(tmp: Path, name: str) -> tuple[Path, dict[str, str]]:
    """A copy of the project for fleet stacks and the engine's environment for it: a backend of its own (the
    fleet stacks never touch the sandbox nor the repository's state), offline, and, for these production-tier
    fleets on a throwaway local backend, the single-operator opt-out of the shared-backend rule."""
    project = engine.project_copy(tmp / name)
    (tmp / f"{name}-state").mkdir()
    env = engine.engine_env(
        tmp / f"{name}-state",
        {"PULUMI_CONFIG_PASSPHRASE": "bench", "VLLM_FLEET_OFFLINE": "1", "VLLM_FLEET_SINGLE_OPERATOR": "1"},
    )
    return project, env


def fleet_stack_in(project: Path, env: dict[str, str], hosts: int) -> str:
    """Stack `fleet<hosts>` of scripts/fleet_stack.py's reference fleet in the project, each host with its own
    ed25519 key in the known_hosts file beside the stack file (vllm-fleet:knownHostsFile); its stack file's text."""
    stack = f"fleet{hosts}"
    for name, text in fleet_files(hosts, stack).items():
        (project / name).write_text(text)
    run_captured(["pulumi", "stack", "select", "--create", stack], cwd=project, env=env, check=True)
    # A production stack's front doors need API keys (or access.open): one client's, as a user sets it.
    run_captured(
        ["pulumi", "config", "set", "--secret", "--path", "vllm-fleet:apiKeys.bench", "bench-api-key-0123456789"],
        cwd=project,
        env=env,
        check=True,
    )
    return (project / f"Pulumi.{stack}.yaml").read_text()


def bench_fleet(tmp: Path, sizes: tuple[int, ...] = FLEET_SIZES) -> dict[str, Any]:
    """Each size: previews of scripts/fleet_stack.py's reference fleet as fleet operators run them (RUNS up
    to 32 hosts, 2 at 128, one above), then, up to 128 hosts, one with the engine's default checkpoints."""
    project, env = fleet_project(tmp, "fleet")
    results: dict[str, Any] = {}
    for hosts in sizes:
        stack = f"fleet{hosts}"
        text = fleet_stack_in(project, env, hosts)
        size = config_size(text, hosts)
        print(
            f"bench: fleet {hosts}: config {size.total} bytes ({size.share:.0%} of the engine's "
            f"{MAX_ARG_STRLEN // 1024} KiB), {size.per_host:.0f} bytes a host: one stack holds about "
            f"{size.largest_fleet} hosts of this shape",
            flush=True,
        )
        count = RUNS if hosts <= 32 else 2 if hosts <= FLEET_LARGE else 1
        runs = [measure_preview(project, stack, {**env, **PREVIEW_ENV}) for _ in range(count)]
        results[str(hosts)] = {
            **medians(runs, "s", "cpu_s"),
            "peak_rss_mib": max(r["peak_kib"] for r in runs) / 1024,
            "resources": int(runs[0]["resources"]),
            "runs_s": [r["s"] for r in runs],
            "cpu_s": [r["cpu_s"] for r in runs],
            "others_cores": [r["others_cores"] for r in runs],
            "config_bytes": size.total,
            "config_bytes_per_host": size.per_host,
            "largest_fleet": size.largest_fleet,
            "known_hosts_ms": known_hosts_read_ms(project, stack, hosts),
            "warned_config_limit": bool(runs[0]["warned_config_limit"]),
        }
        if hosts == max(sizes):
            results[str(hosts)]["known_hosts_hashed_ms"] = known_hosts_read_ms(project, stack, hosts, hashed=True)
        if hosts <= FLEET_LARGE and not os.environ.get("BENCH_FLEET_NO_CHECKPOINTED"):
            checkpointed = measure_preview(project, stack, env)
            results[str(hosts)]["checkpointed"] = {
                "s": checkpointed["s"],
                "peak_rss_mib": checkpointed["peak_kib"] / 1024,
                "cpu_s": checkpointed["cpu_s"],
            }
        print(f"bench: fleet {hosts} {results[str(hosts)]}", flush=True)
    return results


# ---- 5. what each SDK change of controller/sdk.py is worth at fleet scale ------------------------------

# The sizes, and the rounds: in each round every variant of each size runs once, in an order rotated from
# the round before, so that each variant's runs share the machine's moments with the others'; medians.
SDK_SIZES = tuple(int(n) for n in os.environ.get("BENCH_SDK_SIZES", "256,1024").split(","))
SDK_ROUNDS = int(os.environ.get("BENCH_SDK_ROUNDS", "3"))
# A preview with a change off still running after this is stopped, and not run again: that change is
# plainly needed (the 1,024-host preview's bound is 120 s).
SDK_CAP_S = float(os.environ.get("BENCH_SDK_CAP_S", "300"))
# BENCH_SDK_CHANGES=a,b: switch only these off (more rounds for a change whose worth is near the bound).
SDK_CHANGES = [name for name in os.environ.get("BENCH_SDK_CHANGES", "").split(",") if name]
# What a change must save of a preview's CPU, at one of the sizes at least, to be kept. CPU, not wall time: on
# this shared 2-core machine others' load moved a 1,024-host preview's wall time by up to 2.6x (three runs
# of one variant: 46, 61 and 119 s) and its CPU by about a tenth (61, 65 and 68 s).
SDK_KEEP_SHARE = 0.05
EVERY_CHANGE = "every change made"


def bench_sdk(tmp: Path) -> dict[str, Any]:
    """The fleet previews of SDK_SIZES hosts with every change of controller/sdk.py made, and with each one
    switched off in turn (VLLM_FLEET_SDK_OFF), SDK_ROUNDS times interleaved: each change's worth in time,
    CPU and peak memory."""
    from controller import sdk

    project, env = fleet_project(tmp, "sdk")
    for hosts in SDK_SIZES:
        fleet_stack_in(project, env, hosts)
    variants = [EVERY_CHANGE, *(c.name for c in sdk.CHANGES if not SDK_CHANGES or c.name in SDK_CHANGES)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {str(h): {v: [] for v in variants} for h in SDK_SIZES}
    for round_ in range(SDK_ROUNDS):
        for hosts in SDK_SIZES:
            for variant in variants[round_ % len(variants) :] + variants[: round_ % len(variants)]:
                done = runs[str(hosts)][variant]
                if any(run["stopped"] for run in done):
                    continue
                off = "" if variant == EVERY_CHANGE else variant
                run = measure_preview(project, f"fleet{hosts}", {**env, **PREVIEW_ENV, sdk.OFF_ENV: off}, SDK_CAP_S)
                done.append(run)
                print(
                    f"bench: sdk {hosts} hosts, {variant} off: {run}" if off else f"bench: sdk {hosts} hosts: {run}",
                    flush=True,
                )
    for size, by_variant in runs.items():
        counts = {int(run["resources"]) for v in by_variant.values() for run in v if not run["stopped"]}
        if len(counts) != 1:
            raise RuntimeError(f"the {size}-host previews differ with a change off: {sorted(counts)} resources")
    return {"rounds": SDK_ROUNDS, "cap_s": SDK_CAP_S, "variants": variants, "runs": runs}


def sdk_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A variant's medians (wall s, CPU s, peak MiB over its runs) and whether a run was stopped at the cap."""
    return {
        "s": median([r["s"] for r in runs]),
        "cpu_s": median([r["cpu_s"] for r in runs]),
        "peak_mib": max(r["peak_kib"] for r in runs) / 1024,
        "stopped": any(r["stopped"] for r in runs),
        "runs": len(runs),
        "others_cores": median([r["others_cores"] for r in runs]),
    }


def sdk_table(sdk: dict[str, Any]) -> list[str]:
    """Each change's worth: what switching it off costs each size's preview, against every change made."""
    sizes = sorted(sdk["runs"], key=int)
    figures = {h: {v: sdk_figures(runs) for v, runs in sdk["runs"][h].items() if runs} for h in sizes}
    header = " | ".join(f"{int(h):,} hosts: wall, CPU, peak" for h in sizes)
    lines = [
        "",
        f"What each SDK change of `controller/sdk.py` is worth (`make bench ARGS=fleet`: the offline previews, "
        f"each change switched off in turn with VLLM_FLEET_SDK_OFF, {sdk['rounds']} interleaved rounds, medians; "
        f"a preview past {sdk['cap_s']:.0f} s is stopped there and not run again, its figures then lower bounds). "
        f"A change is kept when switching it off costs at least {SDK_KEEP_SHARE:.0%} more CPU at one size (the "
        "measure others' load inflates least; wall time beside it). Others' load: the cores the machine's other "
        "processes kept busy during the runs (median).",
        "",
        f"| switched off | {header} | others' load | verdict |",
        "| --- |" + " --- |" * (len(sizes) + 2),
    ]
    for variant in sdk["variants"]:
        cells = []
        worth = 0.0
        loads = []
        for h in sizes:
            row = figures[h].get(variant)
            if row is None:
                cells.append("-")
                continue
            loads.append(row["others_cores"])
            base = figures[h][EVERY_CHANGE]
            more = "> " if row["stopped"] else ""
            if variant == EVERY_CHANGE:
                cells.append(f"{row['s']:.1f} s, {row['cpu_s']:.1f} s, {row['peak_mib']:.0f} MiB")
                continue
            shares = [
                row["s"] / base["s"] - 1,
                row["cpu_s"] / base["cpu_s"] - 1,
                row["peak_mib"] / base["peak_mib"] - 1,
            ]
            worth = max(worth, shares[1])
            cells.append(
                f"{more}{row['s']:.1f} s ({more}{shares[0]:+.0%}), {more}{row['cpu_s']:.1f} s ({more}{shares[1]:+.0%}), "
                f"{row['peak_mib']:.0f} MiB ({shares[2]:+.0%})"
            )
        verdict = (
            "-"
            if variant == EVERY_CHANGE
            else "kept"
            if worth >= SDK_KEEP_SHARE
            else f"saves < {SDK_KEEP_SHARE:.0%}: not kept"
        )
        load = f"{median(loads):.2f} cores" if loads else "-"
        lines.append(f"| {variant} | {' | '.join(cells)} | {load} | {verdict} |")
    return lines


# ---- the survey of many hosts at once ------------------------------------------------------------------

# Hosts surveyed at once; BENCH_SURVEY_SIZES=1,8 measures fewer. At most 8 here: the N hosts are one
# sandbox's sshd, which drops unauthenticated connections beyond 10 at once (its MaxStartups 10:30:100:
# 16 sessions failed with "kex_exchange_identification: Connection closed"); a fleet's hosts have an sshd each.
SURVEY_SIZES = tuple(int(n) for n in os.environ.get("BENCH_SURVEY_SIZES", "1,2,4,8").split(","))


def bench_survey(tmp: Path) -> dict[str, Any]:
    """What every program run now pays to read its hosts (controller/survey.py): the survey of N hosts at
    once, as a preview runs it (every host asked over its own SSH session, the host package piped into its
    python3, the stack's model directories checked). There is one sandbox host per checkout here, so the N
    hosts are N names of the test host (the dev stack's): N sessions in parallel against one sshd and one
    systemd, on this machine's cores beside the controller's N ssh clients, which is a bound for a fleet's
    hosts, each answering on its own. RUNS each; the time per host is the wall time over N."""
    from controller import checks
    from controller import survey as host_survey

    config = load_stack_file(STACK_FILE)
    host = config.hosts[0]
    dirs = checks.model_dirs(config).get(host.name, [])
    key = sandbox_env.SSH_KEY.read_text()
    results: dict[str, Any] = {"workers": host_survey.SURVEY_WORKERS}
    for size in SURVEY_SIZES:
        # Not validated again (model_copy): `-i` keeps a host name a Name (the test host's is short).
        hosts = [host.model_copy(update={"name": f"{host.name}-{i}"}) for i in range(size)]
        walls = []
        for _ in range(RUNS):
            started = time.monotonic()
            host_survey.survey_all(
                STACK, hosts, [], {h.name: dirs for h in hosts}, key, tmp / "survey", preview=True, operation=None
            )
            walls.append(time.monotonic() - started)
        results[str(size)] = {"median_s": median(walls), "per_host_s": median(walls) / size, "runs_s": walls}
        print(f"bench: survey {size} {results[str(size)]}", flush=True)
    return results


def survey_rows(survey: dict[str, Any]) -> list[str]:
    sizes = sorted(int(n) for n in survey if n.isdigit())
    measured = "; ".join(
        f"{n} host{'s' if n > 1 else ''}: {survey[str(n)]['median_s']:.2f} s, {survey[str(n)]['per_host_s']:.3f} s/host"
        for n in sizes
    )
    runs = len(survey[str(sizes[0])]["runs_s"]) if sizes else 0
    return [
        f"| the survey of many hosts at once, as every preview and up runs it (N SSH sessions in parallel, at most "
        f"{survey['workers']} at a time, against the test sandbox host) | {measured} | {runs} each | - (reported: "
        "time per host) | - |"
    ]


# ---- report -------------------------------------------------------------------------------------------


def bench_backend(tmp: Path) -> dict[str, Any]:
    """No-op `pulumi up` of one stack (a host and its storage on the sandbox) with its state in PostgreSQL
    (sandbox/postgres.py, TLS on loopback) vs the same stack on a local file backend, interleaved."""
    from sandbox.postgres import Cluster

    db = Cluster().start()
    backends = {"postgres": db.url(), "file": f"file://{tmp / 'backend-file'}"}
    (tmp / "backend-file").mkdir()
    project = engine.project_copy(tmp / "backend")
    envs = {
        kind: engine.engine_env(
            tmp, {"PULUMI_BACKEND_URL": url, "PULUMI_CONFIG_PASSPHRASE": "bench", **db.client_env()}
        )
        for kind, url in backends.items()
    }
    results: dict[str, Any] = {kind: [] for kind in backends}
    try:
        for kind, env in envs.items():
            config = yaml.safe_load(sandbox_env.storage_stack_file(f"/srv/vllm-fleet-bench-{kind}"))
            config["config"]["vllm-fleet:sshPrivateKeyFile"] = str(sandbox_env.SSH_KEY)
            (project / f"Pulumi.bench-{kind}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            subprocess.run(["pulumi", "stack", "init", f"bench-{kind}"], cwd=project, env=env, check=True)
            subprocess.run(["pulumi", "up", "--yes", "--stack", f"bench-{kind}"], cwd=project, env=env, check=True)
        for _ in range(RUNS):
            for kind, env in envs.items():
                command = ["pulumi", "up", "--yes", "--expect-no-changes", "--stack", f"bench-{kind}"]
                results[kind].append(timed(command, project, env))
    finally:
        for kind, env in envs.items():
            subprocess.run(
                ["pulumi", "destroy", "--yes", "--stack", f"bench-{kind}"], cwd=project, env=env, check=False
            )
            subprocess.run(["pulumi", "stack", "rm", "--yes", f"bench-{kind}"], cwd=project, env=env, check=False)
            on_host(f"rm -rf /srv/vllm-fleet-bench-{kind}")
        db.stop()
    return {
        "runs": RUNS,
        "median_s": {kind: median(runs) for kind, runs in results.items()},
        "runs_s": results,
    }


def machine() -> str:
    """This machine as it describes itself: CPU model, cores, memory."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    memory_kib = int(re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M).group(1))  # type: ignore[union-attr]
    return f"{model.group(1).strip() if model else 'unknown CPU'}, {os.cpu_count()} cores, {memory_kib / 2**20:.0f} GiB"


def plot(results: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    if "noop" in results:
        noop = results["noop"]["median"]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        # A results.json from before the graph replay was measured has no graph_* figures.
        labels = ["preview", "graph\npreview", "floor\npreview", "up", "graph\nup", "floor\nup"]
        keys = ["preview", "graph_preview", "floor_preview", "up", "graph_up", "floor_up"]
        shown = [(label, key) for label, key in zip(labels, keys, strict=True) if key in noop]
        ax.bar(
            [label for label, _ in shown],
            [noop[key] for _, key in shown],
            color=["C7" if key.startswith("floor") else "C1" if key.startswith("graph") else "C0" for _, key in shown],
        )
        ax.set_ylabel("seconds (median)")
        ax.set_title("No-op converge of the dev stack vs an empty program")
        fig.tight_layout()
        fig.savefig(OUT / "noop.png")
        files.append("noop.png")
    if "fleet" in results:
        fleet = results["fleet"]
        hosts = sorted(int(h) for h in fleet)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(hosts, [fleet[str(h)]["median_s"] / h for h in hosts], "o-", label="s/host, PULUMI_SKIP_CHECKPOINTS")
        ax.plot(hosts, [fleet[str(h)]["median_cpu_s"] / h for h in hosts], "^-", label="CPU s/host")
        checked = [h for h in hosts if "checkpointed" in fleet[str(h)]]
        if checked:
            ax.plot(
                checked,
                [fleet[str(h)]["checkpointed"]["s"] / h for h in checked],
                "s--",
                label="s/host, engine default",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("hosts (two models each, one serving)")
        ax.set_ylabel("seconds per host")
        ax.legend()
        ax.set_title("pulumi preview at fleet scale (no host contacted)")
        fig.tight_layout()
        fig.savefig(OUT / "fleet.png")
        files.append("fleet.png")
    return files


def yes(met: bool) -> str:
    return "yes" if met else "no"


# Issue 43's bound on a no-op: the program, its survey of the hosts included, adds at most this many seconds
# to the empty program (the median of the interleaved pairs' differences). It replaced issue 23's ratio
# (1.2x) with no SSH session, which no longer holds: every run reads the hosts it may change.
NOOP_EXTRA_SECONDS = 1.0


def noop_row(noop: dict[str, Any], verb: str, runs: int) -> str:
    """A no-op's row: judged, as issue 43 asks, on the median of the interleaved pairs' own differences;
    the medians and the pairs' ratio beside it. Results from before the differences were kept are judged
    on the difference of the medians."""
    ours, floor = noop["median"][verb], noop["median"][f"floor_{verb}"]
    extra = noop.get(f"pair_extra_{verb}")
    judged = extra if extra is not None else ours - floor
    interval = noop.get(f"pair_extra_{verb}_interval")
    ratio = noop.get(f"pair_ratio_{verb}", noop[f"ratio_{verb}"])
    measured = (
        f"{ours:.2f} s vs {floor:.2f} s: +{judged:.2f} s"
        + (" (median of the pairs' differences" if extra is not None else " (difference of the medians")
        + (f"; 95% interval +{interval[0]:.2f} to +{interval[1]:.2f} s)" if interval is not None else ")")
        + f"; {ratio:.2f}x"
    )
    met = judged <= NOOP_EXTRA_SECONDS
    # A median on the target's near side whose interval reaches past it is not reliably under it.
    edge = met and interval is not None and interval[1] > NOOP_EXTRA_SECONDS
    verdict = yes(met) + (f" (at the edge: the interval reaches past +{NOOP_EXTRA_SECONDS:g} s)" if edge else "")
    return (
        f"| no-op `pulumi {verb}` of the dev stack, its survey included, vs empty program (interleaved pairs) | "
        f"{measured} | {runs} each | <= empty + {NOOP_EXTRA_SECONDS:g} s (median of the pairs) | {verdict} |"
    )


def ssh_row(noop: dict[str, Any], runs: int) -> str:
    """The SSH logins of the counted no-ops: one per host for each preview and each up (whose update takes
    its preview's survey); runs from before every run surveyed expected none."""
    sessions, expected = noop["ssh_sessions_during_noop"], noop.get("ssh_sessions_expected", 0)
    meaning = "one per preview and one per up (its update reuses its preview's)" if expected else "0"
    return f"| SSH logins during the no-op runs | {sessions} | {runs} each | {expected}: {meaning} | {yes(sessions == expected)} |"


def trace_table(trace: dict[str, dict[str, float]]) -> list[str]:
    """Where a no-op `pulumi up`'s time goes, per program (bench/engine_trace.py says how each part is cut)."""
    names = {"ours": "vllm-fleet", "graph": "graph replay", "floor": "empty program"}
    shown = [name for name in names if name in trace]
    phases = [*engine_trace.PHASES, engine_trace.PROVIDER_START]
    total = {name: sum(trace[name][phase] for phase in engine_trace.PHASES) for name in shown}
    lines = [
        "",
        "Where a no-op `pulumi up`'s time goes, from the engine's own OpenTelemetry spans (`--otel-traces`; "
        "bench/engine_trace.py), summed over the up's two plans; medians of "
        f"{TRACED_RUNS} traced runs each, in ms. Tracing slows the program's start (the SDK instruments its gRPC "
        "calls), so these runs are not the timed ones above.",
        "",
        "| part | " + " | ".join(names[name] for name in shown) + " |",
        "| --- |" + " --- |" * len(shown),
    ]
    for phase in phases:
        lines.append(f"| {phase} | " + " | ".join(f"{1000 * trace[name][phase]:.0f}" for name in shown) + " |")
    lines.append("| total | " + " | ".join(f"{1000 * total[name]:.0f}" for name in shown) + " |")
    return lines


def provenance(results: dict[str, Any], measured: dict[str, dict[str, str]], fresh: list[str]) -> str:
    """Which figures this run measured, and when and at which commit the kept ones were."""
    if set(fresh) == set(results):
        return f"Every figure comes from this run alone ({', '.join(results)})"
    kept = [f"{name} ({measured[name]['at']}, {measured[name]['commit']})" for name in results if name not in fresh]
    return f"Figures of this run: {', '.join(fresh)}; kept from earlier runs (`--keep`): {', '.join(kept)}"


def report(results: dict[str, Any], files: list[str], measured: dict[str, dict[str, str]], fresh: list[str]) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}. "
        f"{provenance(results, measured, fresh)}; each is the median of the runs named "
        "beside it. Raw numbers: `bench/results.json`.",
        "",
        "| benchmark | measured | runs | target | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    if "noop" in results:
        noop = results["noop"]
        n = len(noop["runs"]["up"])
        lines += [
            noop_row(noop, "preview", n),
            noop_row(noop, "up", n),
            ssh_row(noop, n),
        ]
        if "ratio_graph_up" in noop:  # measured since the graph replay exists
            lines.append(
                f"| the same no-ops of a program that declares the stack's resources from its state and nothing else (bench/graph_replay.py: what the engine and the SDK need for this graph) vs empty program | preview {noop['median']['graph_preview']:.2f} s = {noop['ratio_graph_preview']:.2f}x, up {noop['median']['graph_up']:.2f} s = {noop['ratio_graph_up']:.2f}x | {n} each | - (where the time goes) | - |"
            )
    if "swap" in results:
        for mode, m in results["swap"]["modes"].items():
            target = "0 failed" if mode == "blue-green" else "each gap <= its start-to-ready + 2 s"
            # A swap's gap is judged against its own engine's start (a max against a median mixed two runs).
            met = m["failed"] == 0 if mode == "blue-green" else m.get("max_gap_beyond_start", 99.0) <= 2
            lines.append(
                f"| swap downtime, {mode} (client: a completion every 100 ms through the front door) | longest gap "
                f"{m['median_longest_gap']:.2f} s (max {m['max_longest_gap']:.2f} s), {m['failed']} of {m['requests']} "
                f"requests failed, {m['stalled']} stalled > 1 s; engine start-to-ready {m['median_start_to_ready']:.2f} s"
                + (
                    f", longest gap beyond its start at most {m['max_gap_beyond_start']:.2f} s "
                    if mode == "stop-start" and "max_gap_beyond_start" in m
                    else " "
                )
                + f"| {m['swaps']} | {target} | {yes(met)} |"
            )
            # The engine's own part of every `pulumi up`, measured beside it: what no program can take off.
            floor = (
                f"; of it, the engine's floor (an empty program's `pulumi up` here) "
                f"{results['noop']['median']['floor_up']:.2f} s"
                if "noop" in results
                else ""
            )
            lines.append(
                f"| swap overhead, {mode} (total - engine start-to-ready) | {m['median_overhead']:.2f} s of "
                f"{m['median_total']:.2f} s total{floor} | {m['swaps']} | < 5 s | {yes(m['median_overhead'] < 5)} |"
            )
    if "forecast" in results:
        lines.append(forecast_error.summary_row(results["forecast"]))
    if "survey" in results:
        lines += survey_rows(results["survey"])
    if "reloads" in results:
        rl = results["reloads"]
        lines.append(
            f"| front door reloads under a client (a completion every 100 ms) | {rl['failed']} of {rl['requests']} "
            f"requests failed, longest gap {rl['longest_gap_s']:.2f} s | {rl['reloads']} reloads | 0 failed "
            f"| {yes(rl['failed'] == 0)} |"
        )
    if "prewarm" in results:
        pw = results["prewarm"]
        cold, warm = pw["median"]["cold"], pw["median"]["prewarmed"]
        lines += [
            f"| engine start to /health, {pw['bytes'] / 1e9:.2f} GB model evicted from the page cache vs pre-warmed "
            f"| {cold['start_to_health_s']:.2f} s vs {warm['start_to_health_s']:.2f} s (pre-warm itself "
            f"{warm['prewarm_s']:.2f} s, while the old model serves); this disk reads the 1 GB in about a second, "
            f"so the load is not bound by it here | {len(pw['runs']['cold'])} each | - (reported) | - |",
            f"| bytes the engine read from storage during its load, cold vs pre-warmed | "
            f"{cold['read_bytes'] / 1e6:.0f} MB vs {warm['read_bytes'] / 1e6:.0f} MB | {len(pw['runs']['cold'])} each "
            f"| less | {yes(warm['read_bytes'] < cold['read_bytes'])} |",
        ]
    if "download" in results:
        download = results["download"]
        lines += [
            f"| download throughput, component vs plain `hf download` ({download['bytes'] / 1e6:.0f} MB, 65 files) | {download['throughput_mb_s']['component']:.0f} vs {download['throughput_mb_s']['plain']:.0f} MB/s = {download['ratio']:.2f} | {len(download['runs']['plain'])} each | >= 0.95 | {yes(download['ratio'] >= 0.95)} |",
            f"| re-run over a complete 64-shard repository | {download['median_rerun']:.2f} s | {download['reruns']} | < 3 s | {yes(download['median_rerun'] < 3)} |",
        ]
        modes = download["modes"]
        lines += [
            f"| download CPU seconds, {label}: client side (the command and its children) + mirror + the sandbox's "
            f"port forwarders (socat), and the CPUs all kept busy of {download['cpus']} | "
            f"component {modes[c]['median_client_cpu']:.1f} + {modes[c]['median_mirror_cpu']:.1f} + "
            f"{modes[c]['median_forwarders_cpu']:.1f} ({modes[c]['cores_busy']:.2f} busy), "
            f"plain {modes[p]['median_client_cpu']:.1f} + {modes[p]['median_mirror_cpu']:.1f} + "
            f"{modes[p]['median_forwarders_cpu']:.1f} ({modes[p]['cores_busy']:.2f} busy) "
            f"| {len(download['runs'][c])} each | - (profile) | - |"
            for label, c, p in (
                ("shared CPUs", "component", "plain"),
                ("mirror and forwarders on CPU 0, client on CPU 1", "component_pinned", "plain_pinned"),
            )
        ]
        lines.append(
            f"| download throughput with the mirror on its own CPU (taskset: mirror and forwarders CPU 0, client side CPU 1) | "
            f"{modes['component_pinned']['throughput_mb_s']:.0f} vs {modes['plain_pinned']['throughput_mb_s']:.0f} MB/s = {download['ratio_pinned']:.2f} "
            f"| {len(download['runs']['plain_pinned'])} each | >= 0.95 | {yes(download['ratio_pinned'] >= 0.95)} |"
        )
    if "fleet" in results:
        fleet = results["fleet"]
        hosts = sorted(int(h) for h in fleet)
        largest = hosts[-1]
        for h in hosts:
            row = fleet[str(h)]
            target, met = ("-", "-")
            if h == 1024:
                target = "< 120 s, < 4 GiB"
                met = yes(row["median_s"] < 120 and row["peak_rss_mib"] < 4096)
            lines.append(
                f"| `pulumi preview` of {h} host(s), two models each, one serving (PULUMI_SKIP_CHECKPOINTS=true) | "
                f"{row['median_s']:.1f} s = {row['median_s'] / h:.3f} s/host (CPU {row['median_cpu_s']:.1f} s), "
                f"peak {row['peak_rss_mib']:.0f} MiB | {len(row['runs_s'])} | {target} | {met} |"
            )
        # Flat: no size costs more per host than a tenth above the smaller one before it (a fixed cost spread
        # over more hosts makes it fall).
        for label, key in (("wall time", "median_s"), ("CPU time (what other load does not inflate)", "median_cpu_s")):
            per_host = {h: fleet[str(h)][key] / h for h in hosts}
            flat = all(per_host[b] <= 1.1 * per_host[a] for a, b in itertools.pairwise(hosts))
            lines.append(
                f"| {label} per host across sizes | "
                + ", ".join(f"{h}: {per_host[h]:.3f}" for h in hosts)
                + f" s/host | - | not rising (each <= 1.1 x the size before) | {yes(flat)} |"
            )
        checked = [h for h in hosts if "checkpointed" in fleet[str(h)]]
        if checked:
            lines.append(
                "| the same previews with the engine's default checkpoints (a snapshot serialized after every step) | "
                + ", ".join(
                    f"{h}: {fleet[str(h)]['checkpointed']['s']:.1f} s, "
                    f"{fleet[str(h)]['checkpointed']['peak_rss_mib']:.0f} MiB"
                    for h in checked
                )
                + " | 1 each | - (reported) | - |"
            )
        size = fleet[str(largest)]["config_bytes"]
        lines.append(
            f"| config the engine hands the program at {largest} hosts (PULUMI_CONFIG; what hosts share in "
            f"vllm-fleet:defaults, their keys in vllm-fleet:knownHostsFile, see scripts/fleet_stack.py) | "
            f"{size / 1024:.0f} KiB | - | < {MAX_ARG_STRLEN // 1024} KiB "
            f"(Linux's limit on one environment string) | {yes(size < MAX_ARG_STRLEN)} |"
        )
        if "largest_fleet" in fleet[str(largest)]:
            row = fleet[str(largest)]
            lines.append(
                f"| config bytes a host adds, and the largest fleet of this shape one stack holds (the preview warns "
                f"past {config_limit.WARN_SHARE:.0%} of the limit) | {row['config_bytes_per_host']:.0f} bytes a host: "
                f"about {row['largest_fleet']} hosts | - | - (reported) | - |"
            )
            hashed = f", hashed names {row['known_hosts_hashed_ms']:.0f} ms" if "known_hosts_hashed_ms" in row else ""
            lines.append(
                f"| reading the known_hosts file in every run at {largest} hosts (parse, `ssh-keygen -lf`, each "
                f"host's key) | {row['known_hosts_ms']:.0f} ms{hashed} | 3 | - (reported) | - |"
            )
    if files:
        lines += ["", " ".join(f"![{name.removesuffix('.png')}]({name})" for name in files)]
    if "noop" in results and results["noop"].get("trace"):
        lines += trace_table(results["noop"]["trace"])
    if "fleet" in results:
        lines += [
            "",
            "Fleet previews (`make bench ARGS=fleet`; medians; PULUMI_SKIP_CHECKPOINTS=true; two models per host, one "
            "serving; no host contacted):",
            "",
            "| hosts | resources | median s | s/host | CPU s/host | peak RSS MiB | config KiB | config B/host | runs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for h in sorted(int(h) for h in results["fleet"]):
            row = results["fleet"][str(h)]
            lines.append(
                f"| {h} | {row['resources']} | {row['median_s']:.1f} | {row['median_s'] / h:.3f} | "
                f"{row['median_cpu_s'] / h:.3f} | {row['peak_rss_mib']:.0f} | {row['config_bytes'] / 1024:.0f} | "
                f"{row.get('config_bytes_per_host', row['config_bytes'] / h):.0f} | {len(row['runs_s'])} |"
            )
    if "sdk" in results:
        lines += sdk_table(results["sdk"])
    if "forecast" in results:
        lines += [
            "",
            "Swap forecasts (`make bench ARGS=forecast`; stop-then-start; forecast before each swap from the host's "
            "survey, as the preview makes it; measured: the swap's start to ready):",
            "",
            *forecast_error.table(results["forecast"]["rows"]),
        ]
    if "swap" in results:
        lines += [
            "",
            "Swap runs (seconds; the client's view beside the host's timings):",
            "",
            "| mode | to | longest gap | failed / requests | total | pre-warm | stop | start to ready | engine start to ready (journal) | overhead |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in results["swap"]["rows"]:
            lines.append(
                f"| {row['mode']} | {row['model']} | {row['longest_gap']:.2f} | {row['failed']} / {row['requests']} | "
                f"{row['total']:.2f} | {row['prewarm']:.2f} | {row['stop']:.2f} | {row['start_to_ready']:.2f} | "
                f"{row['engine_start_to_ready']:.2f} | {row['overhead']:.2f} |"
            )
    return "\n".join(lines) + "\n"


# The hand-written part of bench/RESULTS.md, kept from one run to the next: what was measured once and
# decided (a change kept or dropped, a figure before and after), with the commands that measured it.
HISTORY_HEADING = "## History"


def with_history(generated: str, previous: str) -> str:
    """The generated report followed by the history section of the RESULTS.md it replaces."""
    start = previous.find(f"\n{HISTORY_HEADING}\n")
    return generated if start < 0 else generated + previous[start:]


def main() -> int:
    args = sys.argv[1:]
    # --keep: a partial run keeps the other sections of the last results.json, each with its date and commit.
    keep = "--keep" in args
    only = {a for a in args if a != "--keep"}
    # The fleet previews are offline, with a backend of their own: only the other sections need the sandbox.
    # `fleet` previews the fleets at each size and measures what each SDK change is worth (`sdk`) besides.
    if "fleet" in only:
        only.add("sdk")
    needs_sandbox = not only or bool(only - {"fleet", "sdk"})
    if needs_sandbox and (not sandbox_env.is_up(sandbox_env.HOST_SH) or not sandbox_env.is_up(sandbox_env.MIRROR_SH)):
        print("bench: run `make up` first (the dev stack on the sandbox, with the mirror)", file=sys.stderr)
        return 2
    steps: dict[str, Callable[[Path], Any]] = {
        "noop": bench_noop,
        "swap": lambda _t: bench_swap(),
        "forecast": lambda _t: bench_forecast(),
        "reloads": lambda _t: bench_reloads(),
        "prewarm": lambda _t: bench_prewarm(),
        "download": lambda _t: bench_download(),
        "fleet": bench_fleet,
        "sdk": bench_sdk,
        "backend": bench_backend,
        "survey": bench_survey,
    }
    results_path = OUT / "results.json"
    # Only this run's figures unless --keep: a partial run (`make bench ARGS=noop`) reports just what it measured.
    results: dict[str, Any] = {}
    measured: dict[str, dict[str, str]] = {}
    if keep and results_path.is_file():
        previous = json.loads(results_path.read_text())
        written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(results_path.stat().st_mtime))
        # A file from before --keep existed says nothing of its commit: only when it was written.
        measured = previous.pop("_measured", None) or {
            n: {"at": written, "commit": "commit not recorded"} for n in previous
        }
        results = {name: value for name, value in previous.items() if name in steps and name in measured}
    commit = run_captured(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True).stdout.strip()
    fresh: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, step in steps.items():
            if only and name not in only:
                continue
            print(f"bench: {name} ...", flush=True)
            started = time.monotonic()
            results[name] = step(Path(tmp))
            measured[name] = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit}
            fresh.append(name)
            print(f"bench: {name} done in {time.monotonic() - started:.0f} s", flush=True)
            ordered = {n: results[n] for n in steps if n in results}
            results_path.write_text(json.dumps({**ordered, "_measured": measured}, indent=1, default=str))
    results = {n: results[n] for n in steps if n in results}
    for stale in ("noop.png", "fleet.png"):
        (OUT / stale).unlink(missing_ok=True)
    results_md = OUT / "RESULTS.md"
    previous = results_md.read_text() if results_md.is_file() else ""
    results_md.write_text(with_history(report(results, plot(results), measured, fresh), previous))
    print((OUT / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
