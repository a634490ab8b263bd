"""Where a no-op `pulumi up` spends its time, read from the engine's own OpenTelemetry spans.

`pulumi up --otel-traces file://<path>` writes the spans of the CLI, the language host, the provider and
(instrumented by the SDK) the program's gRPC calls as OTLP JSON, one export per line. An `up` runs two
plans (the preview, then the update); each starts a language host, asks it for the program's packages
(GetRequiredPackages: `pip list` and a script, in the Python language host), runs the program (Run) and,
inside that run, serves the program's requests. `breakdown` cuts each plan at those spans' edges and sums
the parts over the command, so the same cut applies to vllm-fleet's program, the graph replay and the empty
program:

- `outside the plans`: the CLI's start, the language host's About (the runtime's versions, asked once per
  command), reading the stack and writing it back after the update;
- `language host`: its start and GetRequiredPackages, before the program runs;
- `program start`: from Run to the program's first request (the interpreter, `import pulumi`, the SDK);
- `program body`: from its first request to its first resource after the stack (our imports, the config,
  the checks, the declarations), or to the stack's own registration when it declares nothing else;
- `registrations`: from there until its last registration (resource or outputs) is answered: the engine's
  checks and diffs with the provider, one dependency after another, and the SDK's work between them;
- `program exit`: from that answer to the end of Run (the wait for shutdown, the interpreter's exit);
- `rest of the plans`: what the engine does in a plan beside the above.

The parts add up to the command's duration. The provider's start (its process, handshake and
configuration) overlaps the program's body and is reported beside them, not in the sum.

The trace holds the requests' payloads, the stack's secrets among them: the bench writes it only into its
own temporary folder and deletes it once read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# OTLP span kinds.
SERVER = 2
CLIENT = 3

PHASES = (
    "outside the plans",
    "language host",
    "program start",
    "program body",
    "registrations",
    "program exit",
    "rest of the plans",
)
PROVIDER_START = "provider start (overlaps the body)"
PROVIDER_CALLS = ("Handshake", "GetPluginInfo", "CheckConfig", "DiffConfig", "Configure")
MONITOR_CALLS = ("pulumirpc.ResourceMonitor/", "pulumirpc.Engine/")
REGISTRATIONS = ("pulumirpc.ResourceMonitor/RegisterResource", "pulumirpc.ResourceMonitor/RegisterResourceOutputs")


@dataclass(frozen=True)
class Span:
    name: str
    kind: int
    start: float  # seconds
    end: float
    attributes: Mapping[str, str]

    @property
    def seconds(self) -> float:
        return self.end - self.start


def read_spans(lines: Iterable[str]) -> list[Span]:
    """The spans of an OTLP JSON file's exports (one JSON object per line), string attributes only."""
    spans = []
    for line in lines:
        if not line.strip():
            continue
        for resource_spans in json.loads(line).get("resourceSpans", []):
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    attributes = {
                        a["key"]: a["value"]["stringValue"]
                        for a in span.get("attributes", [])
                        if "stringValue" in a.get("value", {})
                    }
                    spans.append(
                        Span(
                            name=span["name"],
                            kind=int(span.get("kind", 0)),
                            start=int(span["startTimeUnixNano"]) / 1e9,
                            end=int(span["endTimeUnixNano"]) / 1e9,
                            attributes=attributes,
                        )
                    )
    return sorted(spans, key=lambda s: s.start)


def _within(spans: list[Span], outer: Span) -> list[Span]:
    return [s for s in spans if outer.start <= s.start and s.end <= outer.end]


def _only(spans: list[Span], name: str, kind: int | None = None) -> list[Span]:
    return [s for s in spans if s.name == name and (kind is None or s.kind == kind)]


def breakdown(spans: list[Span]) -> dict[str, float]:
    """Seconds per phase (PHASES, summing to the command's duration) and the provider's start beside them."""
    (command,) = _only(spans, "pulumi")
    plans = _only(spans, "pulumi-plan")
    if not plans:
        raise ValueError("the trace has no plan (pulumi-plan span): not a preview or an up")
    parts = dict.fromkeys(PHASES, 0.0)
    parts["outside the plans"] = command.seconds - sum(p.seconds for p in plans)
    parts[PROVIDER_START] = 0.0
    for plan in plans:
        inside = _within(spans, plan)
        (run,) = _only(inside, "pulumirpc.LanguageRuntime/Run", CLIENT)
        language_host = [s for s in _only(inside, "newPlugin") if s.attributes.get("kind") == "language"]
        language_host += _only(inside, "pulumirpc.LanguageRuntime/GetPluginInfo", CLIENT)
        language_host += _only(inside, "pulumirpc.LanguageRuntime/GetRequiredPackages", CLIENT)
        parts["language host"] += sum(s.seconds for s in language_host)
        served = [s for s in _within(inside, run) if s.kind == SERVER and s.name.startswith(MONITOR_CALLS)]
        if not served:
            raise ValueError("the program sent no request in a plan's Run")
        registrations = [s for s in served if s.name in REGISTRATIONS]
        resources = [s for s in registrations if s.name == REGISTRATIONS[0]]
        if not resources:
            raise ValueError("the program registered no resource (not even its stack) in a plan")
        first_request = served[0].start
        body_end = resources[1].start if len(resources) > 1 else resources[0].start
        last_answer = max(s.end for s in registrations)
        parts["program start"] += first_request - run.start
        parts["program body"] += body_end - first_request
        parts["registrations"] += last_answer - body_end
        parts["program exit"] += run.end - last_answer
        parts["rest of the plans"] += plan.seconds - run.seconds - sum(s.seconds for s in language_host)
        provider = [s for s in _only(inside, "newPlugin") if s.attributes.get("kind") == "resource"]
        provider += [
            s
            for s in inside
            if s.kind == CLIENT and s.name.removeprefix("pulumirpc.ResourceProvider/") in PROVIDER_CALLS
        ]
        parts[PROVIDER_START] += sum(s.seconds for s in provider)
    return parts


def read_breakdown(path: Path) -> dict[str, float]:
    """The breakdown of one traced command's file, which is deleted once read (it holds the secrets)."""
    try:
        with path.open(encoding="utf-8") as trace:
            return breakdown(read_spans(trace))
    finally:
        path.unlink(missing_ok=True)
