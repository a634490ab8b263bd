"""Which part of a unit is the engine's launch, on units as render/units.py writes them and as teams
wrote them by hand. tests/test_unit_file.py pins the parse to the sandbox's systemd."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from host import unit_file
from host.unit_file import KEEPS_RUNNING, UnitLaunch, launch_change, read_unit, words
from models.loader import parse_stack_config
from render.paths import TEMPLATES
from render.units import render_unit
from tests.support.paths import ROOT
from tests.support.stacks import stack_values

# A unit written by hand, with what systemd's reading of the launch settings must get right; what
# systemd 252 holds after loading it (tests/test_unit_file.py asks it) is HAND_MADE_LAUNCH.
HAND_MADE = r"""[Unit]
Description=by hand ; not a comment
; a comment
[Service]
Environment="A=b c" B='x y' C=d\ e
Environment=D=%%x E=$$HOME
Environment=
Environment=F=1 "G=two words" H=tab\there I=\x41\101
EnvironmentFile=-/etc/x.env
EnvironmentFile=/etc/y.env
WorkingDirectory=-~
User=nobody
ExecStart=-/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server \
# a comment inside a continuation is dropped
  --model "/shared/a b" --x 'single q' --y=%%z --port $PORT --z $${HOME} \
  --json '{"a": 1}' --unit %n
"""
HAND_MADE_LAUNCH = UnitLaunch(
    (
        "/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/shared/a b",
        "--x", "single q", "--y=%z", "--port", "$PORT", "--z", "$${HOME}", "--json", '{"a": 1}',
        "--unit", "vllm-probe.service",
    ),
    (("F", "1"), ("G", "two words"), ("H", "tab\there"), ("I", "AA")),
    (("/etc/x.env", True), ("/etc/y.env", False)),
    "nobody",
    "-~",
)  # fmt: skip


def test_the_launch_settings_are_read_as_systemd_reads_them() -> None:
    read = read_unit(HAND_MADE, "vllm-probe.service")
    assert read.launch == HAND_MADE_LAUNCH
    assert read.settings[("Unit", "Description")] == ("by hand ; not a comment",)
    assert read.comments == ("; a comment",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r""""A=b c" B='x y' C=d\ e""", ["A=b c", "B=x y", "C=d e"]),
        (r"""--json '{"a": 1}' x"y z"w""", ["--json", '{"a": 1}', "xy zw"]),
        (r"""a\"b 'c\'d' \s""", ['a"b', "c'd", " "]),
        ("  spaced \t out  ", ["spaced", "out"]),
    ],
)
def test_words_split_as_systemds_extract_first_word(text: str, expected: list[str]) -> None:
    assert words(text) == expected


def test_an_empty_exec_start_resets_it_and_a_drop_in_sets_another() -> None:
    drop_in = "[Service]\nExecStart=\nExecStart=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --port 8000\n"
    read = read_unit("[Service]\nExecStart=/bin/true\n" + drop_in)
    assert read.launch.exec_start == ("/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000")
    assert read_unit("[Service]\nExecStart=/bin/true\nExecStart=\n").launch.exec_start is None


def test_environment_files_win_over_environment_lines() -> None:
    launch = read_unit("[Service]\nEnvironment=A=1 B=2\nEnvironmentFile=/e.env\nEnvironmentFile=-/missing.env\n").launch
    content = "# secrets\nB=3\nC=\"quoted value\"\n\nD='single'\n"
    assert launch.variables({"/e.env": content, "/missing.env": None}) == {
        "A": "1",
        "B": "3",
        "C": "quoted value",
        "D": "single",
    }


def rendered(**serving: Any) -> str:
    """The dev stack's unit, with `serving` overriding its model's serving config."""
    raw = copy.deepcopy(stack_values("dev"))
    raw = {k: v for k, v in raw.items() if not (isinstance(v, dict) and "secure" in v)}
    for model in raw["models"].values():
        model.setdefault("serving", {}).update(serving)
    (rd, *_) = parse_stack_config(raw).resolved_deployments()
    return render_unit(rd, "dev").text


def test_a_reworded_comment_of_the_template_is_a_rewrite_and_a_reload_not_a_restart() -> None:
    before = rendered()
    template = (TEMPLATES / "vllm.service.tmpl").read_text()
    assert "# Stop the whole control group" in template
    after = before.replace("# Stop the whole control group", "# Stop every process of the control group")
    change = launch_change(before, after)
    assert not change.restart and change.other == ("its comments",)
    assert change.describe() == f"{KEEPS_RUNNING}; it changes its comments"
    assert launch_change(before, before).unchanged


def test_settings_outside_the_launch_are_a_reload() -> None:
    before = rendered()
    after = (
        before.replace("TimeoutStartSec=", "TimeoutStartSec=9")
        .replace("Restart=on-failure", "Restart=always")
        .replace("LimitNOFILE=65536", "LimitNOFILE=1048576")
        .replace("Description=vLLM serving", "Description=vLLM (upgraded) serving")
        .replace(
            "/usr/local/lib/vllm-fleet/clean-shm\nExecStart=", "/usr/local/lib/vllm-fleet/clean-shm --quiet\nExecStart="
        )
    )
    change = launch_change(before, after)
    assert not change.restart, change
    assert change.other == ("ExecStartPre=", "LimitNOFILE=", "Restart=", "TimeoutStartSec=", "Description=")


def test_a_flag_an_environment_variable_a_user_a_directory_or_the_model_files_are_a_restart() -> None:
    before = rendered()
    flag = launch_change(before, rendered(maxModelLen=256))
    assert flag.restart and len(flag.launch) == 1 and "--max-model-len 256" in flag.launch[0]
    lora = launch_change(before, rendered(lora={"maxLoras": 2, "maxLoraRank": 16}))
    assert lora.restart and "its environment sets VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in lora.launch
    # wait-ready's --adapters (ExecStartPost=) is outside the launch; the ExecStart line is not.
    assert "ExecStartPost=" in lora.other
    env = launch_change(before, before.replace("Environment=HF_HUB_OFFLINE=1", "Environment=HF_HUB_OFFLINE=0"))
    assert env.launch == ("its environment sets HF_HUB_OFFLINE=0, was 1",)
    user = launch_change(before, before.replace("User=root", "User=vllm"))
    assert user.launch == ("it runs as vllm, was root (User=)",)
    directory = launch_change(before, before.replace("WorkingDirectory=/var/lib", "WorkingDirectory=/srv/lib"))
    assert directory.restart and directory.launch[0].startswith("WorkingDirectory= is /srv/lib")
    model = launch_change(before, before, model_files=("sha256:aa", "sha256:bb"))
    assert model.launch == ("its model files change (another manifest)",)


def test_a_secret_on_the_command_line_is_never_shown() -> None:
    before = "[Service]\nExecStart=/py -m vllm.entrypoints.openai.api_server --api-key sk-one --hf-token=hf_two\n"
    change = launch_change(before, before.replace("sk-one", "sk-three"))
    assert change.restart and "sk-" not in change.describe() and "hf_two" not in change.describe()
    assert "--api-key (not shown) --hf-token=(not shown)" in change.describe()


def test_an_environment_files_contents_are_the_launch_its_values_never_shown() -> None:
    before = rendered()
    secrets = "/etc/vllm-fleet/vllm-tiny-chat-a.env"
    change = launch_change(before, before, {secrets: "HF_TOKEN=hf_old\n"}, {secrets: "HF_TOKEN=hf_new\n"})
    assert change.launch == ("HF_TOKEN from its environment file changes (not shown)",)
    assert "hf_" not in change.describe()
    same = launch_change(before, before, {secrets: "HF_TOKEN=hf_old\n"}, {secrets: "# rotated\nHF_TOKEN=hf_old\n"})
    assert same.unchanged
    # The placement is the swap's (not given): the same file, unchanged. Another file is another launch.
    other_file = launch_change(before, before.replace(secrets, "/etc/vllm-fleet/other.env"))
    assert other_file.launch == ("its EnvironmentFile= list changes",)


def test_the_launch_may_be_judged_by_its_reading_rather_than_word_for_word() -> None:
    before = rendered()
    after = before.replace("--max-model-len 512", "--max_model_len=512")
    assert launch_change(before, after).restart

    def read_alike(old: UnitLaunch, old_env: Any, new: UnitLaunch, new_env: Any) -> list[str]:
        return [] if old_env == new_env else ["environment"]

    assert not launch_change(before, after, engine_differences=read_alike).restart


@pytest.mark.parametrize("golden", sorted((ROOT / "tests" / "golden").glob("*/vllm-*.service")), ids=lambda p: p.name)
def test_every_rendered_unit_has_one_launch(golden: Any) -> None:
    launch = read_unit(golden.read_text()).launch
    assert launch.exec_start is not None and launch.user and launch.working_directory
    assert launch.environment_files and all(path.startswith("/etc/vllm-fleet/") for path, _ in launch.environment_files)


def test_the_bus_answer_is_read_as_the_unit() -> None:
    properties = {
        "ExecStart": '{"type":"a(sasbttttuii)","data":[["/bin/x",["/bin/x","a b","c"],true,0,0,0,0,0,0,0]]}',
        "Environment": '{"type":"as","data":["F=1","G=two words"]}',
        "EnvironmentFiles": '{"type":"a(sb)","data":[["/etc/x.env",true],["/etc/y.env",false]]}',
        "User": '{"type":"s","data":"nobody"}',
        "WorkingDirectory": '{"type":"s","data":"!~"}',
    }
    assert unit_file.from_bus(properties) == UnitLaunch(
        ("/bin/x", "a b", "c"),
        (("F", "1"), ("G", "two words")),
        (("/etc/x.env", True), ("/etc/y.env", False)),
        "nobody",
        "-~",
    )
