"""What every config model is (models/base.py): a frozen, closed pydantic model, validated from the stack file by
its camelCase keys, whose rules also hold for a model built in the code, and whose JSON form is plain data (a
deployed launch's rendezvous port and the survey's key are hashed from it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from models.config import Deployment, StackConfig
from models.hosts import GpuSpec, Host
from models.loader import load_stack_file

ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = ("Pulumi.dev.yaml", "Pulumi.prod.yaml", "Pulumi.fleet.yaml")


@pytest.mark.parametrize("stack_file", STACK_FILES)
def test_the_json_form_is_plain_data_that_validates_back(stack_file: str) -> None:
    config = load_stack_file(ROOT / stack_file)
    # Plain data: an enum member equals its value (StrEnum), but only plain data is what any serializer takes.
    yaml.safe_dump(config.model_dump(mode="json"))
    by_alias = config.model_dump(mode="json", by_alias=True)
    yaml.safe_dump(by_alias)
    # By its camelCase keys, the form is the stack file's own: it validates back into the same config.
    assert StackConfig.model_validate(by_alias, by_alias=True, by_name=False) == config


def test_a_deployed_launchs_rendezvous_port_is_unchanged() -> None:
    """Hashed from the serving settings' JSON form: a different form would change every multi-node unit (a
    swap on the next `pulumi up`). These are the ports the pydantic-model releases computed."""
    ports = {
        stack_file: [rd.master_port for rd in load_stack_file(ROOT / stack_file).resolved_deployments()]
        for stack_file in STACK_FILES
    }
    assert ports == {
        "Pulumi.dev.yaml": [29542],
        "Pulumi.prod.yaml": [29543],
        "Pulumi.fleet.yaml": [29574, 29501, 29506],
    }


def test_field_rules_apply_when_pydantic_validates() -> None:
    with pytest.raises(ValidationError) as error:
        Host.model_validate(
            {"name": "Bad_Name", "address": "10.0.0.1", "port": 0, "gpus": {"count": 65}}, by_alias=True, by_name=False
        )
    assert {(e["loc"], e["type"]) for e in error.value.errors()} == {
        (("name",), "string_pattern_mismatch"),
        (("port",), "greater_than_equal"),
        (("gpus", "count"), "less_than_equal"),
    }
    host = Host.model_validate(
        {"name": "gpu-01", "address": "10.0.0.1", "stagingPath": "/local/staging", "gpus": {"count": 8}},
        by_alias=True,
        by_name=False,
    )
    assert (host.port, host.gpus.count, host.staging_path) == (22, 8, "/local/staging")
    with pytest.raises(ValidationError, match="frozen"):
        host.port = 2222  # type: ignore[misc]


def test_the_stack_files_keys_alone_are_taken_from_it() -> None:
    """The code builds models by their Python names; a stack file's snake_case key is refused as unknown."""
    assert Host(name="gpu-01", address="10.0.0.1", staging_path="/local/staging", gpus=GpuSpec(count=8)).staging_path
    with pytest.raises(ValidationError) as error:
        Host.model_validate(
            {"name": "gpu-01", "address": "10.0.0.1", "staging_path": "/local/staging", "gpus": {"count": 8}},
            by_alias=True,
            by_name=False,
        )
    assert [(e["loc"], e["type"]) for e in error.value.errors()] == [(("staging_path",), "extra_forbidden")]


def test_a_rule_across_fields_holds_for_a_model_built_in_the_code() -> None:
    deployment = Deployment.model_validate({"name": "chat", "host": "gpu-01", "model": "m", "gpus": [1, 0]})
    assert deployment.gpus == (0, 1)  # normalized by its field rule
    with pytest.raises(ValidationError, match="two different ports"):
        Deployment(**{**dict(deployment), "backend_ports": (18000, 18000)})


def test_a_copy_of_the_stack_config_forgets_its_indexes() -> None:
    """StackConfig caches its lookups per instance; a copy with other storage must not answer from the old."""
    config = load_stack_file(ROOT / "Pulumi.fleet.yaml")
    host = config.hosts[0].name
    assert config.storage_for_host(host).host == host
    moved = config.model_copy(update={"storage": tuple(s for s in config.storage if s.host != host)})
    with pytest.raises(KeyError):
        moved.storage_for_host(host)
