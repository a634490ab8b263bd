"""host/status.py's readings that need no host: the last load's duration from the journal's start jobs."""

from __future__ import annotations

from host import status

# `journalctl -u vllm-tiny-chat-b.service JOB_TYPE=start -o json --output-fields=JOB_TYPE,JOB_RESULT` on the
# sandbox (systemd 252), cursors cut: two starts, each a line when queued and one with its result.
START_JOBS = "\n".join(
    [
        '{"JOB_TYPE":"start","__REALTIME_TIMESTAMP":"1796404647889243","_BOOT_ID":"0951"}',
        '{"JOB_TYPE":"start","__REALTIME_TIMESTAMP":"1796404662083667","JOB_RESULT":"done","_BOOT_ID":"0951"}',
        '{"JOB_TYPE":"start","__REALTIME_TIMESTAMP":"1796404688956697","_BOOT_ID":"0951"}',
        '{"JOB_TYPE":"start","__REALTIME_TIMESTAMP":"1796404703898010","JOB_RESULT":"done","_BOOT_ID":"0951"}',
    ]
)


def test_the_last_load_is_the_last_start_jobs_queued_to_done() -> None:
    assert status.last_load_seconds(START_JOBS) == 14.9


def test_a_start_that_has_not_finished_leaves_the_last_finished_one() -> None:
    still_loading = START_JOBS + '\n{"JOB_TYPE":"start","__REALTIME_TIMESTAMP":"1796404800000000"}'
    assert status.last_load_seconds(still_loading) == 14.9


def test_the_journal_is_asked_for_the_units_start_jobs_only() -> None:
    command = status.start_jobs_journal("vllm-x.service")
    assert command[:4] == ["journalctl", "-u", "vllm-x.service", "JOB_TYPE=start"]
    assert "--output-fields=JOB_TYPE,JOB_RESULT" in command
