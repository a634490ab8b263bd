"""Monitoring rendered from the stack: the file_sd targets and their labels (swaps, cordons, removals, TLS,
a model across hosts), the thresholds as typed config, the rule and config files through `promtool check`,
the alerts and recording rules through `promtool test rules` on synthetic series, and the dashboard."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller import drift
from host.contract import Survey
from models.loader import ConfigError, parse_stack_config
from models.monitoring import Monitoring
from render import monitoring as render
from render import report
from render.units import render_unit
from sandbox.processes import run_captured
from scripts.monitoring import promtool_check, write_files
from tests.support.pulumi_mocks import run_program
from tests.support.stacks import stack_values

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool: scripts/setup.sh installs prometheus")


def output_of(stack: str, raw: dict[str, Any]) -> dict[str, Any]:
    config = parse_stack_config(raw)
    return render.monitoring_output(config.resolved_deployments(), stack, config.monitoring)


def labels_by_deployment(output: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {group["labels"]["deployment"]: group["labels"] for group in output["targets"]}


def test_targets_of_the_dev_stack(dev_raw: dict[str, Any]) -> None:
    [group] = output_of("dev", dev_raw)["targets"]
    assert group["targets"] == ["127.0.0.1:18000"]  # publicUrl: where this machine reaches the front door
    assert group["labels"] == {
        "__scheme__": "http",
        "__metrics_path__": "/metrics",
        "stack": "dev",
        "deployment": "chat",
        "host": "sandbox",
        "nodes": "sandbox",
        "model": "tiny-chat-a",
        "revision": "main",
        "served_name": "chat",
        "unit": "vllm-tiny-chat-a.service",
        "cordoned": "false",
    }


def test_targets_follow_a_swap_and_a_removal(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0]["model"] = "tiny-chat-b"
    labels = labels_by_deployment(output_of("dev", dev_raw))["chat"]
    assert (labels["model"], labels["unit"], labels["served_name"]) == (
        "tiny-chat-b",
        "vllm-tiny-chat-b.service",
        "chat",
    )
    dev_raw["deployments"] = []
    assert output_of("dev", dev_raw)["targets"] == []


def test_targets_with_tls_and_without_public_url(dev_raw: dict[str, Any]) -> None:
    dev_raw["deployments"][0].pop("publicUrl")
    dev_raw["access"] = {"tls": {"certificateFile": "certs/x.pem"}, "metricsFrom": ["10.0.0.5"]}
    [group] = output_of("dev", dev_raw)["targets"]
    assert group["targets"] == ["127.0.0.1:8000"] and group["labels"]["__scheme__"] == "https"
    dev_raw["deployments"][0]["publicUrl"] = "https://gpu-01.example:8443/api/v1"
    [group] = output_of("dev", dev_raw)["targets"]
    assert group["targets"] == ["gpu-01.example:8443"] and group["labels"]["__metrics_path__"] == "/api/metrics"


def test_targets_of_a_fleet_cordons_and_a_model_across_hosts(fleet_raw: dict[str, Any]) -> None:
    labels = labels_by_deployment(output_of("fleet", fleet_raw))
    assert set(labels) == {"chat-1", "chat-2", "across"}
    # One target for a model across hosts: its head, labelled with every node.
    assert labels["across"]["host"] == "fleet-1" and labels["across"]["nodes"] == "fleet-1,fleet-2"
    fleet_raw["hosts"][1]["cordon"] = True
    labels = labels_by_deployment(output_of("fleet", fleet_raw))
    assert labels["chat-2"]["cordoned"] == "true" and labels["chat-1"]["cordoned"] == "false"


def test_thresholds_are_typed_config(dev_raw: dict[str, Any], prod_raw: dict[str, Any]) -> None:
    assert parse_stack_config(prod_raw).monitoring == Monitoring()
    dev_raw["monitoring"] = {"downForSeconds": 20, "kvCacheFraction": 0.9}
    assert parse_stack_config(dev_raw).monitoring.down_for_seconds == 20
    dev_raw["monitoring"] = {"kvCacheFraction": 1.5}
    with pytest.raises(ConfigError, match=r"monitoring.kvCacheFraction"):
        parse_stack_config(dev_raw)
    dev_raw["monitoring"] = {"downFor": 20}
    with pytest.raises(ConfigError, match=r"vllm-fleet:monitoring.downFor: unknown key"):
        parse_stack_config(dev_raw)


def test_the_program_exports_the_monitoring_output(dev_raw: dict[str, Any]) -> None:
    run_program("dev", dev_raw)  # the export renders without a host


def test_durations() -> None:
    assert [render.duration(s) for s in (20, 90, 300, 7200)] == ["20s", "90s", "5m", "2h"]


@needs_promtool
@pytest.mark.parametrize("stack_file", ["dev", "prod", "fleet"])
def test_every_file_passes_promtool_check(stack_file: str, tmp_path: Path) -> None:
    raw = stack_values(stack_file)
    paths = write_files(stack_file, output_of(stack_file, raw), tmp_path, ca_file=str(tmp_path / "ca.pem"))
    (tmp_path / "ca.pem").write_text("")
    assert promtool_check(paths) == []
    assert json.loads(paths["targets"].read_text()) == output_of(stack_file, raw)["targets"]


def test_dashboard_lists_the_deployments_and_imports() -> None:
    board = render.dashboard("fleet", ["chat-1", "chat-2", "across"], Monitoring())
    assert render.dashboard_problems(board) == []
    [variable] = [v for v in board["templating"]["list"] if v["name"] == "deployment"]
    assert [o["value"] for o in variable["options"]] == ["chat-1", "chat-2", "across"]
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert any("deployment:vllm_time_to_first_token_seconds:p99_5m" in e for e in exprs)
    recorded = {r["record"] for r in render.recording_rules("fleet", Monitoring())["groups"][0]["rules"]}
    # Every series the dashboard reads is recorded (or is `up`).
    for expr in exprs:
        assert expr.split("{")[0] in recorded | {"up"}, expr
    broken = copy.deepcopy(board)
    broken["panels"][1]["id"] = broken["panels"][0]["id"]
    broken["panels"][2]["gridPos"]["x"] = 20
    broken["panels"][3]["targets"][0]["expr"] += " + on() vector($nothere)"
    problems = render.dashboard_problems(broken)
    assert len(problems) == 3 and "$nothere" in problems[2], problems


# --- promtool test rules, synthetic series -------------------------------------------------------------

TARGET = 'job="vllm-fleet", stack="dev", deployment="chat", host="sandbox", instance="127.0.0.1:18000"'
SERVING = TARGET + ', model="tiny-chat-a", served_name="chat", cordoned="false"'


def alert(name: str, summary: str, **labels: str) -> dict[str, Any]:
    return {
        "exp_labels": {"stack": "dev", "deployment": "chat", "host": "sandbox", **labels},
        "exp_annotations": {"summary": summary, "runbook": render.RUNBOOK[name]},
    }


def quiet_then_fires(name: str, quiet_at: str, fires_at: str, summary: str, **labels: str) -> list[dict[str, Any]]:
    """promtool's checks that alert `name` is not firing at `quiet_at` and fires at `fires_at`, saying
    `summary` with `labels`."""
    return [
        {"eval_time": quiet_at, "alertname": name, "exp_alerts": []},
        {"eval_time": fires_at, "alertname": name, "exp_alerts": [alert(name, summary, **labels)]},
    ]


def rule_test(name: str, series: dict[str, str], **checks: list[dict[str, Any]]) -> dict[str, Any]:
    """promtool's rule test `name`: the input `series` (series: values, a sample a minute) and its checks
    (alert_rule_test, promql_expr_test)."""
    return {
        "name": name,
        "interval": "1m",
        "input_series": [{"series": key, "values": values} for key, values in series.items()],
        **checks,
    }


def recorded(series: str, value: float) -> dict[str, Any]:
    """promtool's check that the recording rule `series` has `value` for the dev deployment at 10m."""
    labels = 'stack="dev", deployment="chat", host="sandbox", model="tiny-chat-a"'
    return {"expr": series, "eval_time": "10m", "exp_samples": [{"labels": f"{series}{{{labels}}}", "value": value}]}


def rule_tests() -> list[dict[str, Any]]:
    """Dev stack thresholds (the defaults): 5m down, 10m stuck, 16 waiting for 10m, 95% KV for 15m, 2m drift."""
    down_labels = {
        "severity": "critical",
        "job": "vllm-fleet",
        "instance": "127.0.0.1:18000",
        "model": "tiny-chat-a",
        "served_name": "chat",
        "cordoned": "false",
    }
    return [
        rule_test(
            "down after 5m, not before; a cordoned host's target never pages",
            {f"up{{{SERVING}}}": "1 1 0x10", f'up{{{TARGET}, model="x", cordoned="true"}}': "0x12"},
            alert_rule_test=quiet_then_fires(
                "VllmFleetDeploymentDown",
                "6m",
                "7m",
                "chat (tiny-chat-a) on sandbox does not answer its /metrics for 5m",
                **down_labels,
            ),
        ),
        rule_test(
            "requests arrive, none succeeds: stuck for 10m; a success clears it",
            {
                f'http_requests_total{{{SERVING}, handler="/v1/completions", status="5xx"}}': "0+5x30",
                f'http_requests_total{{{SERVING}, handler="/v1/completions", status="2xx"}}': "10x25 11 12 13 14 15",
                # /metrics scrapes succeed all along and are no API request.
                f'http_requests_total{{{SERVING}, handler="/metrics", status="2xx"}}': "0+1x30",
            },
            alert_rule_test=[
                # Arrivals and no success from the first minute on: pending at 1m, firing 10m later.
                *quiet_then_fires(
                    "VllmFleetNoSuccessfulRequests",
                    "10m",
                    "12m",
                    "chat on sandbox receives requests but none succeeded in 5m",
                    severity="critical",
                ),
                {"eval_time": "27m", "alertname": "VllmFleetNoSuccessfulRequests", "exp_alerts": []},
            ],
        ),
        rule_test(
            "requests waiting above 16 for 10m",
            {
                f'vllm:num_requests_waiting{{{SERVING}, model_name="chat", engine="0"}}': "20x20",
                f'vllm:kv_cache_usage_perc{{{SERVING}, model_name="chat", engine="0"}}': "0.97x20",
            },
            alert_rule_test=[
                *quiet_then_fires(
                    "VllmFleetRequestsWaiting",
                    "9m",
                    "10m",
                    "chat on sandbox has 20 requests waiting (more than 16)",
                    severity="warning",
                ),
                *quiet_then_fires(
                    "VllmFleetKvCacheNearlyFull",
                    "14m",
                    "15m",
                    "chat on sandbox uses 97% of its KV cache",
                    severity="warning",
                ),
            ],
        ),
        rule_test(
            "drift: the engine serves another name than the stack applied; a blue/green swap does not",
            {
                f'vllm:num_requests_running{{{SERVING}, model_name="chat", engine="0"}}': "0x4",
                # After the swap the target's model label changes; the served name stays: no drift.
                f'vllm:num_requests_running{{{TARGET}, model="tiny-chat-b", served_name="chat", '
                'cordoned="false", model_name="chat", engine="0"}': "_x5 0x10",
                'vllm:num_requests_running{job="vllm-fleet", stack="dev", deployment="other", host="sandbox", '
                'instance="127.0.0.1:18001", model="x", served_name="other", cordoned="false", '
                'model_name="hand-started", engine="0"}': "0x10",
            },
            alert_rule_test=[
                {"eval_time": "1m", "alertname": "VllmFleetModelDrift", "exp_alerts": []},
                {
                    "eval_time": "3m",
                    "alertname": "VllmFleetModelDrift",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "stack": "dev",
                                "deployment": "other",
                                "host": "sandbox",
                                "served_name": "other",
                                "model_name": "hand-started",
                                "severity": "warning",
                            },
                            "exp_annotations": {
                                "summary": "other on sandbox serves hand-started, the stack applied other",
                                "runbook": render.RUNBOOK["VllmFleetModelDrift"],
                            },
                        }
                    ],
                },
            ],
        ),
        rule_test(
            "recording rules: rates and percentiles from vLLM's counters and histograms",
            {
                f'vllm:request_success_total{{{SERVING}, finished_reason="stop"}}': "0+60x10",
                # 60 requests a minute, all first tokens within 0.1 s and half within 0.05 s.
                f'vllm:time_to_first_token_seconds_bucket{{{SERVING}, le="0.05"}}': "0+30x10",
                f'vllm:time_to_first_token_seconds_bucket{{{SERVING}, le="0.1"}}': "0+60x10",
                f'vllm:time_to_first_token_seconds_bucket{{{SERVING}, le="+Inf"}}': "0+60x10",
            },
            promql_expr_test=[
                recorded("deployment:vllm_request_success:rate5m", 1),
                recorded("deployment:vllm_time_to_first_token_seconds:p50_5m", 0.05),
            ],
        ),
    ]


@needs_promtool
def test_rules_fire_on_synthetic_series(dev_raw: dict[str, Any], tmp_path: Path) -> None:
    paths = write_files("dev", output_of("dev", dev_raw), tmp_path)
    spec = {
        "rule_files": [paths["alerts"].name, paths["recording"].name],
        "evaluation_interval": "1m",
        "tests": rule_tests(),
    }
    test_file = tmp_path / "dev.rules.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False, width=200))
    result = run_captured([str(PROMTOOL), "test", "rules", str(test_file)])
    assert result.returncode == 0, result.stdout + result.stderr


# --- what the down alert's runbook relies on: `make status` and `pulumi up` see a stopped unit ------------


def test_a_stopped_unit_is_drift_that_the_next_up_repairs(dev_raw: dict[str, Any]) -> None:
    [rd] = parse_stack_config(dev_raw).resolved_deployments()
    digest = hashlib.sha256(render_unit(rd, "dev").text.encode()).hexdigest()

    def found(state: str) -> Survey:
        unit = {"name": rd.unit_name, "sha256": digest, "activeState": state, "enabled": True, "managed": True}
        return Survey.from_dict({"active": {"dev.chat": {"unit": rd.unit_name, "repairs": 2}}, "units": [unit]})

    assert drift.activation_repairs("dev", rd, found("active"))[0] == 2
    assert drift.activation_repairs("dev", rd, found("activating"))[0] == 2  # loading: it serves soon
    assert drift.activation_repairs("dev", rd, found("inactive"))[0] == 3
    assert drift.activation_repairs("dev", rd, found("failed"))[0] == 3
    # `make status` names it from the same survey, against what the stack's outputs say it applied.
    applied = drift.Applied.from_status_entry(report.spec(rd, "dev"))
    assert drift.drift(applied, found("active")) == []
    assert drift.drift(applied, found("inactive")) == [
        "vllm-tiny-chat-a.service is inactive: it serves nothing (stopped by hand, or it failed)"
    ]
