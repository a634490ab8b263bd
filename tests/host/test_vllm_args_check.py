"""vllm-args-check's logic on argparse parsers shaped like two vLLM generations' servers. The real
parser of the sandbox's vLLM is exercised end to end (tests/test_brownfield.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from host.tools import vllm_args_check as tool

ORIGINS = {
    "--disable-log-requests": "vllm-fleet:models.kimi-k2.5-int4.serving.extraArgs",
    "--attention-backend": "vllm-fleet:models.kimi-k2.5-int4.serving.attentionBackend",
    "--tensor-parallel-size": "vllm-fleet:models.kimi-k2.5-int4.serving.tensorParallel",
}


def api_server_parser() -> argparse.ArgumentParser:
    """The options both generations have."""
    parser = argparse.ArgumentParser(prog="api_server")
    parser.add_argument("--model")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    return parser


def parser_like_v0_11() -> argparse.ArgumentParser:
    """Has --disable-log-requests, predates --attention-backend (REFERENCE.md section 5)."""
    parser = api_server_parser()
    parser.add_argument("--disable-log-requests", action="store_true")
    return parser


def parser_like_v0_32() -> argparse.ArgumentParser:
    parser = api_server_parser()
    parser.add_argument("--attention-backend", choices=["TRITON_MLA", "FLASH_ATTN", "CPU_ATTN"])
    parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
    return parser


def test_accepted_launch() -> None:
    args = ["--model", "/shared/kimi", "--tensor-parallel-size", "8", "--disable-log-requests"]
    verdict = tool.check(args, "vllm-kimi.service", ORIGINS, "0.11.2", parser_like_v0_11, None)
    assert verdict.accepted and verdict.message == "vLLM 0.11.2 accepts the launch of vllm-kimi.service (5 arguments)"


def test_removed_flag_names_the_flag_its_key_and_the_version() -> None:
    args = ["--model", "/shared/kimi", "--disable-log-requests"]
    verdict = tool.check(args, "vllm-kimi.service", ORIGINS, "0.32.0", parser_like_v0_32, None)
    assert not verdict.accepted
    assert verdict.message.startswith("vLLM 0.32.0 on this host rejects the launch of vllm-kimi.service: ")
    assert "--disable-log-requests (from vllm-fleet:models.kimi-k2.5-int4.serving.extraArgs)" in verdict.message
    assert "unrecognized arguments: --disable-log-requests" in verdict.message


@pytest.mark.parametrize(
    ("args", "version", "parser", "expected"),
    [
        pytest.param(
            ["--model", "/shared/kimi", "--attention-backend", "TRITON_MLA"],
            "0.11.2",
            parser_like_v0_11,
            ["--attention-backend (from vllm-fleet:models.kimi-k2.5-int4.serving.attentionBackend)"],
            id="a-flag-of-a-newer-release-on-an-older-one",
        ),
        pytest.param(
            ["--model", "/m", "--tensor-parallel-size", "eight"],
            "0.32.0",
            parser_like_v0_32,
            [
                "--tensor-parallel-size (from vllm-fleet:models.kimi-k2.5-int4.serving.tensorParallel)",
                "invalid int value: 'eight'",
            ],
            id="an-invalid-value",
        ),
    ],
)
def test_a_rejected_argument_is_blamed_on_its_flag_and_key(
    args: list[str], version: str, parser: Callable[[], argparse.ArgumentParser], expected: list[str]
) -> None:
    verdict = tool.check(args, "u.service", ORIGINS, version, parser, None)
    assert not verdict.accepted
    for part in expected:
        assert part in verdict.message


def test_validation_after_parsing_fails_the_launch() -> None:
    def validate(namespace: argparse.Namespace) -> None:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")

    verdict = tool.check(["--model", "/m"], "u.service", ORIGINS, "0.32.0", parser_like_v0_32, validate)
    assert not verdict.accepted
    assert "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser" in verdict.message


def test_flags_named_matches_whole_flags_only() -> None:
    args = ["--enable-log-requests", "--enable-log-requests-extra", "--port=8000"]
    assert tool.flags_named("unrecognized arguments: --enable-log-requests-extra", args) == [
        "--enable-log-requests-extra"
    ]
    assert tool.flags_named("argument --port: invalid int value", args) == ["--port"]


def test_main_reports_a_host_without_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"unit": "u.service", "args": ["--model", "/m"]}))
    # This controller's venv has no vLLM: the tool says so instead of passing the launch.
    assert tool.main(["--spec", str(spec)]) == 1
    assert "cannot load this host's vLLM argument parser" in capsys.readouterr().err


def test_an_attention_backend_this_vllm_lacks_is_refused_before_the_stop() -> None:
    environment = {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}
    origins = {"VLLM_ATTENTION_BACKEND": "vllm-fleet:models.kimi.serving.attentionBackend"}
    known = ["VLLM_ATTENTION_BACKEND", "VLLM_HOST_IP"]
    accepted = tool.check_environment(
        environment, "vllm-k.service", origins, "0.11.0", ["FLASH_ATTN", "TRITON_MLA"], known
    )
    assert accepted.accepted and "TRITON_MLA" in accepted.message
    refused = tool.check_environment(environment, "vllm-k.service", origins, "0.11.0", ["FLASH_ATTN"], known)
    assert not refused.accepted
    assert "has no attention backend 'TRITON_MLA'" in refused.message and "serving.attentionBackend" in refused.message
    # A release that no longer reads the variable would ignore it silently at start: refused too.
    ignored = tool.check_environment(environment, "vllm-k.service", origins, "0.32.0", ["TRITON_MLA"], ["VLLM_HOST_IP"])
    assert not ignored.accepted and "no longer reads VLLM_ATTENTION_BACKEND" in ignored.message
    # Nothing to judge, or a vLLM that does not say: accepted.
    assert tool.check_environment({}, "u", {}, "0.11.0", None, None).accepted
    assert tool.check_environment(environment, "u", {}, "0.11.0", None, None).accepted


def test_an_accepted_launch_is_remembered_and_a_changed_one_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    imports: list[str] = []

    def fake_host_vllm() -> tuple[str, object, None]:
        imports.append("vllm")
        return "0.32.0", parser_like_v0_32, None

    monkeypatch.setattr(tool, "installed_vllm", lambda: ("0.32.0", "record-digest"))
    monkeypatch.setattr(tool, "host_vllm", fake_host_vllm)
    spec = tmp_path / "spec.json"
    cache = ["--cache", str(tmp_path / "cache")]
    spec.write_text(json.dumps({"unit": "u.service", "args": ["--model", "/m"]}))
    assert tool.main(["--spec", str(spec), *cache]) == 0
    assert tool.main(["--spec", str(spec), *cache]) == 0
    assert imports == ["vllm"]  # the second check did not import vLLM
    assert "remembered from" in capsys.readouterr().out
    # Another model with the same flags, under another unit: the same verdict, named for the new unit.
    spec.write_text(json.dumps({"unit": "v.service", "args": ["--model", "/other"]}))
    assert tool.main(["--spec", str(spec), *cache]) == 0
    assert imports == ["vllm"]
    said = capsys.readouterr().out
    assert "accepts the launch of v.service" in said and "when it accepted that of u.service" in said, said
    # Another launch, or the same one on another vLLM, is checked afresh; a rejection is not remembered.
    spec.write_text(json.dumps({"unit": "u.service", "args": ["--model", "/m", "--disable-log-requests"]}))
    assert tool.main(["--spec", str(spec), *cache]) == 1
    assert tool.main(["--spec", str(spec), *cache]) == 1
    assert imports == ["vllm"] * 3
    spec.write_text(json.dumps({"unit": "u.service", "args": ["--model", "/m"]}))
    monkeypatch.setattr(tool, "installed_vllm", lambda: ("0.33.0", "other-record"))
    assert tool.main(["--spec", str(spec), *cache]) == 0
    assert imports == ["vllm"] * 4


def test_verdict_key_follows_the_vllm_environment_only() -> None:
    spec = {"unit": "u.service", "args": ["--model", "/m"]}
    base = tool.verdict_key(spec, ("0.32.0", "r"), "/opt/vllm-env/bin/python3", {"HOME": "/root"})
    assert base == tool.verdict_key(spec, ("0.32.0", "r"), "/opt/vllm-env/bin/python3", {"HOME": "/tmp"})
    assert base != tool.verdict_key(spec, ("0.32.0", "r"), "/opt/vllm-env/bin/python3", {"VLLM_USE_V1": "0"})
    assert base != tool.verdict_key(spec, ("0.32.0", "r2"), "/opt/vllm-env/bin/python3", {})


def test_verdict_key_leaves_out_only_what_names_the_model() -> None:
    """A swap to another model with the same flags is the same verdict; any other flag or value is not."""

    def key(unit: str, *args: str) -> str:
        return tool.verdict_key({"unit": unit, "args": list(args)}, ("0.32.0", "r"), "/py", {})

    base = key("vllm-a.service", "--model", "/shared/a", "--served-model-name", "a", "--port", "18000")
    assert base == key("vllm-b.service", "--model", "/shared/b", "--served-model-name", "b", "c", "--port", "18000")
    assert base == key("vllm-b.service", "--model=/shared/b", "--served-model-name=b", "--port", "18000")
    assert base != key("vllm-a.service", "--model", "/shared/a", "--served-model-name", "a", "--port", "18001")
    assert base != key("vllm-a.service", "--model", "/shared/a", "--port", "18000")
    assert base != key("vllm-a.service", "--model", "/shared/a", "--served-model-name", "a", "--port", "18000", "-O3")
    # A headless node's `serve MODEL ...`: the positional model is a name too, the flags after it are not.
    node = key("vllm-a-node1.service", "/shared/a", "--headless", "--nnodes", "2")
    assert node == key("vllm-b-node1.service", "/shared/b", "--headless", "--nnodes", "2")
    assert node != key("vllm-b-node1.service", "/shared/b", "--headless", "--nnodes", "3")
    assert tool.without_names(["/m", "--dtype", "float32", "--served-model-name", "x", "y", "--enforce-eager"]) == [
        tool.NAMED,
        "--dtype",
        "float32",
        "--served-model-name",
        tool.NAMED,
        "--enforce-eager",
    ]
