"""Rendered units and scripts: golden files, `systemd-analyze verify` and `shellcheck` on every one."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import lzma
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from host.contract import BUNDLE_NAME
from host.unit_file import read_unit
from models.config import StackConfig
from models.loader import load_stack_file, parse_stack_config
from render import access as render_access
from render import host_bundle, steps
from render.launch import args_check_spec, engine_environment, vllm_arguments
from render.paths import FRONT_DOOR_UNIT, TEMPLATES, TOOLS_DIR, UNIT_DIR
from render.scripts import MAX_SCRIPT_BYTES, Script, remote_invocation, step_script
from render.units import render_bridge_unit, render_node_unit, render_unit, systemd_quote
from sandbox.processes import run_captured
from tests.support.host_package import ARCHIVE_URN, install_host_package
from tests.support.paths import ROOT
from tests.support.reference import as_surveyed

GOLDEN = Path(__file__).with_name("golden")
STACKS = ("dev", "prod", "fleet")


def stack(name: str) -> StackConfig:
    config = load_stack_file(ROOT / f"Pulumi.{name}.yaml")
    # Prod pins no vLLM version: it is rendered for the release its server reports, as a preview there does.
    return as_surveyed(config) if name == "prod" else config


def rendered_scripts(name: str) -> dict[str, str]:
    """Every script a stack runs on its hosts, by a stable file name."""
    config = stack(name)
    scripts = {
        "tools.sh": steps.tools_script(ARCHIVE_URN),
        "tools-delete.sh": steps.tools_delete_script(),
        "frontdoor.sh": steps.front_door_script(),
        "frontdoor-delete.sh": steps.front_door_delete_script(),
    }
    for host in config.hosts:
        scripts[f"preflight-{host.name}.sh"] = steps.preflight_script(host, name)
    for store in config.storage:
        scripts[f"storage-{store.name}.sh"] = steps.storage_script(store, config.kept_dirs_on(store.name), name)
        scripts[f"storage-delete-{store.name}.sh"] = steps.storage_delete_script(store, name)
        host = next(h for h in config.hosts if h.name == store.host)
        for model in config.wanted_models_on(store.name):
            spec = config.models[model]
            scripts[f"download-{model}.sh"] = steps.download_script(model, spec, store, host, config.hf_endpoint, "dev")
            scripts[f"download-delete-{model}.sh"] = steps.download_delete_script(model, spec, store, host, name)
    for rd in config.resolved_deployments():
        scripts[f"stage-{rd.deployment.name}.sh"] = steps.stage_script(rd, name)
        scripts[f"stage-delete-{rd.deployment.name}.sh"] = steps.stage_delete_script(rd, name)
        scripts[f"activate-{rd.deployment.name}.sh"] = steps.activate_script(rd, name)
        scripts[f"deactivate-{rd.deployment.name}.sh"] = steps.deactivate_script(rd, name)
        for rank in range(1, len(rd.node_hosts)):
            node = f"{rd.deployment.name}-node{rank}"
            scripts[f"stage-{node}.sh"] = steps.node_stage_script(rd, name, rank)
            scripts[f"stage-delete-{node}.sh"] = steps.node_stage_delete_script(rd, name, rank)
            scripts[f"activate-{node}.sh"] = steps.node_activate_script(rd, name, rank)
            scripts[f"deactivate-{node}.sh"] = steps.node_deactivate_script(rd, name, rank)
        # The certificate is a file of the machine that runs the program (the sandbox makes its own).
        certificate = GOLDEN_CERTIFICATE if rd.access.tls is not None else None
        scripts[f"access-{rd.deployment.name}.sh"] = render_access.access_script(rd, name, certificate)
        scripts[f"access-delete-{rd.deployment.name}.sh"] = render_access.access_delete_script(rd, name)
    return scripts


GOLDEN_CERTIFICATE = "-----BEGIN CERTIFICATE-----\n(the stack's certificate chain)\n-----END CERTIFICATE-----\n"


def rendered_units(name: str) -> dict[str, str]:
    """Each deployment's unit by the name of its golden file, and the front door's (the same for every
    stack). The name is the unit's; deployments on different hosts that share a unit name (the fleet's
    chat-1 and chat-2) each get `<deployment>.<unit>`, so neither hides the other."""
    resolved = stack(name).resolved_deployments()
    shared = {rd.unit_name for rd in resolved if [o.unit_name for o in resolved].count(rd.unit_name) > 1}
    units: dict[str, str] = {}
    for rd in resolved:
        units[f"{rd.deployment.name}.{rd.unit_name}" if rd.unit_name in shared else rd.unit_name] = render_unit(
            rd, name
        ).text
        for rank in range(1, len(rd.node_hosts)):
            units[rd.worker_unit_name(rank)] = render_node_unit(rd, name, rank).text
    front_door = steps.front_door_files()[f"{UNIT_DIR}/{FRONT_DOOR_UNIT}"]
    return {**units, FRONT_DOOR_UNIT: front_door}


def check_golden(path: Path, text: str) -> None:
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run `UPDATE_GOLDEN=1 make test` and review the diff"
    assert text == path.read_text(), f"{path.name} changed: review it, then UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("name", STACKS)
def test_units_match_golden(name: str) -> None:
    units = rendered_units(name)
    for unit, text in units.items():
        check_golden((GOLDEN if unit == FRONT_DOOR_UNIT else GOLDEN / name) / unit, text)
    stale = {p.name for p in (GOLDEN / name).glob("*.service")} - set(units)
    assert not stale, f"golden files no longer rendered: {stale}"


# The host tools do not depend on the stack: one golden file serves every stack.
STACK_INDEPENDENT = (
    "tools.sh",
    "tools-delete.sh",
    "frontdoor.sh",
    "frontdoor-delete.sh",
)


def _digest(text: str) -> str:
    data, lines = text.encode(), text.count("\n")
    return f"{lines} lines, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def _shared_bodies() -> list[tuple[str, str]]:
    """Each script body of render/templates and of the host package's steps (host/steps) as it stands in a
    rendered script, with the line that stands for it in a golden file: after its `#!` line (the parameters
    go there). Longest first."""
    parts: dict[str, str] = {}
    for path in sorted([*TEMPLATES.glob("*.sh"), *(ROOT / "host" / "steps").glob("*.sh")]):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        part = text.split("\n", 1)[1]
        parts.setdefault(part, f"# <the body of {where} after line 1: {_digest(part)}>\n")
    return sorted(parts.items(), key=lambda item: -len(item[0]))


def pinned_text(script: str, units: dict[str, str]) -> str:
    """What a golden file pins of a script: what a user reads (its parameter header, the files it writes
    by name), and a digest of each part that is a file of the repository. A script body becomes one line
    naming it with its digest; a staged unit that has a golden file of its own becomes its name and digest."""
    # The host package's version is its archive's digest: it moves with every edit of host/.
    script = script.replace(host_bundle.version(), "<host package version>")
    script = script.replace(
        f"readonly UNPACK={shlex.quote(host_bundle.UNPACK)}\n",
        f"readonly UNPACK=<render/host_bundle.py's UNPACK: {_digest(host_bundle.UNPACK)}>\n",
    )
    for body, line in _shared_bodies():
        if body in script:
            assert script.count(body) == 1, f"{line.strip()} stands twice in one script"
            script = script.replace(body, line)
    for name, text in units.items():
        script = script.replace(
            f"readonly UNIT_TEXT={shlex.quote(text)}\n",
            f"readonly UNIT_TEXT=<the unit of golden file {name}: {_digest(text)}>\n",
        )
    return script


@pytest.mark.parametrize("name", STACKS)
def test_scripts_match_golden(name: str) -> None:
    scripts = rendered_scripts(name)
    units = rendered_units(name)
    for file_name, text in scripts.items():
        folder = GOLDEN if file_name in STACK_INDEPENDENT else GOLDEN / name
        check_golden(folder / file_name, pinned_text(text, units))
    stale = {p.name for p in (GOLDEN / name).glob("*.sh")} - set(scripts)
    assert not stale, f"golden files no longer rendered: {stale}"


def test_prod_unit_carries_the_reference_launch() -> None:
    (unit,) = [text for name, text in rendered_units("prod").items() if name != FRONT_DOOR_UNIT]
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    for flag in (
        "--model /shared/kimi-k2.5-int4",
        "--tensor-parallel-size 8",
        "--tool-call-parser kimi_k2",
        "--reasoning-parser kimi_k2",
        "--trust-remote-code",
        "--max-model-len 131072",
        "--gpu-memory-utilization 0.95",
        "--disable-log-requests",
        "--enable-auto-tool-choice",
    ):
        assert f" {flag}" in exec_start, flag
    # Behind the front door (nginx on the reference's port 8000) the engine listens on loopback, on the
    # port its placement names; systemd expands the variable from the placement file.
    assert " --host 127.0.0.1 --port ${VLLM_FLEET_BACKEND_PORT} " in exec_start
    assert "\nEnvironmentFile=/etc/vllm-fleet/vllm-kimi-k25-int4.placement.env\n" in unit
    # Kimi's preset asks for prefetch; the server's vLLM 0.11 predates it, so the pre-warm stands in.
    assert "--safetensors-load-strategy" not in exec_start
    assert "--attention-backend" not in exec_start
    assert exec_start.startswith("ExecStart=/root/ml-env/bin/python3 -m vllm.entrypoints.openai.api_server ")
    for variable in (
        "NCCL_PROTO=LL",
        "NCCL_ALGO=Ring",
        "NCCL_P2P_LEVEL=SYS",
        "NCCL_MAX_NCHANNELS=16",
        "NCCL_BUFFSIZE=16777216",
        "NCCL_NTHREADS=512",
        "CUDA_DEVICE_MAX_CONNECTIONS=1",
        "HF_HOME=/shared/huggingface",
        "TRANSFORMERS_CACHE=/shared/huggingface/hub",
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",
    ):
        assert f"\nEnvironment={variable}\n" in unit, variable
    # As the launch that serves today: no attention backend (Pulumi.prod.yaml says why).
    assert "VLLM_ATTENTION_BACKEND" not in unit
    assert "KillMode=control-group" in unit and "WantedBy=multi-user.target" in unit
    timeout = int(next(line for line in unit.splitlines() if line.startswith("TimeoutStartSec=")).split("=")[1])
    assert timeout > 36 * 60


def test_systemd_quoting() -> None:
    assert systemd_quote("--max-model-len") == "--max-model-len"
    assert systemd_quote('{"level": 3}') == '"{\\"level\\": 3}"'
    assert systemd_quote("50%") == '"50%%"'


def _verify_root(tmp_path: Path, units: dict[str, str]) -> Path:
    """A root with the host's unit search path and stand-ins for the binaries the units name."""
    root = tmp_path / "root"
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree("/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for name, text in units.items():
        (unit_dir / name).write_text(text)
        for line in text.splitlines():
            if line.startswith(("ExecStart", "ExecStop", "ExecReload")):
                binary = root / line.split("=", 1)[1].split()[0].lstrip("/")
                binary.parent.mkdir(parents=True, exist_ok=True)
                binary.write_text("#!/bin/sh\n")
                binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return root


@pytest.mark.parametrize("name", STACKS)
def test_units_pass_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    units = rendered_units(name)
    root = _verify_root(tmp_path, units)
    for unit in units:
        result = run_captured(["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{unit}"])
        assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.parametrize("name", STACKS)
def test_a_bridge_unit_runs_the_same_launch_under_its_own_name(name: str, tmp_path: Path) -> None:
    """The unit that serves a restart's new launch on the spare GPUs (host/bridge.py): what systemd starts
    is the deployment unit's launch; only its name, its placement and its environment file are its own."""
    for rd in stack(name).resolved_deployments():
        unit, bridge = render_unit(rd, name), render_bridge_unit(rd, name)
        assert bridge.name == f"{rd.unit_stem}-bridge.service" and bridge.text.startswith(unit.text.split("\n")[0])
        own = read_unit(unit.text).launch
        assert read_unit(bridge.text).launch == dataclasses.replace(
            own,
            environment_files=tuple(
                (path.replace(rd.unit_stem, f"{rd.unit_stem}-bridge"), o) for path, o in own.environment_files
            ),
        )
        assert f"--unit {bridge.name}" in bridge.text and f"--unit {unit.name}" not in bridge.text
        root = _verify_root(tmp_path / rd.deployment.name, {bridge.name: bridge.text})
        result = run_captured(["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{bridge.name}"])
        assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    ((unit_name, text),) = [(n, t) for n, t in rendered_units("prod").items() if n != FRONT_DOOR_UNIT]
    broken = text.replace("KillMode=control-group", "KillMode=everything")
    root = _verify_root(tmp_path, {unit_name: broken})
    result = run_captured(["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{unit_name}"])
    assert "Failed to parse kill mode" in result.stderr


@pytest.mark.parametrize("name", STACKS)
def test_scripts_pass_shellcheck(name: str, tmp_path: Path) -> None:
    paths = []
    for file_name, text in rendered_scripts(name).items():
        path = tmp_path / file_name
        path.write_text(text)
        paths.append(str(path))
    result = run_captured(["shellcheck", "--severity=style", *paths])
    assert result.returncode == 0, result.stdout


def test_shellcheck_catches_an_unquoted_parameter(tmp_path: Path) -> None:
    path = tmp_path / "bad.sh"
    path.write_text("#!/usr/bin/env bash\nset -euo pipefail\nrm -rf $1/models\n")
    result = run_captured(["shellcheck", str(path)])
    assert result.returncode != 0 and "SC2086" in result.stdout


def test_parameters_are_shell_quoted() -> None:
    script = step_script("storage", {"STORAGE_PATH": "/x'; reboot; '", "HF_HOME_DIR": "/x", "OWNER": "root"})
    header = script.split("\n")[2]
    assert header == "readonly STORAGE_PATH='/x'\"'\"'; reboot; '\"'\"''"
    # The step's command quotes each parameter for the remote shell, which hands it to the step tool whole.
    command = remote_invocation(script, "layout", 300, 30).replace(f"{TOOLS_DIR}/step", "printf '%s\\n'", 1)
    words = run_captured(["sh", "-c", command], timeout=10).stdout.splitlines()
    assert words[:6] == ["storage", "--time-limit", "300", "--kill-after", "30", "STORAGE_PATH=/x'; reboot; '"]


@pytest.mark.parametrize("name", STACKS)
def test_a_steps_command_is_one_call_of_the_step_tool_with_its_parameters(name: str) -> None:
    """What pulumi-command echoes back whole when a step fails: the step tool, the step's name and its
    parameters, one to a line (the body, which the host package ships, is not in it)."""
    for file_name, script in rendered_scripts(name).items():
        command = remote_invocation(script, file_name, 600, 30)
        if file_name in ("tools.sh", "tools-delete.sh") or file_name.startswith("preflight-"):
            assert command.startswith("timeout --kill-after=30 600 bash -c "), file_name  # before the tools exist
            continue
        assert isinstance(script, Script) and script.step is not None, file_name
        head = f"{TOOLS_DIR}/step {script.step} --time-limit 600 --kill-after 30 \\\n"
        assert command.startswith(head), command[:200]
        assert "set -euo pipefail" not in command and "readonly " not in command, file_name


def test_remote_invocation_passes_stdin_and_stops_at_its_time_limit(tmp_path: Path) -> None:
    """The string a remote Command runs, executed by a local shell as sshd would run it."""
    marker = tmp_path / "after-sleep"
    script = f'#!/usr/bin/env bash\nread -r secret\necho "got ${{#secret}} chars"\nsleep 30\ntouch {marker}\n'
    invocation = remote_invocation(script, "slow-step", 1, 2)
    started = time.monotonic()
    result = run_captured(["sh", "-c", invocation], input="s3cret\n", timeout=20)
    elapsed = time.monotonic() - started
    assert result.returncode == 124, result
    assert result.stdout == "got 6 chars\n"
    assert "vllm-fleet-slow-step: stopped by its time limit of 1 s" in result.stderr
    assert elapsed < 5 and not marker.exists()


def test_remote_invocation_keeps_the_script_exit_status() -> None:
    invocation = remote_invocation("#!/usr/bin/env bash\nexit 3\n", "failing", 10, 2)
    result = run_captured(["sh", "-c", invocation], timeout=20)
    assert result.returncode == 3 and "time limit" not in result.stderr


def test_attention_backend_is_a_flag_from_vllm_0_12_and_the_variable_before(prod_raw: dict[str, Any]) -> None:
    # The preset's backend, which Pulumi.prod.yaml leaves unset to match the launch that serves today.
    del prod_raw["models"]["kimi-k2.5-int4"]["serving"]
    prod_raw["hosts"][0]["runtime"]["vllmVersion"] = "0.12.0"
    prod_raw["deployments"][0]["overrides"]["extraArgs"] = []
    (rd,) = parse_stack_config(prod_raw).resolved_deployments()
    args = vllm_arguments(rd)
    assert args[args.index("--attention-backend") + 1] == "TRITON_MLA"
    assert "VLLM_ATTENTION_BACKEND" not in engine_environment(rd)
    prod_raw["hosts"][0]["runtime"]["vllmVersion"] = "0.11.0"
    (rd,) = parse_stack_config(prod_raw).resolved_deployments()
    assert "--attention-backend" not in vllm_arguments(rd)
    assert engine_environment(rd)["VLLM_ATTENTION_BACKEND"] == "TRITON_MLA"


def test_args_check_spec_names_each_flags_config_key() -> None:
    (rd,) = load_stack_file(ROOT / "Pulumi.prod.yaml").resolved_deployments()
    spec = json.loads(args_check_spec(rd))
    assert spec["unit"] == "vllm-kimi-k25-int4.service"
    assert spec["args"][:2] == ["--model", "/shared/kimi-k2.5-int4"]
    assert spec["origins"]["--disable-log-requests"] == "vllm-fleet:deployments[primary].overrides.extraArgs"
    assert spec["origins"]["--port"] == "vllm-fleet:deployments[primary].port"
    assert spec["origins"]["--tensor-parallel-size"].endswith("vllm-fleet:models.kimi-k2.5-int4.serving.tensorParallel")


def test_the_host_package_installs_and_every_tool_runs_from_it(tmp_path: Path) -> None:
    """The tools step, run for real with its paths pointed at a temp dir after the archive was put where
    the copy step puts it: the archive holds every module of host/, and each launcher runs its tool from
    it (argparse's --help)."""
    tools_dir = tmp_path / "tools"
    tools_dir.mkdir()
    install_host_package(tools_dir)
    modules = sorted(
        p.relative_to(ROOT).as_posix() for p in [*(ROOT / "host").glob("*.py"), *(ROOT / "host").glob("tools/*.py")]
    )
    bodies = sorted(f"host/steps/{p.name}" for p in (ROOT / "host" / "steps").glob("*.sh"))
    with zipfile.ZipFile(tools_dir / BUNDLE_NAME) as bundle:
        # Each module with its bytecode, compiled by the python3 that installed it; the steps' scripts as they are.
        assert sorted(bundle.namelist()) == sorted([*modules, *(f"{m}c" for m in modules), *bodies])
    assert sorted(p.name for p in tools_dir.iterdir() if p.name not in (BUNDLE_NAME, ".incoming")) == sorted(
        host_bundle.TOOLS
    )
    assert [p.name for p in (tools_dir / ".incoming").iterdir()] == [f"{host_bundle.version()}.pyz"]
    assert (tools_dir / "swap").read_text() == (
        "#!/usr/bin/env python3\n"
        f"# vllm-fleet swap: runs host.tools.swap from the host package {BUNDLE_NAME} beside this file.\n"
        "import os, runpy, sys\n"
        f'sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "{BUNDLE_NAME}"))\n'
        'runpy.run_module("host.tools.swap", run_name="__main__", alter_sys=True)\n'
    )
    assert (tools_dir / "swap").stat().st_mode & 0o777 == 0o755
    for tool in ("swap", "prewarm", "model-sync", "gpu-release-guard", "node-watch", "clean-shm", "step"):
        # Outside the repository, so nothing but the archive can provide the `host` package.
        result = run_captured([sys.executable, str(tools_dir / tool), "--help"], cwd=tmp_path)
        assert result.returncode == 0 and "usage" in result.stdout.lower(), (tool, result.stderr[-500:])


def test_the_tools_step_refuses_a_missing_or_different_archive_and_removes_month_old_ones(tmp_path: Path) -> None:
    """The copy writes in place and never deletes: the install checks the file against its version and
    names the step that copies it again; the archives of other versions go once a month old."""
    tools_dir = tmp_path / "tools"
    tools_dir.mkdir()
    script = steps.tools_script(ARCHIVE_URN).replace(TOOLS_DIR, str(tools_dir))
    missing = run_captured(["bash", "-c", script], cwd=tmp_path)
    assert missing.returncode == 1 and "is missing" in missing.stderr
    assert f"run `pulumi up --replace '{ARCHIVE_URN}'` where the stack is deployed from" in missing.stderr
    incoming = tools_dir / ".incoming" / f"{host_bundle.version()}.pyz"
    incoming.parent.mkdir()
    incoming.write_bytes(host_bundle.archive()[:-100])  # a copy that stopped short
    short = run_captured(["bash", "-c", script], cwd=tmp_path)
    assert short.returncode == 1 and "did not finish" in short.stderr and "tools-archive" in short.stderr
    assert not (tools_dir / BUNDLE_NAME).exists()
    earlier = incoming.parent / "0123456789abcdef.pyz"
    earlier.write_bytes(b"an earlier version, copied 31 days ago")
    month_ago = time.time() - 31 * 86400
    os.utime(earlier, (month_ago, month_ago))
    recent = incoming.parent / "fedcba9876543210.pyz"  # another stack's, at another version, this week
    recent.write_bytes(b"another version, copied 6 days ago")
    week_ago = time.time() - 6 * 86400
    os.utime(recent, (week_ago, week_ago))
    install_host_package(tools_dir)
    assert sorted(p.name for p in incoming.parent.iterdir()) == sorted([incoming.name, recent.name])
    assert (tools_dir / BUNDLE_NAME).is_file()


def test_the_copied_archive_is_a_file_named_by_its_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the copy step sends: the archive itself, written once per version below the cache, named by
    a path relative to the project (the same asset in every checkout), rewritten when damaged; the files
    of earlier versions go."""
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / ".cache" / "host-bundle"
    stale = cache / "vllm-fleet-host-0123456789abcdef.pyz"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"earlier")
    path = host_bundle.archive_file.__wrapped__(cache)
    assert path == f".cache/host-bundle/vllm-fleet-host-{host_bundle.version()}.pyz"
    assert (tmp_path / path).read_bytes() == host_bundle.archive()
    assert hashlib.sha256((tmp_path / path).read_bytes()).hexdigest().startswith(host_bundle.version())
    assert not stale.exists()
    written = (tmp_path / path).stat().st_mtime_ns
    assert host_bundle.archive_file.__wrapped__(cache) == path
    assert (tmp_path / path).stat().st_mtime_ns == written  # the same version is not written again
    (tmp_path / path).write_bytes(b"damaged")
    host_bundle.archive_file.__wrapped__(cache)
    assert (tmp_path / path).read_bytes() == host_bundle.archive()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert host_bundle.archive_file.__wrapped__(cache) == str(tmp_path / path)


def test_the_installed_host_package_carries_bytecode_its_python3_loads(tmp_path: Path) -> None:
    """The bytecode the install adds is what that python3 imports: an archive of the bytecode alone (the
    sources taken out) still runs a tool's imports, and its code names the installed archive's path."""
    python3 = shutil.which("python3")
    assert python3 is not None
    tools_dir = tmp_path / "tools"
    tools_dir.mkdir()
    install_host_package(tools_dir)
    installed = tools_dir / BUNDLE_NAME
    compiled_only = tmp_path / "compiled-only.pyz"
    with zipfile.ZipFile(installed) as bundle, zipfile.ZipFile(compiled_only, "w") as stripped:
        for info in bundle.infolist():
            if info.filename.endswith(".pyc"):
                stripped.writestr(info, bundle.read(info))
    assert list(tools_dir.glob(".*tmp")) == []  # the install leaves no temporary file
    result = run_captured(
        [
            python3,
            "-c",
            f"import sys; sys.path.insert(0, {str(compiled_only)!r}); import host.tools.swap, host.contract; "
            "print(host.contract.adapters_json.__code__.co_filename)",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-800:]
    assert result.stdout.strip() == f"{installed}/host/contract.py"


def test_the_host_package_is_built_reproducibly_and_bootstraps_without_installing(tmp_path: Path) -> None:
    assert host_bundle.archive() == host_bundle.archive.__wrapped__()
    # What the survey sends over SSH: the archive inside a bootstrap on stdin, run in a bare directory.
    result = run_captured(
        [sys.executable, "-", "--help"], input=host_bundle.bootstrap_source("host.tools.swap"), cwd=tmp_path
    )
    assert result.returncode == 0 and "usage" in result.stdout.lower(), result.stderr[-500:]
    assert list(Path(tempfile.gettempdir()).glob("vllm-fleet-host-*.pyz")) == []  # removed after the run


def test_the_compressed_host_package_is_cached_by_its_archive(tmp_path: Path) -> None:
    """A no-op run reads the package's compression from .cache instead of compressing it again; a damaged
    copy is compressed afresh, and a copy of an earlier host/ is removed."""
    fresh = host_bundle.transported.__wrapped__(None)
    assert lzma.decompress(base64.b64decode(fresh)) == host_bundle.archive()
    stale = tmp_path / "0123.xz.b64"
    stale.write_text(fresh)
    assert host_bundle.transported.__wrapped__(tmp_path) == fresh
    (cached,) = tmp_path.glob("*.xz.b64")
    assert cached != stale
    written = cached.read_text()
    assert written.endswith(f"\n{fresh}")
    cached.write_text(written.replace(fresh, fresh[:-8] + "AAAAAAA="))
    assert host_bundle.transported.__wrapped__(tmp_path) == fresh  # the damaged text fails its digest
    assert cached.read_text() == written
    assert written.partition("\n")[0] == hashlib.sha256(fresh.encode()).hexdigest()


def test_every_step_fits_one_shell_argument() -> None:
    """sshd hands the command to the remote shell as one `-c` argument, which Linux caps at 128 KiB."""
    for name in STACKS:
        for file_name, text in rendered_scripts(name).items():
            invocation = remote_invocation(text, file_name, 60, 30)
            assert len(invocation.encode()) < 128 * 1024, file_name
    with pytest.raises(ValueError, match="split the step"):
        remote_invocation("#!/usr/bin/env bash\n" + "x" * MAX_SCRIPT_BYTES, "huge", 60, 30)


def test_preflight_refuses_a_host_whose_sshd_offers_no_sftp(tmp_path: Path) -> None:
    """The host package goes by SFTP: a host whose sshd has no SFTP subsystem is refused by the preflight,
    before anything is copied, with the line to add; one that has it gets past that check."""
    host = stack("dev").hosts[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_sshd = bin_dir / "sshd"  # stands in for `sshd -T`, the effective configuration
    python = tmp_path / "python"  # the vLLM runtime: no vllm package, the next check's refusal
    python.write_text("#!/bin/sh\necho\n")
    python.chmod(0o755)
    script = steps.preflight_script(host, "dev").replace(host.runtime.python, str(python))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    fake_sshd.write_text("#!/bin/sh\nprintf 'port 22\\npermitrootlogin without-password\\n'\n")
    fake_sshd.chmod(0o755)
    refused = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 1
    assert (
        "offers no SFTP subsystem" in refused.stderr and "Subsystem sftp /usr/lib/openssh/sftp-server" in refused.stderr
    )
    fake_sshd.write_text("#!/bin/sh\nprintf 'port 22\\nsubsystem sftp /usr/lib/openssh/sftp-server\\n'\n")
    passed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False)
    assert passed.returncode == 1 and "has no vllm package" in passed.stderr, passed.stderr
