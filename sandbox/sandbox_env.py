"""The sandbox host and the mirror as the end-to-end tests and bench/ use them: bring them up, talk to them,
the stack files that point at them, record timings."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from models.loader import read_stack_file
from sandbox.processes import run_captured

ROOT = Path(__file__).resolve().parent.parent
HOST_SH = ROOT / "sandbox" / "host.sh"
MIRROR_SH = ROOT / "scripts" / "mirror.sh"
# The mirror of scripts/mirror.sh, on the port it and sandbox/host.sh read.
MIRROR_URL = f"http://127.0.0.1:{os.environ.get('VLLM_FLEET_MIRROR_PORT', '18080')}"
MIRROR_TOKEN = "hf_sandboxMirrorToken0000000000000000"
SSH_KEY = ROOT / ".sandbox" / "ssh" / "id_ed25519"
# The sandbox host the single-host end-to-end tests use: the dev sandbox, or (VLLM_FLEET_SANDBOX_NAME=fleet-N,
# as sandbox/host.sh reads it) another one, so a second checkout can run them beside the first.
TEST_HOST = os.environ.get("VLLM_FLEET_SANDBOX_NAME", "sandbox")
_INDEX = 0 if TEST_HOST == "sandbox" else int(TEST_HOST.removeprefix("fleet-"))
SSH_PORT = 2222 if _INDEX == 0 else 2230 + _INDEX
# The test host's address on the fabric (sandbox/host.sh), from which it reaches its own front door.
FABRIC_ADDRESS = f"10.77.0.{10 + _INDEX}"
# The loopback address the test host's requests reach the mirror from (sandbox/host.sh's MIRROR_CLIENT).
MIRROR_CLIENT = f"127.0.0.{10 + _INDEX}"
# The sandbox's throwaway CA and the front door certificate it signed (sandbox/tls.sh, run by `up`).
TLS_DIR = ROOT / ".sandbox" / "tls"


# The port the end-to-end tests' deployments serve on, beside a `make up` deployment of the dev stack
# (port 8000) on the same sandbox host.
E2E_PORT = 8001


def api_url(port: int) -> str:
    """Where this machine reaches the test host's port 8000 or 8001 (sandbox/host.sh forwards them)."""
    return f"http://127.0.0.1:{port + 10000 + 100 * _INDEX}/v1"


def listed_models(endpoint: str, timeout: float = 10) -> list[dict[str, Any]]:
    """What `endpoint` (an api_url) answers to GET /models: vLLM's entries, with each model's id and root."""
    with urllib.request.urlopen(f"{endpoint}/models", timeout=timeout) as response:
        return list(json.load(response)["data"])


def served_ids(endpoint: str, timeout: float = 10) -> list[str]:
    return [m["id"] for m in listed_models(endpoint, timeout)]


def serving_root(endpoint: str) -> str:
    """The model directory `endpoint` serves (vLLM reports it as the model's root)."""
    return str(listed_models(endpoint, timeout=5)[0]["root"])


# What a port raises while it does not answer yet, or not yet with a model list.
NOT_YET = (OSError, KeyError, IndexError, ValueError)


def wait_until(condition: Callable[[], bool], timeout: float, every: float) -> float | None:
    """Until `condition()` holds (a NOT_YET error counts as not yet): the seconds it took; None when out of time."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        with contextlib.suppress(*NOT_YET):
            if condition():
                return time.monotonic() - started
        time.sleep(every)
    return None


def wait_serving(endpoint: str, root: str, timeout: float) -> float:
    """Until `endpoint` answers with the model files at `root`; the seconds it took."""
    took = wait_until(lambda: serving_root(endpoint) == root, timeout, every=0.5)
    if took is None:
        raise AssertionError(f"{root} not served at {endpoint} within {timeout:g} s")
    return took


def boot_of(host: str = TEST_HOST) -> str:
    """Which boot of a sandbox host this is: when its PID 1 started (ticks since this machine booted; the
    kernel's boot id is this machine's, shared by every container). Empty while its sshd does not answer,
    or answers for a system on its way down and never finishes."""
    try:
        return on_host("cut -d ' ' -f 22 /proc/1/stat", check=False, timeout=10, host=host).strip()
    except subprocess.TimeoutExpired:
        return ""


def reboot_until(
    condition: Callable[[], bool], timeout: float, every: float = 1, host: str = TEST_HOST
) -> float | None:
    """Reboot a sandbox host, wait for its sshd in the new boot, then up to `timeout` s until `condition()`
    holds: the seconds from the reboot; None when out of time. The old system goes on answering for a
    moment after `systemctl reboot` returns, and a condition that held before the reboot would hold there
    too: the wait is for another PID 1, not for a pause."""
    before = boot_of(host)
    assert before, f"{host} does not answer before its reboot"
    started = time.monotonic()
    on_host("systemctl reboot", check=False, host=host)
    if wait_until(lambda: boot_of(host) not in ("", before), timeout=300, every=0.5) is None:
        raise AssertionError(f"{host} did not come back in a new boot within 300 s of `systemctl reboot`")
    subprocess.run([str(HOST_SH), "wait"], check=True, timeout=300, env={**os.environ, "VLLM_FLEET_SANDBOX_NAME": host})
    if wait_until(condition, timeout, every) is None:
        return None
    return time.monotonic() - started


def save_results(name: str, results: dict[str, Any]) -> None:
    """A test's numbers, kept in .run/NAME.json for the notes and the benchmarks."""
    path = ROOT / ".run" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=True))


class PhaseResults(dict[str, dict[str, Any]]):
    """What a module's clients saw in each phase, by phase, saved whole to .run/NAME.json as each is recorded."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def record(self, phase: str, seen: dict[str, Any]) -> dict[str, Any]:
        self[phase] = seen
        save_results(self.name, self)
        # The closing notes quote these three for every phase (seen with pytest -s).
        print(
            f"\n[{self.name}] {phase}: {seen.get('requests')} requests, {seen.get('failed')} failed, "
            f"longest gap {seen.get('longest_gap_s')} s"
        )
        return seen


PHASES_FILE = ROOT / ".run" / "e2e-phases.json"
FLEET_PHASES_FILE = ROOT / ".run" / "fleet-phases.json"


def is_up(script: Path) -> bool:
    """The sandbox host or the mirror (scripts/mirror.sh status counts another checkout's) is up."""
    return subprocess.run([str(script), "status"], capture_output=True, check=False).returncode == 0


def bring_up(script: Path, timeout: float) -> None:
    subprocess.run([str(script), "up"], check=True, timeout=timeout)


def take_down(script: Path) -> None:
    subprocess.run([str(script), "down"], check=False, timeout=300)


def on_host(command: str, check: bool = True, timeout: float = 120, host: str = TEST_HOST) -> str:
    """Run a shell command on a sandbox host (the dev one, or fleet-N) over SSH and return its stdout."""
    result = run_captured(
        [str(HOST_SH), "ssh", command], timeout=timeout, env={**os.environ, "VLLM_FLEET_SANDBOX_NAME": host}
    )
    if check and result.returncode != 0:
        raise AssertionError(f"on {host}: {command!r} exited {result.returncode}: {result.stderr}")
    return result.stdout


def download_by_hand(repo: str, directory: str) -> None:
    """A model's files in a plain directory of the test host, fetched from the mirror as a team did before
    vllm-fleet (`hf download --local-dir`)."""
    on_host(
        f"HF_ENDPOINT={MIRROR_URL} HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "
        f"/opt/vllm-env/bin/hf download {repo} --revision main --local-dir {directory} > /dev/null",
        timeout=300,
    )


def install_units_by_hand(units: Mapping[str, str], *, enabled: Sequence[str], started: Sequence[str]) -> None:
    """Unit files written by hand into the test host's /etc/systemd/system, as a team did before
    vllm-fleet: the `enabled` ones enabled, the `started` ones enabled and started."""
    for unit, text in units.items():
        on_host(f"cat > /etc/systemd/system/{unit} <<'EOF'\n{text}EOF")
    on_host(
        f"systemctl daemon-reload && systemctl enable --quiet {' '.join(enabled)} && "
        f"systemctl enable --now --quiet {' '.join(started)}"
    )


def exec_on(host: str, command: str) -> str:
    """Run a shell command on a sandbox host without SSH (nsenter), e.g. while its sshd is stopped."""
    return run_captured(
        [str(HOST_SH), "exec", "/bin/sh", "-c", command],
        timeout=60,
        env={**os.environ, "VLLM_FLEET_SANDBOX_NAME": host},
    ).stdout


def fleet_is_up(hosts: int) -> bool:
    return all(
        subprocess.run(
            [str(HOST_SH), "status"],
            capture_output=True,
            check=False,
            env={**os.environ, "VLLM_FLEET_SANDBOX_NAME": f"fleet-{i}"},
        ).returncode
        == 0
        for i in range(1, hosts + 1)
    )


def mirror(path: str, method: str = "GET", body: Any = None, url: str = MIRROR_URL) -> Any:
    """Ask the mirror's control API (/_mirror/...: stats, faults, config) and return its JSON answer; an
    answer other than 200 raises. The sandbox's mirror, or the one at `url` (a test's own, in process)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{url}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return json.loads(text) if text else None


def add_fault(fault: dict[str, Any], url: str = MIRROR_URL) -> Any:
    """Make the mirror misbehave on the requests `fault["path_glob"]` matches (the fields of
    sandbox/hf_mirror.py's Fault: a delay, a corrupt byte, a dropped connection, a status); returns the
    fault as the mirror took it, in a list."""
    return mirror("/_mirror/faults", "POST", fault, url=url)


def resolve_requests(stats: dict[str, Any], client: str = MIRROR_CLIENT) -> list[dict[str, Any]]:
    """Requests for file contents (HEAD or GET of /resolve/) in the mirror's request log that `client` (by
    default the test host) made: one mirror serves every host, and the other lane's hosts download too."""
    return [r for r in stats.get("log", []) if "/resolve/" in r.get("path", "") and r.get("client") == client]


def dev_config() -> dict[str, Any]:
    """Pulumi.dev.yaml's values without its encrypted ones: a stack file made from them gets a new salt,
    so tests set their secrets through the engine instead."""
    raw = read_stack_file(ROOT / "Pulumi.dev.yaml")
    return {k: v for k, v in raw.items() if not (isinstance(v, dict) and "secure" in v)}


def dev_stack() -> tuple[str, Path]:
    """The dev stack on the test host: Pulumi.dev.yaml itself on the dev sandbox; on fleet-N (a second
    checkout's own host) a copy of it, Pulumi.dev-fleet-N.yaml, pointed at that host's SSH port, API port
    and mirror, with the same salt and secrets. Benchmarks use it, so they never reach another's host."""
    dev = ROOT / "Pulumi.dev.yaml"
    if TEST_HOST == "sandbox":
        return "dev", dev
    text = dev.read_text()
    for old, new in (
        ("      port: 2222\n", f"      port: {SSH_PORT}\n"),
        ("publicUrl: http://127.0.0.1:18000/v1\n", f"publicUrl: {api_url(8000)}\n"),
        ("hfEndpoint: http://127.0.0.1:18080\n", f"hfEndpoint: {MIRROR_URL}\n"),
    ):
        if old not in text:
            raise RuntimeError(f"Pulumi.dev.yaml has no {old.strip()!r} to point at {TEST_HOST}")
        text = text.replace(old, new)
    name = f"dev-{TEST_HOST}"
    copy = ROOT / f"Pulumi.{name}.yaml"
    if not copy.exists() or copy.read_text() != text:
        copy.write_text(text)
    return name, copy


def storage_stack_file(storage: str) -> str:
    """The dev stack's host (the test host's port), no model, no deployment: a host and its storage at
    `storage`. The SSH key is left out: the caller sets it (as a secret of the stack, or as a file)."""
    raw = dev_config()
    raw.pop("sshPrivateKeyFile", None)
    raw["hosts"][0]["port"] = SSH_PORT
    raw["storage"] = [{**raw["storage"][0], "name": "team1", "path": storage}]
    raw["models"], raw["deployments"] = {}, []
    return yaml.safe_dump({"config": {f"vllm-fleet:{k}": v for k, v in raw.items()}}, sort_keys=False)


def tiny_models(prefix: str, keep: bool) -> dict[str, Any]:
    """The sandbox's two tiny chat models (the catalog's tiny-chat-a and tiny-chat-b presets) as a test's own
    models PREFIX-tiny-a and PREFIX-tiny-b, each in a directory of that name, so tests never share files."""
    return {
        f"{prefix}-tiny-{v}": {
            "preset": f"tiny-chat-{v}",
            "dir": f"{prefix}-tiny-{v}",
            "revision": "main",
            "keep": keep,
        }
        for v in ("a", "b")
    }


def e2e_stack_file(
    model: str,
    *,
    gpus: list[int] | None = None,
    port: int = E2E_PORT,
    extra_models: dict[str, Any] | None = None,
    smoke_benchmark: bool = False,
) -> str:
    """A stack file for the sandbox like Pulumi.dev.yaml, with its own model names, GPU and port, so
    it can run beside a `make up` deployment of the dev stack on the same sandbox. The smoke benchmark
    (host/smoke_bench.py after every deploy and swap) only where a test reads it."""
    raw = dev_config()
    raw["sshPrivateKeyFile"] = str(SSH_KEY)
    raw["hfEndpoint"] = MIRROR_URL
    raw["models"] = {
        "e2e-tiny-a": {"preset": "tiny-chat-a", "dir": "e2e-tiny-a", "revision": "main", "keep": True},
        "e2e-tiny-b": {"preset": "tiny-chat-b", "dir": "e2e-tiny-b", "revision": "main", "keep": False},
        **(extra_models or {}),
    }
    # The sandbox's stand-in GPUs 2 and 3 are the tests' (0 and 1 are the dev stack's).
    raw["hosts"][0]["gpus"]["count"] = 4
    raw["hosts"][0]["port"] = SSH_PORT
    deployment = raw["deployments"][0]
    deployment.pop("servedModelName", None)  # each model serves under its own name here
    deployment.pop("smokeBenchmark", None)
    deployment.update(model=model, gpus=gpus if gpus is not None else [3], port=port, publicUrl=api_url(port))
    if smoke_benchmark:
        deployment["smokeBenchmark"] = {"requests": 8, "inputLen": 32, "outputLen": 16, "concurrency": 2}
    return yaml.safe_dump({"config": {f"vllm-fleet:{k}": v for k, v in raw.items()}}, sort_keys=False)


def fleet_config(models: dict[str, Any]) -> dict[str, Any]:
    """Pulumi.fleet.yaml's config for the sandbox's fleet hosts with `models`: its encrypted token left out
    (the tests set the mirror's through the engine), the sandbox's SSH key in place of the operator's, and the
    tests' mirror (MIRROR_URL, as every other stack file of the tests names it)."""
    raw: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.fleet.yaml").read_text())["config"]
    raw.pop("vllm-fleet:hfToken")
    raw["vllm-fleet:hfEndpoint"] = MIRROR_URL
    raw["vllm-fleet:sshPrivateKeyFile"] = str(SSH_KEY)
    raw["vllm-fleet:models"] = models
    # The hosts' keys from a known_hosts file, as a fleet keeps them: the steps and the survey refuse a host
    # whose key is not its own.
    raw["vllm-fleet:knownHostsFile"] = str(known_hosts_file([h["name"] for h in raw["vllm-fleet:hosts"]]))
    return raw


def state_dir(host: str) -> Path:
    """Where sandbox/host.sh keeps a host's state and its client files (ssh/known_hosts)."""
    return ROOT / (".sandbox" if host == "sandbox" else f".sandbox-{host}")


def known_hosts_file(hosts: Sequence[str], path: Path = ROOT / ".run" / "known_hosts.fleet") -> Path:
    """One known_hosts file of the sandbox `hosts`' keys (each host's own, as sandbox/host.sh `up` wrote its
    ssh/known_hosts: `[127.0.0.1]:PORT TYPE KEY`), written at `path` and returned."""
    text = "".join((state_dir(host) / "ssh" / "known_hosts").read_text() for host in hosts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def with_tls(config: dict[str, Any], metrics_from: str) -> None:
    """The front door serves TLS with the sandbox's certificate (sandbox/tls.sh), and /metrics to
    `metrics_from` alone."""
    config["vllm-fleet:access"] = {
        "tls": {"certificateFile": str(TLS_DIR / "server.pem")},
        "metricsFrom": [metrics_from],
    }
    config["vllm-fleet:tlsPrivateKeyFile"] = str(TLS_DIR / "server.key")


class Phases:
    """Durations of each end-to-end phase, written where the benchmarks read them."""

    def __init__(self) -> None:
        self.durations: dict[str, float] = {}

    def measure(self, name: str) -> _Timer:
        return _Timer(self, name)

    def save(self) -> None:
        save_results(PHASES_FILE.stem, self.durations)


class _Timer:
    def __init__(self, phases: Phases, name: str) -> None:
        self.phases, self.name = phases, name

    def __enter__(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.phases.durations[self.name] = round(time.monotonic() - self.start, 2)
        self.phases.save()


def record_phase(phase: str, numbers: dict[str, Any]) -> None:
    """What a client saw in a fleet or multi-node test, kept in .run/fleet-phases.json for the notes."""
    done = json.loads(FLEET_PHASES_FILE.read_text()) if FLEET_PHASES_FILE.exists() else {}
    save_results(FLEET_PHASES_FILE.stem, {**done, phase: numbers})
