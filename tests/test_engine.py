"""The real engine, not mocks: preview the stacks with the binaries `make setup` built."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pulumi import automation as auto

from tests import engine
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not (engine.TOOLS / "bin" / "pulumi").exists(), reason="run `make setup` first")


def test_engine_versions_match_the_pinned_sdks(tmp_path: Path) -> None:
    env = engine.engine_env(tmp_path / "state")
    version = subprocess.run(["pulumi", "version"], env=env, capture_output=True, text=True, check=True).stdout
    assert version.strip() == "v3.272.0"
    plugins = subprocess.run(["pulumi", "plugin", "ls"], env=env, capture_output=True, text=True, check=True).stdout
    assert any(line.split()[:3] == ["command", "resource", "1.2.1"] for line in plugins.splitlines()), plugins


def test_real_engine_previews_the_dev_stack(tmp_path: Path) -> None:
    work = engine.project_copy(tmp_path / "project", {"Pulumi.dev.yaml": (ROOT / "Pulumi.dev.yaml").read_text()})
    # The program reads the SSH key file while it runs; an offline preview contacts no host.
    (work / ".sandbox" / "ssh").mkdir(parents=True)
    (work / ".sandbox" / "ssh" / "id_ed25519").write_text("placeholder, never used offline\n")
    dev = engine.stack(work, tmp_path / "state", "dev", env={"VLLM_FLEET_OFFLINE": "1"})
    result = dev.preview()
    assert result.change_summary.get(auto.OpType.CREATE) == 15, result.change_summary
    dev.workspace.remove_stack("dev")


def test_real_engine_previews_prod_without_contacting_it(tmp_path: Path) -> None:
    work = engine.project_copy(tmp_path / "project", {"Pulumi.prod.yaml": (ROOT / "Pulumi.prod.yaml").read_text()})
    prod = engine.stack(work, tmp_path / "state", "prod", env={"VLLM_FLEET_OFFLINE": "1"})
    result = prod.preview(diff=True)
    assert "--tensor-parallel-size 8" in result.stdout
    assert "NCCL_P2P_LEVEL=SYS" in result.stdout


def test_broken_stack_file_fails_before_any_resource(tmp_path: Path) -> None:
    text = (ROOT / "Pulumi.prod.yaml").read_text().replace("port: 8000", "port: 80")
    work = engine.project_copy(tmp_path / "project", {"Pulumi.prod.yaml": text})
    prod = engine.stack(work, tmp_path / "state", "prod", env={"VLLM_FLEET_OFFLINE": "1"})
    with pytest.raises(auto.CommandError) as caught:
        prod.preview()
    message = str(caught.value)
    assert "vllm-fleet:deployments[0].port: Input should be greater than or equal to 1024 (got 80)" in message
    assert "Traceback" not in message
