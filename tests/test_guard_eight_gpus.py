"""The judgements of bench/device/guard_eight_gpus.py, which runs the GPU-release guard against 8 real GPUs:
here on what the guard's reading gives (host.facts over recorded and written nvidia-smi output), so a
check that could not fail would show."""

from __future__ import annotations

from bench.device import guard_eight_gpus as g
from host import facts
from tests.support.paths import FIXTURES

UUIDS = [f"GPU-0000000{i}-0000-0000-0000-000000000000" for i in range(8)]
HOLDERS = [g.Holder(gpu, 1000 + gpu) for gpu in range(7)] + [g.Holder(7, 1007, child=2007)]


def reading(child_minors: frozenset[int] | None, dead_listed: bool = False) -> list[facts.ComputeApp]:
    """The guard's reading of the 8 holders: nvidia-smi's rows by GPU UUID (it names the dead parent 1007
    while it lists it) and the forked child found by its /dev/nvidia* files."""
    rows = "".join(f"{1000 + gpu}, {UUIDS[gpu]}, 4616, python3\n" for gpu in range(8 if dead_listed else 7))
    apps = facts.parse_compute_apps(rows, {uuid: index for index, uuid in enumerate(UUIDS)})
    return apps + ([facts.ComputeApp(2007, "python3", 0, child_minors)] if child_minors is not None else [])


def test_each_holder_on_its_own_gpu_passes() -> None:
    checks = g.attribution_checks(HOLDERS, reading(frozenset({7})), dead=1007)
    assert all(c.passed for c in checks), checks
    assert [c.name for c in checks][-2:] == [
        "PID 2007 attributed to GPU 7 (by its /dev/nvidia* files)",
        "the killed parent PID 1007 is left out",
    ]
    assert len(checks) == 7 + 1 + 1  # seven listed holders, the child, the dead parent


def test_a_child_read_on_every_gpu_fails_its_attribution() -> None:
    # What a process that opened every /dev/nvidiaN looks like to the guard: on every GPU.
    checks = {c.name: c for c in g.attribution_checks(HOLDERS, reading(frozenset(range(8))), dead=1007)}
    child = checks["PID 2007 attributed to GPU 7 (by its /dev/nvidia* files)"]
    assert not child.passed and "GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in child.detail


def test_a_missing_holder_and_a_listed_dead_parent_fail() -> None:
    checks = {c.name: c for c in g.attribution_checks(HOLDERS, reading(None, dead_listed=True), dead=1007)}
    assert not checks["PID 2007 attributed to GPU 7 (by its /dev/nvidia* files)"].passed
    assert not checks["the killed parent PID 1007 is left out"].passed


def test_before_the_kill_the_parent_is_read_by_uuid() -> None:
    checks = g.attribution_checks(HOLDERS, reading(frozenset({7}), dead_listed=True))
    assert all(c.passed for c in checks) and len(checks) == 9


def test_the_recorded_h200_holders_attribute_to_gpu_0() -> None:
    """nvidia-smi's real rows (tests/fixtures/nvidia-smi: three holders of the one H200) through host.facts."""
    uuids = facts.parse_gpu_uuids((FIXTURES / "query-gpu-index-uuid.csv").read_text())
    apps = facts.parse_compute_apps((FIXTURES / "compute-apps-uuid-busy.csv").read_text(), uuids)
    checks = g.attribution_checks([g.Holder(0, 427), g.Holder(0, 428), g.Holder(0, 469)], apps)
    assert [c.passed for c in checks] == [True, True, True]
    assert not g.attribution_checks([g.Holder(1, 427)], apps)[0].passed


def test_minor_numbers_must_be_the_indices() -> None:
    assert g.minor_check([{"Minor Number": str(i)} for i in range(8)]).passed
    assert not g.minor_check([{"Minor Number": m} for m in "10234567"]).passed
    assert not g.minor_check([]).passed


def test_refuse_names_every_live_holder_and_not_the_dead_parent() -> None:
    named = "gpu-release-guard: GPUs 0,1 are held by processes vllm-fleet does not manage: " + "; ".join(
        f"PID {pid} (python3 -c ..., 0 MiB) of no systemd unit" for pid in (1000, 2007)
    )
    assert g.refuse_check(1, named, [1000, 2007], dead=1007).passed
    assert not g.refuse_check(0, named, [1000, 2007], dead=1007).passed
    assert not g.refuse_check(1, named, [1000, 1001, 2007], dead=1007).passed
    assert not g.refuse_check(1, named + "; PID 1007 (?, 0 MiB)", [1000, 2007], dead=1007).passed


def test_a_stop_releases_its_gpu_alone() -> None:
    alive = {1000: False, 1001: True, 2007: True}
    checks = g.stop_checks(0, 0, 6.1, 30, 0, [1000], alive)
    assert [c.passed for c in checks] == [True, True, True]
    late = g.stop_checks(0, 0, 31.0, 30, 0, [1000], alive)
    assert not late[0].passed
    held = g.stop_checks(0, 0, 6.1, 30, 4616, [1000], alive)
    assert not held[0].passed and "uses 4616 MiB" in held[0].detail
    survived = g.stop_checks(0, 0, 6.1, 30, 0, [1000], alive | {1000: True})
    assert not survived[1].passed
    too_much = g.stop_checks(0, 0, 6.1, 30, 0, [1000], alive | {2007: False})
    assert not too_much[2].passed and "[2007]" in too_much[2].detail


def test_the_childs_gpu_is_stopped_last_and_its_target_is_the_child() -> None:
    order = g.stop_order(list(reversed(HOLDERS)))
    assert [h.gpu for h in order] == list(range(8)) and order[-1].child == 2007
    assert g.targets(order[-1], dead=1007) == [2007]
    assert g.targets(order[0], dead=1007) == [1000]


def test_the_check_runs_only_on_idle_gpus() -> None:
    assert g.idle_check([]).passed
    busy = g.idle_check(facts.parse_compute_apps("29933, GPU-a, 845, python3\n", {"GPU-a": 0}))
    assert not busy.passed and "PID 29933 (python3) on GPUs [0]" in busy.detail
    assert "GPUs all" in g.idle_check([facts.ComputeApp(5, "python3", 0, None)]).detail
