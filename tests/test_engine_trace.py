"""bench/engine_trace.py: a no-op's time cut at the edges of the engine's OpenTelemetry spans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import engine_trace
from bench.engine_trace import PHASES, PROVIDER_START, breakdown, read_breakdown, read_spans

INTERNAL, SERVER, CLIENT = 1, 2, 3


def span(name: str, span_kind: int, start_ms: float, end_ms: float, **attributes: str) -> dict[str, object]:
    return {
        "traceId": "t",
        "spanId": name,
        "name": name,
        "kind": span_kind,
        "startTimeUnixNano": str(int(start_ms * 1e6)),
        "endTimeUnixNano": str(int(end_ms * 1e6)),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]
        + [{"key": "rpc.grpc.status_code", "value": {"intValue": "0"}}],
    }


def export(*spans: dict[str, object]) -> str:
    """One line of the file: an OTLP export, as the CLI writes it."""
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]})


def plan(offset: float, resources: int) -> list[dict[str, object]]:
    """A plan at `offset` ms: the language host 0-200, Run 200-390 whose first request comes at 250, the
    stack's registration at 252, the provider started 255-289, the first other resource at 300, the last
    answer at 330."""
    o = offset
    spans = [
        span("pulumi-plan", INTERNAL, o, o + 400),
        span("newPlugin", INTERNAL, o, o + 30, kind="language"),
        span("pulumirpc.LanguageRuntime/GetPluginInfo", CLIENT, o + 30, o + 31),
        span("pulumirpc.LanguageRuntime/GetRequiredPackages", CLIENT, o + 31, o + 200),
        span("pulumirpc.LanguageRuntime/Run", CLIENT, o + 200, o + 390),
        span("pulumirpc.LanguageRuntime/Run", SERVER, o + 201, o + 389),
        span("pulumirpc.ResourceMonitor/GetDeploymentInfo", SERVER, o + 250, o + 251),
        span("pulumirpc.ResourceMonitor/RegisterResource", SERVER, o + 252, o + 253),
    ]
    if resources:
        spans += [
            span("newPlugin", INTERNAL, o + 255, o + 285, kind="resource"),
            span("pulumirpc.ResourceProvider/CheckConfig", CLIENT, o + 285, o + 289),
            # The provider's own side of a call is not the engine's wait for it.
            span("/pulumirpc.ResourceProvider/CheckConfig", 0, o + 286, o + 288),
            span("pulumirpc.ResourceMonitor/RegisterResource", SERVER, o + 300, o + 320),
            span("pulumirpc.ResourceMonitor/RegisterResourceOutputs", SERVER, o + 310, o + 330),
        ]
    else:
        spans.append(span("pulumirpc.ResourceMonitor/RegisterResourceOutputs", SERVER, o + 254, o + 255))
    return spans


def test_an_up_is_cut_into_parts_that_add_up_to_the_command() -> None:
    spans = read_spans(
        [
            export(span("pulumi", INTERNAL, 0, 1000), *plan(100, resources=1)),
            "",
            export(*plan(550, resources=1)),
        ]
    )
    parts = breakdown(spans)
    ms = {k: round(v * 1000, 3) for k, v in parts.items()}
    assert ms == {
        "outside the plans": 200.0,  # 1000 - 2 x 400
        "language host": 400.0,  # 2 x (30 + 1 + 169)
        "program start": 100.0,  # 2 x (250 - 200)
        "program body": 100.0,  # 2 x (300 - 250): to the first resource after the stack
        "registrations": 60.0,  # 2 x (330 - 300)
        "program exit": 120.0,  # 2 x (390 - 330)
        "rest of the plans": 20.0,  # 2 x (400 - 190 - 200)
        PROVIDER_START: 68.0,  # 2 x (30 + 4), beside the sum
    }
    assert sum(parts[p] for p in PHASES) == pytest.approx(1.0)


def test_a_program_that_declares_nothing_has_its_body_end_at_the_stack() -> None:
    parts = breakdown(read_spans([export(span("pulumi", INTERNAL, 0, 500), *plan(50, resources=0))]))
    assert round(parts["program body"] * 1000, 3) == 2.0  # 250 -> the stack's registration at 252
    assert round(parts["registrations"] * 1000, 3) == 3.0  # to the stack outputs' answer at 255
    assert parts[PROVIDER_START] == 0.0


def test_a_trace_without_a_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="no plan"):
        breakdown(read_spans([export(span("pulumi", INTERNAL, 0, 10))]))


def test_the_trace_file_is_deleted_once_read(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(export(span("pulumi", INTERNAL, 0, 1000), *plan(100, resources=1)) + "\n")
    assert read_breakdown(trace)["language host"] == pytest.approx(0.2)
    assert not trace.exists()
    broken = tmp_path / "broken.json"
    broken.write_text(export(span("pulumi", INTERNAL, 0, 10)))
    with pytest.raises(ValueError):
        engine_trace.read_breakdown(broken)
    assert not broken.exists()
