"""What every config model is (models/base.py): frozen data classes whose field rules pydantic applies when it
validates a stack's values, whose rules across fields also hold for a model built in the code, and whose JSON
form is pydantic's own (a deployed launch's rendezvous port and the survey's key are hashed from it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from models.base import plain, validate
from models.config import Deployment, StackConfig
from models.hosts import Host
from models.loader import load_stack_file

ROOT = Path(__file__).resolve().parent.parent
STACK_FILES = ("Pulumi.dev.yaml", "Pulumi.prod.yaml", "Pulumi.fleet.yaml")


@pytest.mark.parametrize("stack_file", STACK_FILES)
def test_the_json_form_is_pydantics(stack_file: str) -> None:
    config = load_stack_file(ROOT / stack_file)
    adapter = TypeAdapter(StackConfig)
    assert plain(config) == adapter.dump_python(config, mode="json")
    # Plain data: an enum member equals its value (StrEnum), but only plain data is what any serializer takes.
    yaml.safe_dump(plain(config))
    assert plain(config, by_alias=True) == adapter.dump_python(config, mode="json", by_alias=True)


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
        validate(Host, {"name": "Bad_Name", "address": "10.0.0.1", "port": 0, "gpus": {"count": 65}})
    assert {(e["loc"], e["type"]) for e in error.value.errors()} == {
        (("name",), "string_pattern_mismatch"),
        (("port",), "greater_than_equal"),
        (("gpus", "count"), "less_than_equal"),
    }
    host = validate(
        Host, {"name": "gpu-01", "address": "10.0.0.1", "stagingPath": "/local/staging", "gpus": {"count": 8}}
    )
    assert (host.port, host.gpus.count, host.staging_path) == (22, 8, "/local/staging")
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.port = 2222  # type: ignore[misc]


def test_a_rule_across_fields_holds_for_a_model_built_in_the_code() -> None:
    deployment = validate(Deployment, {"name": "chat", "host": "gpu-01", "model": "m", "gpus": [1, 0]})
    assert deployment.gpus == (0, 1)  # normalized by its field rule
    with pytest.raises(ValueError, match="two different ports"):
        dataclasses.replace(deployment, backend_ports=(18000, 18000))
