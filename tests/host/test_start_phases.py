"""host/start_phases.py on the journals in tests/fixtures/journals/: a start recorded on the sandbox (vLLM
0.32, CPU) and the CUDA builds' lines of vLLM 0.11 and 0.32 as their source writes them (see its README)."""

from __future__ import annotations

import pytest

from host.contract import StartPhases
from host.start_phases import JournalLine, journal_command, last_start, parse_journal, phases_of, progress_line
from tests.support.paths import ROOT

JOURNALS = ROOT / "tests" / "fixtures" / "journals"


def journal(name: str) -> str:
    with open(JOURNALS / name, encoding="utf-8", newline="") as handle:  # keep the progress bars' \r
        return handle.read()


def phases(name: str) -> StartPhases:
    found = phases_of(parse_journal(journal(name)))
    assert found is not None
    return found


# Every phase a start can have, in the order it runs them.
EVERY_PHASE = [
    "checks",
    "imports",
    "configuration",
    "setup",
    "weights",
    "compile",
    "kv-cache",
    "graphs",
    "warmup",
    "api-server",
    "ready-check",
]


@pytest.mark.parametrize(
    ("name", "not_run", "shards"),
    [
        # The CPU build with --enforce-eager compiles nothing and captures no graphs.
        ("sandbox-cpu-0.32-two-starts.txt", {"compile", "graphs"}, (3, 3)),
        ("reference-kimi-0.11-cuda-tp8.txt", set(), (64, 64)),
    ],
)
def test_a_start_that_served_has_its_phases_in_order_and_they_add_up_to_it(
    name: str, not_run: set[str], shards: tuple[int, int]
) -> None:
    start = phases(name)
    assert start.ready
    assert sum(p.seconds for p in start.phases) == pytest.approx(start.seconds)
    assert [p.name for p in start.phases] == [phase for phase in EVERY_PHASE if phase not in not_run]
    assert start.shards == shards


def test_the_sandbox_start_is_the_last_of_the_two() -> None:
    start = phases("sandbox-cpu-0.32-two-starts.txt")
    # The restart: from its "Starting" (23:08:57.755462) to its "Started" (23:09:11.519882).
    assert start.seconds == pytest.approx(13.764, abs=0.001)
    assert start.phase("imports") == pytest.approx(5.45, abs=0.01)  # Python and vLLM's imports
    assert start.phase("compile") is None
    assert start.reported["vllmVersion"] == "0.32.0"
    assert start.reported["filesystem"] == "overlay"


def test_the_first_start_of_the_recording_matches_the_transactions_own_clock() -> None:
    """The first start alone (cut before the restart) took 20.91 s in the journal; the swap transaction
    measured 20.94 s (start_to_ready) for it."""
    lines = parse_journal(journal("sandbox-cpu-0.32-two-starts.txt"))
    first = [line for line in lines if line.at <= lines[0].at + 25]
    start = phases_of(first)
    assert start is not None and start.ready
    assert start.seconds == pytest.approx(20.94, rel=0.01)
    assert start.phase("configuration") == pytest.approx(12.0, abs=0.1)


def test_the_reference_servers_release_lazy_load_is_mostly_weights() -> None:
    start = phases("reference-kimi-0.11-cuda-tp8.txt")
    # Ended by the slowest of the eight workers' "Model loading took".
    assert start.phase("weights") == pytest.approx(2034.21 - 51.902, abs=0.01)
    assert start.reported["weightsSeconds"] == pytest.approx(1973.71)  # the slowest worker's own figure
    assert start.reported["compileSeconds"] == pytest.approx(46.46)  # "takes", as 0.11 says it
    assert start.reported["graphsSeconds"] == 61.0
    assert start.reported["initEngineSeconds"] == pytest.approx(114.51)  # "... took 114.51 seconds"
    assert start.reported["vllmVersion"] == "0.11.1.dev0+reference-build"
    # 0.11 does not log the checkpoint's filesystem: not reported, not guessed.
    assert "filesystem" not in start.reported


def test_a_prefetched_start_of_0_32_reports_its_filesystem_and_the_prefetch() -> None:
    start = phases("kimi-0.32-cuda-tp8-prefetch.txt")
    assert start.reported["filesystem"] == "nfs4"
    assert start.reported["checkpointGib"] == pytest.approx(509.44)
    assert start.reported["availableRamGib"] == pytest.approx(1830.52)
    assert start.reported["prefetchSeconds"] == pytest.approx(398.38)
    assert start.reported["compileSeconds"] == pytest.approx(48.17)  # "took", as 0.32 says it
    assert start.reported["initEngineSeconds"] == pytest.approx(124.10)  # "... took 124.10 s (compilation: ...)"
    assert start.phase("weights") == pytest.approx(470.94 - 51.52, abs=0.01)
    assert start.phase("graphs") == pytest.approx(593.80 + 0.28 - 532.41, abs=0.01)
    assert sum(p.seconds for p in start.phases) == pytest.approx(start.seconds)


def test_a_start_still_loading_has_no_ready_check_and_says_how_far_the_shards_are() -> None:
    lines = parse_journal(journal("reference-kimi-0.11-cuda-tp8.txt"))
    loading = [line for line in lines if line.at < lines[0].at + 1500]
    start = phases_of(loading)
    assert start is not None
    assert not start.ready
    assert start.shards == (32, 64)
    assert start.phases[-1].name == "setup"  # the weights have not ended
    assert start.seconds == pytest.approx(1041.77, abs=0.01)


def test_a_progress_bar_read_with_universal_newlines_keeps_its_last_state() -> None:
    text = journal("sandbox-cpu-0.32-two-starts.txt").replace("\r", "\n")  # what Python's text mode makes of it
    start = phases_of(parse_journal(text))
    assert start is not None and start.shards == (3, 3)
    assert start.seconds == pytest.approx(13.764, abs=0.001)


def test_phases_survive_a_round_trip_through_json() -> None:
    start = phases("kimi-0.32-cuda-tp8-prefetch.txt")
    assert StartPhases.from_dict(start.to_dict()).describe() == start.describe()


def test_a_journal_without_vllm_lines_has_no_phases() -> None:
    lines = [JournalLine(1.0, "systemd", 1, "Starting vllm-x.service - x..."), JournalLine(2.0, "x", 5, "hello")]
    assert phases_of(lines) is None
    assert last_start(lines) == lines


def test_the_journal_is_read_with_precise_times_and_whole_lines() -> None:
    assert journal_command("vllm-x.service", "s=1") == [
        "journalctl", "-u", "vllm-x.service", "-o", "short-iso-precise", "-a", "--no-pager", "--after-cursor", "s=1",
    ]  # fmt: skip


def test_a_long_start_says_where_it_is_and_how_long_is_left() -> None:
    """Kimi's load on the reference server (vLLM 0.11), read halfway through its shards: the weights' share
    of the 547 GB, the time gone, and the forecast's time left; once past the forecast, the weights' own
    rate so far."""
    text = journal("reference-kimi-0.11-cuda-tp8.txt")
    halfway = text[: text.index("\n", text.index(" 32/64 ")) + 1]
    now = phases_of(parse_journal(halfway))
    assert now is not None and now.shards == (32, 64) and not now.ready
    gone = now.seconds  # 09:12:00 to 09:29:21.77
    assert progress_line("kimi-k2.5-int4", now, gone, 547 * 10**9, 1980.0) == (
        "kimi-k2.5-int4: weights 274 of 547 GB, 17 min; about 16 min left (forecast 33 min)"
    )
    # Past a forecast of 10 min: the 32 shards took 16.5 min of weights, so 32 more take as long.
    assert progress_line("kimi-k2.5-int4", now, gone, 547 * 10**9, 600.0) == (
        "kimi-k2.5-int4: weights 274 of 547 GB, 17 min; past its forecast of 10 min; the weights about 16 min "
        "more at their rate so far"
    )
    # Before vLLM's first line, and without size or forecast: the phase alone.
    assert progress_line("m", None, 3.0, None, None) == "m: checks and imports, 3 s"
    done = phases("reference-kimi-0.11-cuda-tp8.txt")
    assert progress_line("m", done, done.seconds, None, None) == "m: ready, 36 min"
