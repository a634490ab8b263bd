"""Pure functions that render what a Prometheus (and a Grafana) needs to watch the stack's deployments.

- `target_groups`: the `file_sd` groups, one per deployment: the front door's address that `publicUrl` (or the
  host's address and port) names, its scheme and metrics path, and labels that say what the stack applied
  there (stack, deployment, host, nodes, model, revision, served_name, unit, cordoned). They are the stack
  output `monitoring.targets`; `make monitoring` writes them to the file Prometheus reads, so they follow
  every `pulumi up`: a swap changes the model label, a removed deployment drops its target. A multi-node
  deployment has one target, its head: vLLM's headless nodes run no HTTP server, and the head's engine
  reports for all of them (a node lost makes the head fail and restart, which the down alert sees).
- `alert_rules` and `recording_rules`: the rule groups, thresholds from `vllm-fleet:monitoring`
  (models/monitoring.py); every expression is confined to the stack's own series (`stack="..."`), so two
  stacks' rules load side by side in one Prometheus.
- `scrape_config`: the job that reads the targets file (the job name the rules select on).
- `dashboard`: a Grafana dashboard of the recording rules whose `deployment` variable lists the stack's
  deployments; `dashboard_problems` checks it has the fields Grafana needs to import it.
Nothing here creates a resource or reads a host.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from models.config import ResolvedDeployment
from models.monitoring import Monitoring
from render.paths import endpoint_url, metrics_url

JOB = "vllm-fleet"
# The labels every target carries, in this order; the rules and the dashboard group by the first three.
TARGET_LABELS = ("stack", "deployment", "host", "nodes", "model", "revision", "served_name", "unit", "cordoned")
BY = "stack, deployment, host"
# The percentiles of the latency recording rules.
QUANTILES = (0.5, 0.9, 0.99)
# vLLM's histograms the recording rules turn into percentiles (`vllm:inter_token_latency_seconds` replaced
# `vllm:time_per_output_token_seconds`).
HISTOGRAMS = {
    "time_to_first_token_seconds": "vllm:time_to_first_token_seconds",
    "inter_token_latency_seconds": "vllm:inter_token_latency_seconds",
    "e2e_request_latency_seconds": "vllm:e2e_request_latency_seconds",
}


def duration(seconds: int) -> str:
    """A Prometheus duration: 300 -> 5m, 90 -> 90s, 7200 -> 2h."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def target_group(rd: ResolvedDeployment, stack: str) -> dict[str, Any]:
    url = urlsplit(metrics_url(endpoint_url(rd)))
    labels = {
        "__scheme__": url.scheme,
        "__metrics_path__": url.path,
        "stack": stack,
        "deployment": rd.deployment.name,
        "host": rd.host.name,
        "nodes": ",".join(h.name for h in rd.node_hosts) or rd.host.name,
        "model": rd.model_name,
        "revision": rd.model.revision,
        "served_name": rd.served_model_name,
        "unit": rd.unit_name,
        # A cordoned host keeps serving what it was last given and may be down for repair: its target stays,
        # and the alerts that page leave it out.
        "cordoned": "true" if rd.host.cordon else "false",
    }
    return {"targets": [url.netloc], "labels": labels}


def target_groups(resolved: Sequence[ResolvedDeployment], stack: str) -> list[dict[str, Any]]:
    return [target_group(rd, stack) for rd in resolved]


def scrape_config(
    targets_files: Sequence[str], monitoring: Monitoring, ca_file: str | None = None, job: str = JOB
) -> dict[str, Any]:
    """The scrape job (a `scrape_configs` entry): the targets file(s), the interval, the CA of a TLS front door."""
    config: dict[str, Any] = {
        "job_name": job,
        "scrape_interval": duration(monitoring.scrape_interval_seconds),
        "scrape_timeout": duration(min(10, monitoring.scrape_interval_seconds)),
        "file_sd_configs": [{"files": list(targets_files)}],
    }
    if ca_file is not None:
        config["tls_config"] = {"ca_file": ca_file}
    return config


def _sel(stack: str, extra: str = "") -> str:
    return "{" + f'job="{JOB}", stack="{stack}"' + (f", {extra}" if extra else "") + "}"


RUNBOOK = {
    "VllmFleetDeploymentDown": (
        "The front door answers no /metrics for the deployment: the engine stopped, is still loading, crashed or "
        "the host is gone. Run `make status STACK=<stack>` (unit state, journal since), then `pulumi up`, which "
        "starts the stack's unit again."
    ),
    "VllmFleetNoSuccessfulRequests": (
        "Requests reach the engine but none succeeds: the engine is stuck or every request fails. Read the unit's "
        "journal (`journalctl -u <unit>`), `make status`; restart it with `systemctl restart <unit>` on the host."
    ),
    "VllmFleetRequestsWaiting": (
        "More requests queue than the engine runs: the load exceeds what it serves. Add a deployment of the "
        "model (a rollout group), lower clients' concurrency, or, if the KV cache has room, raise `--max-num-seqs` (serving.extraArgs)."
    ),
    "VllmFleetKvCacheNearlyFull": (
        "The KV cache is nearly full, so requests wait or are preempted: raise gpuMemoryUtilization or lower "
        "maxModelLen, or add GPUs (tensorParallel)."
    ),
    "VllmFleetModelDrift": (
        "The engine behind the front door serves another name than the stack applied (a hand-started or "
        "hand-edited engine on the port). `make status` names the drift; `pulumi up` puts the stack's unit back."
    ),
}


def _alert(name: str, expr: str, for_seconds: int, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration(for_seconds),
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "runbook": RUNBOOK[name]},
    }


def alert_rules(stack: str, monitoring: Monitoring) -> dict[str, Any]:
    m = monitoring
    window = duration(m.rate_window_seconds)
    serving = _sel(stack, 'cordoned!="true"')
    api = _sel(stack, 'handler=~"/v1/.+"')
    api_ok = _sel(stack, 'handler=~"/v1/.+", status="2xx"')
    return {
        "groups": [
            {
                "name": f"vllm-fleet-{stack}-alerts",
                "rules": [
                    _alert(
                        "VllmFleetDeploymentDown",
                        f"up{serving} == 0",
                        m.down_for_seconds,
                        "critical",
                        "{{ $labels.deployment }} ({{ $labels.model }}) on {{ $labels.host }} does not answer "
                        f"its /metrics for {duration(m.down_for_seconds)}",
                    ),
                    _alert(
                        "VllmFleetNoSuccessfulRequests",
                        f"sum by ({BY}) (increase(http_requests_total{api}[{window}])) > 0"
                        f" unless sum by ({BY}) (increase(http_requests_total{api_ok}[{window}])) > 0",
                        m.stuck_for_seconds,
                        "critical",
                        "{{ $labels.deployment }} on {{ $labels.host }} receives requests but none succeeded "
                        f"in {window}",
                    ),
                    _alert(
                        "VllmFleetRequestsWaiting",
                        f"sum by ({BY}) (vllm:num_requests_waiting{_sel(stack)}) > {m.waiting_requests}",
                        m.waiting_for_seconds,
                        "warning",
                        "{{ $labels.deployment }} on {{ $labels.host }} has {{ $value }} requests waiting "
                        f"(more than {m.waiting_requests})",
                    ),
                    _alert(
                        "VllmFleetKvCacheNearlyFull",
                        f"max by ({BY}) (vllm:kv_cache_usage_perc{_sel(stack)}) > {m.kv_cache_fraction}",
                        m.kv_cache_for_seconds,
                        "warning",
                        "{{ $labels.deployment }} on {{ $labels.host }} uses {{ $value | humanizePercentage }} "
                        "of its KV cache",
                    ),
                    _alert(
                        "VllmFleetModelDrift",
                        # vLLM labels its series with the name it serves (model_name); the target says what the
                        # stack applied (served_name). A series whose two differ is kept by `unless`.
                        f"count by ({BY}, served_name, model_name) (vllm:num_requests_running{_sel(stack)})"
                        f" unless on ({BY}, model_name)"
                        f' label_replace(vllm:num_requests_running{_sel(stack)}, "model_name", "$1", "served_name", "(.+)")',
                        m.drift_for_seconds,
                        "warning",
                        "{{ $labels.deployment }} on {{ $labels.host }} serves {{ $labels.model_name }}, "
                        "the stack applied {{ $labels.served_name }}",
                    ),
                ],
            }
        ]
    }


def recording_name(metric: str, window_seconds: int, suffix: str = "") -> str:
    """`deployment:<metric>:<op><window>`, the level:metric:operations convention."""
    return f"deployment:{metric}:{suffix}{duration(window_seconds)}"


def recording_rules(stack: str, monitoring: Monitoring) -> dict[str, Any]:
    w = monitoring.rate_window_seconds
    window = duration(w)
    by = f"{BY}, model"
    rules: list[dict[str, Any]] = [
        {
            "record": recording_name("vllm_request_success", w, "rate"),
            "expr": f"sum by ({by}) (rate(vllm:request_success_total{_sel(stack)}[{window}]))",
        },
        {
            "record": recording_name("vllm_generation_tokens", w, "rate"),
            "expr": f"sum by ({by}) (rate(vllm:generation_tokens_total{_sel(stack)}[{window}]))",
        },
        {
            "record": "deployment:vllm_num_requests_running:sum",
            "expr": f"sum by ({by}) (vllm:num_requests_running{_sel(stack)})",
        },
        {
            "record": "deployment:vllm_num_requests_waiting:sum",
            "expr": f"sum by ({by}) (vllm:num_requests_waiting{_sel(stack)})",
        },
        {
            "record": "deployment:vllm_kv_cache_usage_perc:max",
            "expr": f"max by ({by}) (vllm:kv_cache_usage_perc{_sel(stack)})",
        },
    ]
    for short, metric in HISTOGRAMS.items():
        for q in QUANTILES:
            rules.append(
                {
                    "record": recording_name(f"vllm_{short}", w, f"p{round(q * 100)}_"),
                    "expr": f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{_sel(stack)}[{window}])))",
                }
            )
    return {"groups": [{"name": f"vllm-fleet-{stack}-recording", "rules": rules}]}


# --- the Grafana dashboard -------------------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(panel_id: int, title: str, unit: str, exprs: Mapping[str, str], x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (legend, expr) in enumerate(exprs.items())
        ],
    }


def dashboard(stack: str, deployments: Sequence[str], monitoring: Monitoring) -> dict[str, Any]:
    """Per deployment (the `deployment` variable, listing the stack's): request rate, latency percentiles,
    queue, KV cache and whether its /metrics answers."""
    w = monitoring.rate_window_seconds
    sel = f'stack="{stack}", deployment=~"$deployment"'

    def pct(short: str) -> dict[str, str]:
        return {
            f"p{round(q * 100)} {{{{deployment}}}}": f"{recording_name(f'vllm_{short}', w, f'p{round(q * 100)}_')}{{{sel}}}"
            for q in QUANTILES
        }

    panels = [
        _panel(
            1,
            "Requests succeeded per second",
            "reqps",
            {"{{deployment}} ({{model}})": f"{recording_name('vllm_request_success', w, 'rate')}{{{sel}}}"},
            0,
            0,
        ),
        _panel(
            2,
            "Generated tokens per second",
            "short",
            {"{{deployment}}": f"{recording_name('vllm_generation_tokens', w, 'rate')}{{{sel}}}"},
            12,
            0,
        ),
        _panel(3, "Time to first token", "s", pct("time_to_first_token_seconds"), 0, 8),
        _panel(4, "Inter-token latency", "s", pct("inter_token_latency_seconds"), 12, 8),
        _panel(
            5,
            "Requests running and waiting",
            "short",
            {
                "running {{deployment}}": f"deployment:vllm_num_requests_running:sum{{{sel}}}",
                "waiting {{deployment}}": f"deployment:vllm_num_requests_waiting:sum{{{sel}}}",
            },
            0,
            16,
        ),
        _panel(
            6,
            "KV cache use",
            "percentunit",
            {"{{deployment}}": f"deployment:vllm_kv_cache_usage_perc:max{{{sel}}}"},
            12,
            16,
        ),
        _panel(7, "End-to-end request latency", "s", pct("e2e_request_latency_seconds"), 0, 24),
        _panel(8, "Metrics endpoint up", "short", {"{{deployment}}": f'up{{job="{JOB}", {sel}}}'}, 12, 24),
    ]
    options = [{"text": name, "value": name, "selected": False} for name in deployments]
    return {
        "uid": f"vllm-fleet-{stack}"[:40],
        "title": f"vllm-fleet {stack}",
        "tags": ["vllm-fleet", stack],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "deployment",
                    "label": "Deployment",
                    "type": "custom",
                    "query": ",".join(deployments),
                    "options": options,
                    "current": {"text": ["All"], "value": ["$__all"]},
                    "multi": True,
                    "includeAll": True,
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }


PANEL_TYPES = frozenset({"timeseries", "stat", "gauge", "table", "text", "row"})


def dashboard_problems(board: Mapping[str, Any]) -> list[str]:
    """What keeps Grafana from importing the dashboard, one line each (empty: none): the model's required
    fields (uid, title, schemaVersion, panels, templating), each panel's id, type, gridPos within 24
    columns and queries, and every `$variable` a query uses defined in the templating list."""
    problems: list[str] = []
    json.dumps(board)  # JSON-serialisable at all
    for key, kind in (("uid", str), ("title", str), ("schemaVersion", int), ("panels", list), ("templating", dict)):
        if not isinstance(board.get(key), kind):
            problems.append(f"dashboard: {key} must be a {kind.__name__}")
    if problems:
        return problems
    if not 1 <= len(board["uid"]) <= 40:
        problems.append("dashboard: uid must be 1-40 characters")
    variables = {v.get("name") for v in board["templating"].get("list", [])}
    for v in board["templating"].get("list", []):
        if not v.get("name") or not v.get("type"):
            problems.append(f"templating variable {v!r}: name and type are required")
    ids: set[int] = set()
    for panel in board["panels"]:
        where = f"panel {panel.get('id')!r} ({panel.get('title')!r})"
        if not isinstance(panel.get("id"), int) or panel["id"] in ids:
            problems.append(f"{where}: id must be a unique integer")
        ids.add(panel.get("id", -1))
        if panel.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: unknown type {panel.get('type')!r}")
        grid = panel.get("gridPos") or {}
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")):
            problems.append(f"{where}: gridPos needs integer x, y, w and h")
        elif grid["x"] < 0 or grid["w"] < 1 or grid["x"] + grid["w"] > 24 or grid["h"] < 1:
            problems.append(f"{where}: gridPos must lie within Grafana's 24 columns")
        refs = [t.get("refId") for t in panel.get("targets", [])]
        if panel.get("type") != "row" and (not refs or len(set(refs)) != len(refs)):
            problems.append(f"{where}: every query needs a unique refId")
        for query in panel.get("targets", []):
            if not query.get("expr"):
                problems.append(f"{where}: query {query.get('refId')} has no expr")
            for name in _variables_in(json.dumps(query)):
                if name not in variables and not name.startswith("__"):
                    problems.append(f"{where}: ${name} is not a templating variable")
    return problems


def _variables_in(text: str) -> set[str]:
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)) - {"1"}


def monitoring_output(resolved: Sequence[ResolvedDeployment], stack: str, monitoring: Monitoring) -> dict[str, Any]:
    """The stack output `monitoring`: the targets and what `make monitoring` renders the rest from."""
    return {
        "job": JOB,
        "targets": target_groups(resolved, stack),
        "thresholds": monitoring.model_dump(mode="json", by_alias=True),
        "tls": any(rd.access.tls is not None for rd in resolved),
    }
