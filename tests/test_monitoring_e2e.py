"""Monitoring end to end: a real Prometheus (Debian's package, run by this test as a child process on
loopback with a config and a data folder of its own; the distribution's service is never started) scrapes
a deployment on the sandbox through its front door (TLS verified against the sandbox's CA, /metrics allowed
for this machine by access.metricsFrom) with the targets and rules that `make monitoring` writes from the
stack's outputs. The series carry the stack's labels; an engine stopped by hand raises the down alert
within its `for:` plus a scrape; `make status` and `pulumi up` repair it and the alert resolves; a
blue/green swap raises no alert and the model label changes. The tests run in file order on one stack
("monitor"), on stand-in GPUs 2 and 3 and port 8001, with short `for:` and scrape intervals."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.processes import answers, free_port
from sandbox.sandbox_env import E2E_PORT, on_host
from scripts import status
from scripts.api_client import client
from scripts.monitoring import promtool_check, write_files
from tests.support.paths import ROOT
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "monitor"
ENDPOINT = sandbox_env.api_url(E2E_PORT).replace("http://", "https://")
CA = sandbox_env.TLS_DIR / "ca.pem"
SCRAPE_SECONDS = 2
# The stack's own thresholds, short enough to watch an alert fire (vllm-fleet:monitoring).
THRESHOLDS = {
    "downForSeconds": 10,
    "driftForSeconds": 10,
    "stuckForSeconds": 30,
    "rateWindowSeconds": 20,
    "scrapeIntervalSeconds": SCRAPE_SECONDS,
}
DOWN = "VllmFleetDeploymentDown"
T = TypeVar("T")


class Prometheus:
    """Debian's prometheus binary, started here on 127.0.0.1 with the generated config."""

    def __init__(self, config: Path, data: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: self._ready() or None, 60, "Prometheus ready")

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited: {self.log.read_text()[-2000:]}"
        return answers(f"{self.url}/-/ready", timeout=2)

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def alerts(self, name: str, state: str = "firing") -> list[dict[str, Any]]:
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"].get("alertname") == name and a["labels"].get("stack") == STACK and a["state"] == state
        ]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Monitored(SandboxStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK)
        self.tmp = tmp
        self.files = tmp / "monitoring"
        self.prometheus: Prometheus | None = None
        self.figures: dict[str, float] = {}

    def set_up(self) -> None:
        if shutil.which("prometheus") is None or shutil.which("promtool") is None:
            pytest.fail("prometheus and promtool are missing: run `make setup` (Debian's prometheus package)")
        self.configure("e2e-tiny-a")

    def tear_down(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        # The alert's timings, for the notes and anyone checking them after a run.
        (ROOT / ".run").mkdir(exist_ok=True)
        (ROOT / ".run" / "monitoring-figures.json").write_text(json.dumps(self.figures, indent=1, sort_keys=True))
        self.destroy(self.stack)

    def configure(self, model: str) -> auto.Stack:
        doc = yaml.safe_load(sandbox_env.e2e_stack_file(model, gpus=[2, 3], port=E2E_PORT))
        config = doc["config"]
        # One name whichever model serves (as the dev stack does), and TLS at the front door.
        config["vllm-fleet:deployments"][0].update(publicUrl=ENDPOINT, servedModelName="chat")
        # This machine reaches the sandbox's front door through its forwarder, from 127.0.0.1.
        sandbox_env.with_tls(config, metrics_from="127.0.0.1")
        config["vllm-fleet:monitoring"] = THRESHOLDS
        self.stack = self.select(doc)
        return self.stack

    def up(self) -> auto.UpResult:
        return self.stack.up(on_output=self.output.append, on_error=self.output.append)

    def write_monitoring(self) -> dict[str, Path]:
        """What `make monitoring` does after each `pulumi up`, from the stack's outputs."""
        output = self.stack.outputs()["monitoring"].value
        return write_files(STACK, output, self.files, ca_file=str(CA), evaluation_interval_seconds=1)


monitored = module_state(Monitored)


def complete(count: int) -> None:
    api = client(ENDPOINT, None, CA, timeout=60, max_retries=0)
    for _ in range(count):
        assert api.completions.create(model="chat", prompt="hello", max_tokens=4).choices


def test_prometheus_scrapes_the_deployment_with_the_stacks_labels(monitored: Monitored) -> None:
    assert monitored.up().summary.result == "succeeded"
    paths = monitored.write_monitoring()
    assert promtool_check(paths) == []
    monitored.prometheus = prom = Prometheus(paths["config"], monitored.tmp / "tsdb", monitored.tmp / "prometheus.log")
    complete(6)
    series = wait_for(
        lambda: prom.query(f'vllm:request_success_total{{stack="{STACK}", deployment="chat"}} > 0'),
        60,
        "vLLM's request counter in Prometheus",
    )
    labels = series[0]["metric"]
    expected = {
        "job": "vllm-fleet",
        "stack": STACK,
        "deployment": "chat",
        "host": "sandbox",
        "nodes": "sandbox",
        "model": "e2e-tiny-a",
        "revision": "main",
        "served_name": "chat",
        "unit": "vllm-e2e-tiny-a.service",
        "cordoned": "false",
        "instance": ENDPOINT.removeprefix("https://").removesuffix("/v1"),
    }
    assert {k: labels.get(k) for k in expected} == expected, labels
    assert labels["model_name"] == "chat"  # vLLM's own label: the name it serves, what the drift alert reads
    [up] = prom.query(f'up{{stack="{STACK}"}}')
    assert up["value"][1] == "1"
    # What the alerts and recording rules read is there: the API's HTTP counter, the histograms, the rules.
    assert prom.query(f'http_requests_total{{stack="{STACK}", handler="/v1/completions", status="2xx"}}')
    for record in ("deployment:vllm_request_success:rate20s", "deployment:vllm_time_to_first_token_seconds:p50_20s"):
        wait_for(lambda: prom.query(f'{record}{{stack="{STACK}"}}'), 30, record)  # noqa: B023 (called at once)
    assert prom.api("rules")["groups"] and not prom.alerts(DOWN, "pending") and not prom.alerts(DOWN)


def test_a_stopped_engine_fires_the_down_alert_and_pulumi_up_resolves_it(monitored: Monitored) -> None:
    prom = monitored.prometheus
    assert prom is not None
    stopped = time.monotonic()
    on_host("systemctl stop vllm-e2e-tiny-a.service")
    limit = THRESHOLDS["downForSeconds"] + 2 * SCRAPE_SECONDS + 5
    wait_for(lambda: prom.alerts(DOWN), limit + 30, "the down alert")
    fired = monitored.figures["downFiredAfterSeconds"] = round(time.monotonic() - stopped, 1)
    print(f"down alert fired {fired} s after the stop (for: {THRESHOLDS['downForSeconds']} s)")
    assert fired <= limit, fired
    [firing] = prom.alerts(DOWN)
    assert firing["labels"]["deployment"] == "chat" and firing["labels"]["model"] == "e2e-tiny-a"
    # The runbook: `make status` names it, `pulumi up` starts the unit again.
    deployments = monitored.stack.outputs()["deployments"].value
    found = status.collect(STACK, deployments, sandbox_env.SSH_KEY.read_text())
    assert any("is inactive" in line for line in found["chat"]["drift"]), found["chat"]["drift"]
    repair = time.monotonic()
    assert monitored.up().summary.result == "succeeded"
    repaired = time.monotonic()
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service").strip() == "active"
    wait_for(lambda: not prom.alerts(DOWN) and not prom.alerts(DOWN, "pending"), 60, "the down alert to resolve")
    monitored.figures["upSeconds"] = round(repaired - repair, 1)
    monitored.figures["resolvedAfterUpStartSeconds"] = round(time.monotonic() - repair, 1)
    monitored.figures["resolvedAfterUpEndSeconds"] = round(time.monotonic() - repaired, 1)
    print(f"repair: {monitored.figures}")
    monitored.stack.preview(expect_no_changes=True)


def test_a_blue_green_swap_raises_no_alert_and_the_model_label_changes(monitored: Monitored) -> None:
    prom = monitored.prometheus
    assert prom is not None
    wait_for(lambda: prom.query(f'up{{stack="{STACK}"}} == 1'), 30, "the target up again")
    # The previous test's down alert has resolved; its last firing sample lies before the window below.
    wait_for(lambda: prom.query(f'ALERTS{{stack="{STACK}"}}') == [], 60, "no alert of the stack")
    monitored.configure("e2e-tiny-b")
    started = time.monotonic()
    started_wall = time.time()
    assert monitored.up().summary.result == "succeeded"
    # The host's own record of the swap: blue/green (the old engine served until the new one answered).
    result = json.loads(on_host("cat /var/lib/vllm-fleet/deployments/monitor.chat/swap-result.json"))
    assert result["timings"]["blue_green"] == 1.0, result
    monitored.write_monitoring()
    wait_for(lambda: prom.query(f'up{{stack="{STACK}", model="e2e-tiny-b"}} == 1'), 60, "the target with the new model")
    # From the swap's start to now and not a second before it (Prometheus' ranges end at the query's time).
    window = f"{math.ceil(time.time() - started_wall)}s"
    # Through the whole swap: the front door answered every scrape and no alert of the stack was even pending.
    assert prom.query(f'min_over_time(up{{stack="{STACK}"}}[{window}]) == 0') == []
    assert prom.query(f'ALERTS{{stack="{STACK}"}}') == []
    assert prom.query(f'max_over_time(ALERTS{{stack="{STACK}"}}[{window}])') == []
    complete(2)
    wait_for(
        lambda: prom.query(f'vllm:request_success_total{{stack="{STACK}", model="e2e-tiny-b"}} > 0'),
        30,
        "the new engine's series with the new model label",
    )
    monitored.figures["swapSeconds"] = round(time.monotonic() - started, 1)
