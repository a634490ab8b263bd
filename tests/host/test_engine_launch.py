"""How the engine that serves was launched, read from its process (a /proc of recorded files), against the
stack's launch, with launch identity's vLLM-shaped parser standing in for the host's vLLM (the sandbox's
real one reads them in tests/test_launch_identity.py and the end-to-end modules)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from host import contract, engine_launch
from host import launch_identity as identity
from host.engine_launch import Process, read_process
from tests.host.test_launch_identity import TABLE, vllm_like_parser

PYTHON = "/opt/vllm-env/bin/python3"
UNIT = "vllm-a.service"
ARGS = "-m vllm.entrypoints.openai.api_server --model /m --max-model-len 512 --host 127.0.0.1"


class Parser:
    """launch_identity.parse_with, its vLLM a parser shaped like vLLM's: every launch it was asked to read."""

    def __init__(self) -> None:
        self.asked: list[list[identity.Launch]] = []

    def __call__(self, python: str, launches: Sequence[identity.Launch], cache: str) -> identity.Outcome:
        self.asked.append(list(launches))
        read = [
            identity.on_this_host(
                identity.parse_launch(launch, "0.32.0", vllm_like_parser, TABLE),
                launch,
                resolve=lambda path: path,
                home=lambda _user: "/root",
            )
            for launch in launches
        ]
        return identity.Outcome("0.32.0", tuple(read), len(read), 7.1)


def unit_text(etc: Path, args: str = ARGS, comment: str = "# the engine", timeout: int = 300) -> str:
    """A unit as render/units.py shapes it: its environment, its placement and secret files, its launch."""
    return (
        f"{contract.MANAGED_MARK}: stack dev, deployment chat.\n{comment}\n[Service]\nUser=root\n"
        "Environment=HF_HOME=/shared/hf VLLM_NO_USAGE_STATS=1\n"
        f"EnvironmentFile={etc}/vllm-a.placement.env\nEnvironmentFile=-{etc}/vllm-a.env\n"
        f"ExecStart={PYTHON} {args} --port ${{VLLM_FLEET_BACKEND_PORT}}\nTimeoutStartSec={timeout}\n"
    )


def serving(tmp_path: Path, args: str = ARGS) -> tuple[Path, contract.Unit, contract.ActiveRecord, Process]:
    """vllm-a installed from `unit_text()` and serving behind the front door; its process as it was exec'd
    with the unit's launch `args` (and what systemd adds to every service)."""
    etc = tmp_path / "etc"
    etc.mkdir(parents=True)
    (etc / "vllm-a.placement.env").write_text(
        "VLLM_FLEET_GPUS=0\nVLLM_FLEET_BACKEND_PORT=18000\nCUDA_VISIBLE_DEVICES=0\n"
    )
    (etc / "vllm-a.env").write_text("HF_TOKEN=hf_one\n")
    (tmp_path / "staged.env").write_text("HF_TOKEN=hf_one\n")
    installed = tmp_path / UNIT
    installed.write_text(unit_text(etc))
    unit = contract.Unit(UNIT, "active", managed=True, owner="dev.chat", fragment=str(installed), main_pid=4242)
    record = contract.ActiveRecord(UNIT, "chat", 8000, (0,), 18000)
    environment = {
        "HF_HOME": "/shared/hf",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_FLEET_GPUS": "0",
        "VLLM_FLEET_BACKEND_PORT": "18000",
        "CUDA_VISIBLE_DEVICES": "0",
        "HF_TOKEN": "hf_one",
        # systemd's own, in every service: no unit spells them.
        "INVOCATION_ID": "5f3c",
        "JOURNAL_STREAM": "8:1234",
        "PATH": "/usr/bin",
    }
    process = Process(4242, (PYTHON, *args.split(), "--port", "18000"), environment)
    return etc, unit, record, process


def question(tmp_path: Path, text: str) -> contract.LaunchQuestion:
    return contract.LaunchQuestion("dev.chat", UNIT, PYTHON, text, str(tmp_path / "staged.env"), port=18000)


def same_unit(tmp_path: Path, text: str, process: Process | None = None, **serving_args: str) -> contract.EngineReading:
    etc, unit, record, serving_process = serving(tmp_path, **serving_args)
    parse = Parser()
    return engine_launch.same_unit_reading(
        question(tmp_path, text.replace("ETC", str(etc))),
        unit,
        record,
        process or serving_process,
        str(etc),
        "/c",
        parse,
    )


def test_a_unit_changed_outside_its_launch_keeps_the_engine_and_needs_no_vllm(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    reading = same_unit(tmp_path, unit_text(etc, comment="# reworded", timeout=600))
    assert reading.same_launch and reading.kind == contract.SAME_UNIT and reading.pid == 4242
    assert reading.unit_changes == ("TimeoutStartSec=", "its comments")
    assert reading.how == "word for word" and reading.note is None


def test_a_flag_spelled_otherwise_is_the_same_launch_as_vllm_reads_it(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    # (--a_b=c too, with the host's own FlexibleArgumentParser: tests/test_launch_identity.py.)
    spelled = "-m vllm.entrypoints.openai.api_server --model=/m --max-model-len=512 --host 127.0.0.1 -tp 1"
    reading = same_unit(tmp_path, unit_text(etc, spelled))
    assert reading.same_launch, reading
    assert reading.how == "as this host's vLLM 0.32.0 reads them" and "7.1 s" in (reading.note or "")


def test_a_changed_flag_variable_or_secret_is_a_launch_change_named_one_line_each(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    flag = same_unit(tmp_path / "flag", unit_text(tmp_path / "flag" / "etc", ARGS.replace("512", "256")))
    assert flag.differences == ("--max-model-len is 512 now, 256 in the new unit",)
    variable = same_unit(tmp_path / "var", unit_text(tmp_path / "var" / "etc").replace("/shared/hf", "/srv/hf"))
    assert "the Hugging Face home is /shared/hf now, /srv/hf in the new unit" in variable.differences
    assert not variable.same_launch
    etc, unit, record, process = serving(tmp_path)
    (tmp_path / "staged.env").write_text("HF_TOKEN=hf_rotated\n")
    secret = engine_launch.same_unit_reading(
        question(tmp_path, unit_text(etc)), unit, record, process, str(etc), "/c", Parser()
    )
    assert secret.differences == ("its HF_TOKEN is another (not shown)",)
    assert "hf_" not in repr(secret)


def test_a_unit_edited_by_hand_whose_engine_never_restarted_runs_the_stacks_launch(tmp_path: Path) -> None:
    """The installed file says --max-model-len 256 (edited, maybe reloaded), the process runs 512, which is
    the stack's: the repair rewrites the file and keeps the engine. Restarted by hand with the edit, it differs."""
    etc, unit, record, process = serving(tmp_path)
    Path(unit.fragment).write_text(unit_text(etc, ARGS.replace("512", "256")))
    parse = Parser()
    kept = engine_launch.same_unit_reading(
        question(tmp_path, unit_text(etc)), unit, record, process, str(etc), "/c", parse
    )
    assert kept.same_launch and parse.asked == [], kept
    assert kept.unit_changes == ()
    edited = Process(4243, tuple(w.replace("512", "256") for w in process.argv), process.environment)
    restarted = engine_launch.same_unit_reading(
        question(tmp_path, unit_text(etc)), unit, record, edited, str(etc), "/c", parse
    )
    assert restarted.differences == ("--max-model-len is 256 now, 512 in the new unit",)


def test_where_vllm_cannot_read_them_the_words_decide(tmp_path: Path) -> None:
    etc, unit, record, process = serving(tmp_path)

    def refuses(python: str, launches: Sequence[identity.Launch], cache: str) -> identity.Outcome:
        raise identity.ParseFailed(f"{python} could not read the launches with its vLLM: no module named vllm")

    spelled = unit_text(etc, ARGS.replace("--max-model-len 512", "--max-model-len=512"))
    reading = engine_launch.same_unit_reading(
        question(tmp_path, spelled), unit, record, process, str(etc), "/c", refuses
    )
    assert not reading.same_launch and reading.how.startswith("word for word (")
    assert "no module named vllm" in reading.how
    assert reading.differences[0].startswith("ExecStart= is /opt/vllm-env/bin/python3 -m vllm")


HAND_MADE = f"""[Unit]
Description=by hand
[Service]
Environment=HF_HOME=/shared/hf CUDA_VISIBLE_DEVICES=3 TMPDIR=/tmp/by-hand
ExecStart={PYTHON} -m vllm.entrypoints.cli.main serve /m --port 8000 --max-model-len=512
"""


def test_a_hand_made_engine_spelled_otherwise_reads_as_the_stacks_launch(tmp_path: Path) -> None:
    etc, _unit, _record, _process = serving(tmp_path)
    unit = contract.Unit("vllm-a.service", "active", main_pid=77)
    argv = (PYTHON, "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--port", "8000", "--max-model-len=512")
    env = {"HF_HOME": "/shared/hf", "CUDA_VISIBLE_DEVICES": "3", "TMPDIR": "/tmp/by-hand", "INVOCATION_ID": "x"}
    parse = Parser()
    reading = engine_launch.take_over_reading(
        question(tmp_path, unit_text(etc)), unit, HAND_MADE, Process(77, argv, env), "/c", parse
    )
    assert reading.kind == contract.TAKE_OVER and reading.same_launch, reading
    # The stack's port is the engine port the question names, as the placement sets it at the start.
    assert parse.asked[0][1].args[-1] == "18000"
    # Without its HF_HOME (the process has none either) the caches resolve elsewhere: a real difference.
    bare = {k: v for k, v in env.items() if k != "HF_HOME"}
    other = engine_launch.take_over_reading(
        question(tmp_path, unit_text(etc)),
        unit,
        HAND_MADE.replace("HF_HOME=/shared/hf ", ""),
        Process(77, argv, bare),
        "/c",
        parse,
    )
    assert "the Hugging Face home is /root/.cache/huggingface there, /shared/hf in the stack" in other.differences


def test_reading_asks_the_engine_that_serves_and_only_where_a_comparison_decides(tmp_path: Path) -> None:
    etc, unit, record, process = serving(tmp_path)
    text = unit_text(etc)
    ask = question(tmp_path, text)
    processes = {4242: process}
    state = contract.DeploymentState(record)

    def read(units: list[contract.Unit], state: contract.DeploymentState) -> contract.EngineReading | None:
        return engine_launch.reading(ask, units, {}, state, processes.get, str(etc), "/c", Parser())

    answer = read([unit], state)
    assert answer is not None and answer.kind == contract.SAME_UNIT and answer.same_launch
    # Another model's unit serves (a swap to come), or the engine runs a launch adopted in place: no question.
    assert read([unit], contract.DeploymentState(contract.ActiveRecord("vllm-b.service", backend_port=18000))) is None
    adopted = contract.ActiveRecord(UNIT, "chat", 8000, (0,), None, adopted=UNIT)
    assert read([unit], contract.DeploymentState(adopted)) is None
    # A first take-over reads the one hand-made unit that runs; two of them, none.
    by_hand = contract.Unit(UNIT, "active", main_pid=4242)
    assert (found := read([by_hand], contract.DeploymentState())) is not None and found.kind == contract.TAKE_OVER
    other = contract.Unit("vllm-b.service", "active", main_pid=5)
    ask = contract.LaunchQuestion("dev.chat", UNIT, PYTHON, text, replaces=("vllm-b.service",), port=18000)
    assert read([by_hand, other], contract.DeploymentState()) is None


def test_a_process_is_read_as_it_was_execd(tmp_path: Path) -> None:
    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "cmdline").write_bytes(b"/opt/vllm-env/bin/python3\0-m\0vllm.entrypoints.openai.api_server\0--model\0/a b\0")
    (pid / "environ").write_bytes(b"HF_HOME=/shared/hf\0A=b=c\0")
    (pid / "status").write_text("Name:\tpython3\nUid:\t0\t0\t0\t0\n")
    process = read_process(4242, str(tmp_path), user_of=lambda uid: "root" if uid == 0 else "?")
    assert process == Process(
        4242,
        ("/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/a b"),
        {"HF_HOME": "/shared/hf", "A": "b=c"},
        "root",
    )
    assert read_process(4343, str(tmp_path)) is None and read_process(0, str(tmp_path)) is None
