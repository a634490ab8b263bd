"""Which backend a stack is on and the production guard (models/backend.py), and scripts/env.sh's choice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pulumi import automation as auto

from models import backend
from models.config import StackTier
from sandbox import engine
from sandbox.processes import run_captured
from tests.support.paths import ROOT

PG = "postgres://vllm_fleet_state@db.internal:5432/vllm_fleet_state?sslmode=verify-full"


def test_the_environment_wins_over_the_login_file(tmp_path: Path) -> None:
    (tmp_path / "credentials.json").write_text(json.dumps({"current": "file:///somewhere"}))
    env = {"PULUMI_HOME": str(tmp_path), "PULUMI_BACKEND_URL": PG}
    assert backend.current_backend_url(env) == PG
    assert backend.current_backend_url({"PULUMI_HOME": str(tmp_path)}) == "file:///somewhere"
    assert backend.current_backend_url({"PULUMI_HOME": str(tmp_path / "none")}) == backend.DEFAULT_BACKEND_URL
    (tmp_path / "credentials.json").write_text("not json")
    assert backend.current_backend_url({"PULUMI_HOME": str(tmp_path)}) == backend.DEFAULT_BACKEND_URL
    (tmp_path / "home" / ".pulumi").mkdir(parents=True)
    (tmp_path / "home" / ".pulumi" / "credentials.json").write_text(json.dumps({"current": PG}))
    assert backend.current_backend_url({"HOME": str(tmp_path / "home")}) == PG


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgres://user:s3cret@db:5432/state?sslmode=require", "postgres://user:****@db:5432/state?sslmode=require"),
        (
            "postgres://user@db/state?password=s3cret&sslmode=disable",
            "postgres://user@db/state?password=****&sslmode=disable",
        ),
        ("postgres://db/state?sslrootcert=/etc/ca.crt", "postgres://db/state?sslrootcert=/etc/ca.crt"),
        ("file:///work/main/.state", "file:///work/main/.state"),
        ("postgres://", "postgres://"),
    ],
)
def test_redact_hides_only_the_password(url: str, shown: str) -> None:
    assert backend.redact(url) == shown
    assert "s3cret" not in backend.redact(url)


def test_production_on_a_local_backend_is_refused_with_the_way_out() -> None:
    env = {"PULUMI_BACKEND_URL": "file:///home/op/vllm-fleet/.state"}
    message = backend.refusal(StackTier.PRODUCTION, env)
    assert message is not None
    assert "local file backend file:///home/op/vllm-fleet/.state" in message
    assert "export PULUMI_BACKEND_URL=postgres://" in message and "pulumi stack import" in message
    assert f"{backend.SINGLE_OPERATOR_ENV}=1" in message
    assert backend.refusal(StackTier.PRODUCTION, {**env, backend.SINGLE_OPERATOR_ENV: "1"}) is None
    assert backend.refusal(StackTier.PRODUCTION, {**env, backend.SINGLE_OPERATOR_ENV: "yes"}) is not None
    assert backend.refusal(StackTier.DEVELOPMENT, env) is None
    assert backend.refusal(StackTier.PRODUCTION, {"PULUMI_BACKEND_URL": PG}) is None
    assert backend.refusal(StackTier.PRODUCTION, {"PULUMI_BACKEND_URL": "s3://bucket/state"}) is None


def sourced_backend(root: Path, env: dict[str, str]) -> str:
    """PULUMI_BACKEND_URL after `source scripts/env.sh` of a checkout at `root`, in a shell with `env`."""
    return run_captured(
        ["bash", "-c", 'source scripts/env.sh && printf %s "$PULUMI_BACKEND_URL"'],
        cwd=root,
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent", **env},
        check=True,
    ).stdout


def test_env_sh_keeps_the_operators_backend(tmp_path: Path) -> None:
    # A checkout of its own, so the `pulumi login` below touches no real PULUMI_HOME.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "env.sh").write_text((ROOT / "scripts" / "env.sh").read_text())
    assert sourced_backend(tmp_path, {}) == f"file://{tmp_path}/.state"
    assert sourced_backend(tmp_path, {"PULUMI_BACKEND_URL": PG}) == PG
    # A backend chosen with `pulumi login` (stored under the PULUMI_HOME env.sh sets) is kept too.
    home = tmp_path / ".tools" / "pulumi-home"
    home.mkdir(parents=True)
    (home / "credentials.json").write_text(json.dumps({"current": PG, "accounts": {PG: {}}}, indent=4))
    assert sourced_backend(tmp_path, {}) == ""
    (home / "credentials.json").write_text(json.dumps({"accounts": {}}, indent=4))
    assert sourced_backend(tmp_path, {}) == f"file://{tmp_path}/.state"


def test_dev_stack_scripts_stay_on_the_local_backend() -> None:
    """`make up`, `make down` and `make setup` act on the dev stack: on the local backend, whatever the
    operator chose for shared stacks."""
    for script in ("setup.sh", "up.sh", "down.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert 'export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"' in text, script


@pytest.mark.usefixtures("pulumi_engine")
def test_real_engine_refuses_production_on_a_local_backend(tmp_path: Path) -> None:
    work = engine.project_copy(tmp_path / "project", {"Pulumi.prod.yaml": (ROOT / "Pulumi.prod.yaml").read_text()})
    env = {"VLLM_FLEET_OFFLINE": "1", "PULUMI_CONFIG_PASSPHRASE": "an-operators-own-passphrase"}
    prod = engine.stack(work, tmp_path / "state", "prod", env=env)
    with pytest.raises(auto.CommandError) as caught:
        prod.preview()
    message = " ".join(str(caught.value).split())
    assert f"this stack's state is on the local file backend file://{tmp_path / 'state'}" in message
    assert "Choose a shared backend: export PULUMI_BACKEND_URL=postgres://" in message
    assert f"{backend.SINGLE_OPERATOR_ENV}=1" in message
    assert "Traceback" not in message


@pytest.mark.usefixtures("pulumi_engine")
def test_make_preview_prod_renders_from_a_fresh_checkout(tmp_path: Path) -> None:
    """`make preview-prod` opts out for its throwaway backend; it needs nothing of the caller's shell."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    result = run_captured([str(ROOT / "scripts" / "preview-prod.sh")], env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--tensor-parallel-size" in result.stdout
    assert "local file backend" not in result.stdout + result.stderr
