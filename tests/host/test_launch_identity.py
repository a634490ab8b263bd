"""Launch identity's logic on argparse parsers shaped like vLLM's server parser and a table shaped like
vllm.envs'. The sandbox's real vLLM reads the spellings the issue names in tests/test_launch_identity.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from host import launch_identity as identity
from host.launch_identity import ADOPTION, SAME_UNIT, Launch, ParsedLaunch

PYTHON = "/opt/vllm-env/bin/python3"


def vllm_like_parser() -> argparse.ArgumentParser:
    """The few arguments of vLLM's server parser these tests need, with its defaults of 0.32."""
    parser = argparse.ArgumentParser(prog="api_server")
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--quantization", "-q")
    parser.add_argument("--attention-backend")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--api-key")
    return parser


TABLE = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": lambda: bool(int(os.getenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1"))),
    "VLLM_CPU_KVCACHE_SPACE": lambda: (
        int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) if "VLLM_CPU_KVCACHE_SPACE" in os.environ else None
    ),
}


def parsed(argv: list[str], environment: Mapping[str, str] | None = None, user: str = "root") -> ParsedLaunch:
    launch = identity.split_launch(argv, environment or {}, user)
    assert launch is not None, argv
    read = identity.parse_launch(launch, "0.32.0", vllm_like_parser, TABLE)
    # The venv's python3 is a link to the system's; the console script's first line names the venv's.
    return identity.on_this_host(
        read,
        launch,
        resolve=lambda path: "/usr/bin/python3.11" if path.startswith("/opt/vllm-env/bin/python") else path.rstrip("/"),
        home=lambda _user: "/root",
        read_first_line=lambda path: f"#!{PYTHON}\n" if path == "/opt/vllm-env/bin/vllm" else "",
    )


def api_server(*args: str) -> list[str]:
    return [PYTHON, "-m", "vllm.entrypoints.openai.api_server", *args]


def test_split_launch_knows_the_three_ways_to_start_the_server() -> None:
    plain = identity.split_launch(api_server("--model", "/m"))
    assert plain == Launch((PYTHON,), "api_server", ("--model", "/m"), {}, "root")
    cli = identity.split_launch([PYTHON, "-u", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "-tp", "2"])
    assert (
        cli is not None and cli.interpreter == (PYTHON, "-u") and cli.form == "serve" and cli.args == ("/m", "-tp", "2")
    )
    script = identity.split_launch(["/opt/vllm-env/bin/vllm", "serve", "/m"])
    assert script is not None and script.interpreter == ("/opt/vllm-env/bin/vllm",) and script.args == ("/m",)
    # The same script's process, as the kernel ran its `#!` line: its Python is the interpreter.
    running = identity.split_launch([PYTHON, "/opt/vllm-env/bin/vllm", "serve", "/m"])
    assert running is not None and running.interpreter == (PYTHON,) and running.args == ("/m",)
    assert identity.split_launch(["/usr/bin/python3", "-m", "http.server"]) is None
    # The placement's port, as systemd expands it when the unit starts; a variable not set stays as written.
    placed = identity.split_launch(
        api_server("--port", "${VLLM_FLEET_BACKEND_PORT}", "--x", "$NOPE"),
        {},
        "root",
        {"VLLM_FLEET_BACKEND_PORT": "18000"},
    )
    assert placed is not None and placed.args == ("--port", "18000", "--x", "$NOPE")


def test_the_same_engine_spelled_otherwise_has_no_difference() -> None:
    stack = parsed(
        api_server("--model", "/shared/m", "--served-model-name", "chat", "/shared/m", "--max-model-len", "512",
                   "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.92", "--host", "127.0.0.1", "--port", "18000"),
        {"HF_HOME": "/shared/huggingface", "TRANSFORMERS_CACHE": "/shared/huggingface/hub", "HF_HUB_OFFLINE": "1",
         "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": "/var/cache/vllm-fleet/dev.chat"},
    )  # fmt: skip
    by_hand = parsed(
        ["/opt/vllm-env/bin/vllm", "serve", "/shared/m/", "--max-model-len", "512", "-tp", "1", "--port", "8000"],
        {"HF_HOME": "/shared/huggingface", "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "TMPDIR": "/tmp/by-hand",
         "CUDA_VISIBLE_DEVICES": "3"},
    )  # fmt: skip
    assert identity.differences(by_hand, stack, ADOPTION) == []
    # Its process, the script run by the Python of its first line, is the same engine too.
    running = parsed(
        [PYTHON, "/opt/vllm-env/bin/vllm", "serve", "/shared/m/", "--max-model-len", "512"], by_hand.environment
    )
    assert identity.differences(running, stack, ADOPTION) == []
    # A default written out is left out of what it read; vLLM's table read the variable set to its default.
    assert "tensor_parallel_size" not in stack.values and "gpu_memory_utilization" not in stack.values
    assert by_hand.vllm_read == ("VLLM_ENABLE_V1_MULTIPROCESSING",) and by_hand.vllm_env == {}


def test_each_real_difference_is_one_line() -> None:
    stack = parsed(api_server("--model", "/shared/m", "--max-model-len", "512"), {"NCCL_PROTO": "LL"})
    other = parsed(
        api_server("--model", "/shared/m", "--max-model-len", "1024", "-q", "awq", "--attention-backend", "TRITON_MLA",
                   "--gpu-memory-utilization", "0.9"),
        {"NCCL_PROTO": "Simple", "VLLM_CPU_KVCACHE_SPACE": "4"},
    )  # fmt: skip
    assert identity.differences(other, stack, ADOPTION) == [
        "--attention-backend is TRITON_MLA there, null (vLLM's default) in the stack",
        "--gpu-memory-utilization is 0.9 there, 0.92 (vLLM's default) in the stack",
        "--max-model-len is 1024 there, 512 in the stack",
        "--quantization is awq there, null (vLLM's default) in the stack",
        "vLLM reads VLLM_CPU_KVCACHE_SPACE as 4 there, null (vLLM's default) in the stack",
        "its environment has NCCL_PROTO=Simple, the stack's NCCL_PROTO=LL",
    ]


def test_the_layout_decides_what_is_left_out() -> None:
    stack = parsed(api_server("--model", "/shared/m", "--served-model-name", "chat", "--host", "127.0.0.1", "--port", "18000"),
                   {"TMPDIR": "/tmp/a", "CUDA_VISIBLE_DEVICES": "0"})  # fmt: skip
    by_hand = parsed(
        api_server("--model", "/shared/m", "--port", "8000"), {"TMPDIR": "/tmp/b", "CUDA_VISIBLE_DEVICES": "3"}
    )
    assert identity.differences(by_hand, stack, ADOPTION) == []
    # The same unit rewritten: the engine must restart to listen elsewhere, serve other names, use other GPUs.
    assert identity.differences(by_hand, stack, SAME_UNIT) == [
        "--host is null (vLLM's default) now, 127.0.0.1 in the new unit",
        "--port is 8000 (vLLM's default) now, 18000 in the new unit",
        '--served-model-name is null (vLLM\'s default) now, ["chat"] in the new unit',
        "its environment has CUDA_VISIBLE_DEVICES=3, the new unit's CUDA_VISIBLE_DEVICES=0",
        "its environment has TMPDIR=/tmp/b, the new unit's TMPDIR=/tmp/a",
    ]


def test_model_files_interpreter_and_a_rejected_launch() -> None:
    stack = parsed(api_server("--model", "/shared/m"))
    assert identity.differences(parsed(api_server("--model", "/shared/other")), stack) == [
        "it serves the model files in /shared/other, the stack those in /shared/m"
    ]
    other_python = parsed(["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/m"])
    (line,) = identity.differences(other_python, stack)
    assert line.startswith("it runs the Python ") and "(hosts[].runtime.python)" in line
    rejected = parsed(api_server("--model", "/shared/m", "--num-scheduler-steps=8"))
    assert identity.differences(rejected, stack) == [
        "vLLM 0.32.0 on this host rejects its launch: unrecognized arguments: --num-scheduler-steps=8"
    ]


@pytest.mark.parametrize(
    ("theirs", "same"),
    [
        pytest.param({"HF_HOME": "/shared/huggingface"}, True, id="HF_HOME-without-TRANSFORMERS_CACHE"),
        pytest.param({"HF_HUB_CACHE": "/shared/huggingface/hub", "HF_HOME": "/shared/huggingface/"}, True, id="hub-spelled-out"),
        pytest.param({"XDG_CACHE_HOME": "/shared"}, True, id="through-XDG_CACHE_HOME"),
        pytest.param({"HF_HOME": "/shared/huggingface", "HUGGINGFACE_HUB_CACHE": "/data/hub"}, False, id="legacy-hub-variable"),
        pytest.param({}, False, id="the-users-home"),
        pytest.param({"HF_HOME": "/shared/huggingface", "TRANSFORMERS_CACHE": "/data/tf"}, False, id="transformers-elsewhere"),
    ],
)  # fmt: skip
def test_cache_variables_compare_by_the_directories_they_resolve_to(theirs: dict[str, str], same: bool) -> None:
    stack = {"HF_HOME": "/shared/huggingface", "TRANSFORMERS_CACHE": "/shared/huggingface/hub"}
    # XDG_CACHE_HOME=/shared: the Hugging Face home is /shared/huggingface, and torch's cache moves too.
    stack_torch = {**stack, "TORCH_HOME": "/shared/torch"}
    there = identity.cache_directories(theirs, "/root")
    here = identity.cache_directories(stack_torch if "XDG_CACHE_HOME" in theirs else stack, "/root")
    assert (there == here) is same, (there, here)


def test_a_difference_in_the_cache_directories_names_the_directory() -> None:
    stack = parsed(api_server("--model", "/m"), {"HF_HOME": "/shared/huggingface"})
    by_hand = parsed(api_server("--model", "/m"), {"HF_HOME": "/shared/huggingface", "HF_HUB_CACHE": "/data/hub"})
    assert identity.differences(by_hand, stack) == [
        "the Hugging Face hub cache is /data/hub there, /shared/huggingface/hub in the stack",
        "transformers' cache is /data/hub there, /shared/huggingface/hub in the stack",
    ]


def test_a_secret_is_compared_but_never_shown() -> None:
    stack = parsed(api_server("--model", "/m"), {"HF_TOKEN": "hf_stackToken"})
    by_hand = parsed(api_server("--model", "/m"), {"HF_TOKEN": "hf_handToken"})
    (line,) = identity.differences(by_hand, stack, SAME_UNIT)
    assert line == "its HF_TOKEN is another (not shown)"
    assert "hf_" not in json.dumps(by_hand.to_dict()) and "hf_" not in json.dumps(stack.to_dict())
    # A take-over leaves the token out: the stack's download credential, which the offline engine never uses.
    assert identity.differences(by_hand, stack) == []
    assert identity.differences(parsed(api_server("--model", "/m"), {"HF_TOKEN": "hf_stackToken"}), stack) == []
    keyed = parsed(api_server("--model", "/m", "--api-key", "sk-handmade"), {"HF_TOKEN": "hf_stackToken"})
    assert identity.differences(keyed, stack) == ["--api-key is set on one side only (not shown)"]
    assert "sk-handmade" not in json.dumps(keyed.to_dict())


def test_managed_variables_are_left_out_only_where_one_side_lacks_them() -> None:
    stack = parsed(api_server("--model", "/m"), {"HF_HUB_OFFLINE": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert identity.differences(parsed(api_server("--model", "/m")), stack) == []
    other = parsed(api_server("--model", "/m"), {"HF_HUB_OFFLINE": "0"})
    assert identity.differences(other, stack) == ["its environment has HF_HUB_OFFLINE=0, the stack's HF_HUB_OFFLINE=1"]


def test_plain_makes_parsed_values_comparable() -> None:
    import enum
    from dataclasses import dataclass

    class Level(enum.Enum):
        O3 = 3

    @dataclass
    class Compilation:
        level: Level
        passes: frozenset[str]

    assert identity.plain(Compilation(Level.O3, frozenset({"b", "a"}))) == {"level": 3, "passes": ["a", "b"]}
    assert identity.plain(Path("/m")) == "/m"
    assert identity.plain(object()).startswith("<object object") and " at 0x" not in identity.plain(object())


def test_a_parsed_launch_round_trips_through_json() -> None:
    one = parsed(api_server("--model", "/m", "--max-model-len", "8"), {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert ParsedLaunch.from_dict(json.loads(json.dumps(one.to_dict()))) == one


def fake_vllm(monkeypatch: pytest.MonkeyPatch, imports: list[str], version: str = "0.32.0") -> None:
    def host_vllm() -> tuple[str, Any, None]:
        imports.append("vllm")
        return version, vllm_like_parser, None

    monkeypatch.setattr(identity, "installed_vllm", lambda: (version, f"record-{version}"))
    monkeypatch.setattr(identity, "host_vllm", host_vllm)
    monkeypatch.setitem(sys.modules, "vllm.envs", type(sys)("vllm.envs"))
    sys.modules["vllm.envs"].environment_variables = TABLE  # type: ignore[attr-defined]


def test_a_parsed_launch_is_kept_and_vllm_imported_only_for_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    imports: list[str] = []
    fake_vllm(monkeypatch, imports)
    one, two = (Launch((PYTHON,), "api_server", ("--model", m)) for m in ("/a", "/b"))
    first = identity.parse_all([one], tmp_path)
    assert imports == ["vllm"] and first.fresh == 1 and first.note() is not None
    assert "argument parser in" in (first.note() or "")
    again = identity.parse_all([one], tmp_path)
    assert imports == ["vllm"] and again.fresh == 0 and again.took == 0.0 and again.note() is None
    assert again.parsed == first.parsed
    both = identity.parse_all([two, one], tmp_path)
    assert imports == ["vllm"] * 2 and both.fresh == 1 and [p.model for p in both.parsed] == ["/b", "/a"]
    # Another vLLM reads every launch afresh.
    fake_vllm(monkeypatch, imports, "0.33.0")
    assert identity.parse_all([one], tmp_path).fresh == 1 and imports == ["vllm"] * 3


def test_the_front_runs_the_venvs_python_on_this_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # This controller's venv has no vLLM: the front says so, from the Python it started.
    launch = Launch((PYTHON,), "api_server", ("--model", "/m"))
    with pytest.raises(identity.ParseFailed, match="has no vLLM installed"):
        identity.parse_with(sys.executable, [launch], str(tmp_path))
    with pytest.raises(identity.ParseFailed, match="could not read the launches"):
        identity.parse_with(str(tmp_path / "no-python"), [launch], str(tmp_path))
