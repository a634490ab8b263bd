"""Each start on the sandbox leaves its record, whose phases (from vLLM's own journal lines) add up to the
start the swap measured; a swap measures the page cache before it stops the old engine, says it, and with
prewarmMinResidentShare refuses (pre-warm off) or reads the files again (pre-warm on) when part of the
model was evicted. The tests run in file order on one stack ("starts") with tiny-a and tiny-b kept on disk."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.sandbox_env import on_host, served_ids
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "starts"
ENDPOINT = sandbox_env.api_url(sandbox_env.E2E_PORT)
PYTHON = "/opt/vllm-env/bin/python3"
TOOLS = "/usr/local/lib/vllm-fleet"
SHARD = "model-00002-of-00003.safetensors"


class Starts(SandboxStack):
    def configure(self, model: str, **deployment: Any) -> auto.Stack:
        """The stack serving `model` on the tests' GPU and port, both tiny models kept on disk (the second
        is there before it serves, so a test can evict it), `deployment` keys besides."""
        extra = {"e2e-tiny-b": {"preset": "tiny-chat-b", "dir": "e2e-tiny-b", "revision": "main", "keep": True}}
        doc = yaml.safe_load(sandbox_env.e2e_stack_file(model, extra_models=extra))
        doc["config"]["vllm-fleet:deployments"][0].update(deployment)
        self.stack = self.select(doc)
        return self.stack

    def tear_down(self) -> None:
        self.destroy_left_over(self.configure("e2e-tiny-a"))
        on_host("rm -rf /shared/e2e-tiny-b")


starts = module_state(lambda tmp: Starts(tmp, STACK))


def records() -> list[dict[str, Any]]:
    """The host's start records as its survey reports them (a model's last few, oldest first)."""
    found: list[dict[str, Any]] = json.loads(on_host(f"{PYTHON} {TOOLS}/survey"))["starts"]
    return found


def record_of(model: str) -> dict[str, Any]:
    """The model's last start on the host."""
    return max((r for r in records() if r["loaded"]["model"] == model), key=lambda r: r["at"])


def resident_share(directory: str) -> float:
    share: float = json.loads(on_host(f"{PYTHON} {TOOLS}/prewarm resident --dir {directory}"))["share"]
    return share


def evict(path: str) -> None:
    """Drop `path`'s pages from the page cache, as memory pressure would (written back first)."""
    on_host(
        f'{PYTHON} -c \'import os; fd = os.open("{path}", os.O_RDONLY); os.fsync(fd); '
        f"os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)'"
    )


def swap_lines(output: str) -> list[str]:
    """What the swap transaction said, as `pulumi up` shows it (its lines start with [deployment])."""
    return [line.strip() for line in output.splitlines() if "[chat] " in line]


def test_a_start_records_phases_that_add_up_to_the_measured_start(starts: Starts) -> None:
    starts.configure("e2e-tiny-a")
    starts.up_succeeds()
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    record = record_of("e2e-tiny-a")
    assert (record["owner"], record["unit"]) == ("starts.chat", "vllm-e2e-tiny-a.service")
    assert record["loaded"]["repo"] == "acme/tiny-chat-a" and len(record["loaded"]["revision"]) == 40
    assert record["loaded"]["prewarm"] == "page cache" and record["loaded"]["residentShare"] == 1.0
    phases = record["phases"]
    assert phases["ready"] and phases["reported"]["vllmVersion"] == "0.32.0"
    names = [p["name"] for p in phases["phases"]]
    assert names[:2] == ["checks", "imports"] and "weights" in names and names[-1] == "ready-check"
    total = sum(p["seconds"] for p in phases["phases"])
    # The journal's clock against the swap's own (start_to_ready): within 10%.
    assert total == pytest.approx(record["seconds"], rel=0.10), (total, record["seconds"], phases)
    print(f"start of e2e-tiny-a: {record['seconds']:.2f} s measured, phases {total:.2f} s: {phases['phases']}")


def test_a_swap_says_what_of_an_evicted_model_is_left_and_refuses_below_the_share(starts: Starts) -> None:
    """tiny-b is on disk (kept), read into the page cache by hand, then one of its shards is evicted. With
    the pre-warm off and prewarmMinResidentShare 0.9, the swap says how much is left and refuses before
    anything stops: tiny-a keeps serving."""
    directory = "/shared/e2e-tiny-b"
    on_host(f"cat {directory}/*.safetensors {directory}/*.json > /dev/null")
    assert resident_share(directory) == 1.0
    evict(f"{directory}/{SHARD}")
    left = resident_share(directory)
    assert left < 0.9, left
    starts.configure("e2e-tiny-b", prewarmMarginGib=None, prewarmMinResidentShare=0.9)
    assert starts.try_up() is None
    said = "\n".join(swap_lines(starts.log()))
    assert f"before the start: {left:.0%} of {directory} is in the page cache" in said, said[-3000:]
    assert "prewarmMinResidentShare asks for 90%" in starts.log() and "nothing was stopped" in starts.log()
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    assert on_host("systemctl is-active vllm-e2e-tiny-a.service").strip() == "active"


def test_with_the_pre_warm_on_the_swap_reads_it_back_before_the_stop_and_records_the_start(starts: Starts) -> None:
    directory = "/shared/e2e-tiny-b"
    evict(f"{directory}/{SHARD}")
    starts.configure("e2e-tiny-b", prewarmMinResidentShare=0.9)
    starts.up_succeeds()
    assert served_ids(ENDPOINT) == ["e2e-tiny-b"]
    said = swap_lines(starts.log())
    assert any(f"before the start: 100% of {directory} is in the page cache" in line for line in said), said
    # "where the start went: 14.9 s (forecast 15 s, from the catalog): checks 0.1 s, imports 4.2 s, ..."
    assert any("where the start went: " in line and ": checks " in line for line in said), said
    record = record_of("e2e-tiny-b")
    assert record["mode"] == "stop-start" and record["loaded"]["residentShare"] == 1.0
    total = sum(p["seconds"] for p in record["phases"]["phases"])
    assert total == pytest.approx(record["seconds"], rel=0.10), (total, record["seconds"])
    # tiny-a's record stays: the next swap back to it starts from its own last start here. The host may
    # also keep starts of other stacks (the dev stack's `make up` on the same sandbox host), so this stack's
    # are the ones asked about; the files are one per checkpoint (repository and revision), whoever started it.
    found = records()
    assert {r["loaded"]["model"] for r in found if r["owner"] == f"{STACK}.chat"} == {"e2e-tiny-a", "e2e-tiny-b"}
    checkpoints = {(r["loaded"]["repo"], r["loaded"]["revision"]) for r in found}
    assert len(on_host("ls /var/lib/vllm-fleet/starts").split()) == len(checkpoints) >= 2
    print(f"start of e2e-tiny-b: {record['seconds']:.2f} s measured, phases {total:.2f} s")


def test_back_to_a_the_swap_keeps_its_forecast_and_the_preview_of_b_names_bs_own_start(starts: Starts) -> None:
    """a -> b -> a: the swap back to a is forecast from a's own start here (not b's, the start of the model
    that goes), says its progress while it starts, and keeps the forecast beside the start that came. The
    preview of a -> b then names b's own last start, not a's."""
    starts.configure("e2e-tiny-a")
    starts.up_succeeds()
    assert served_ids(ENDPOINT) == ["e2e-tiny-a"]
    log = starts.log()
    record = record_of("e2e-tiny-a")
    forecast = record["forecast"]
    assert forecast is not None and forecast["source"] == "own start", record
    assert forecast["basis"].startswith("from the start of e2e-tiny-a on "), forecast
    assert record["downtimeSeconds"] >= record["seconds"]
    said = swap_lines(log)
    assert any("where the start went: " in line and "(forecast " in line for line in said), said
    if record["seconds"] > 16:  # a report every 15 s: at least one came while it started
        assert any("starting vllm-e2e-tiny-a.service: e2e-tiny-a: " in line for line in said), said
    error = (forecast["seconds"] - record["seconds"]) / record["seconds"]
    print(
        f"swap back to e2e-tiny-a: forecast {forecast['seconds']:.1f} s, measured {record['seconds']:.1f} s ({error:+.0%})"
    )
    starts.configure("e2e-tiny-b")
    preview = starts.stack.preview()
    line = next(
        (line for line in preview.stdout.splitlines() if "will run stop-then-start" in line),
        preview.stdout[-3000:],
    )
    assert "expected downtime: the start of e2e-tiny-b, about " in line, line
    basis = line.split("expected downtime: the start of e2e-tiny-b, about ", 1)[1]
    assert "(from the start of e2e-tiny-b on " in basis and "(starts.chat)" in basis, basis
    assert "e2e-tiny-a" not in basis.split("; loader:")[0], basis
