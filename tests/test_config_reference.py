"""docs/config-reference.md is what scripts/config_reference.py makes of the config models: a field added,
renamed or re-bounded without the page rewritten (`make config-reference`) fails here."""

from __future__ import annotations

import pytest

from models.loader import CONTROLLER_KEYS, KNOWN_KEYS, SECRET_KEYS
from scripts import config_reference
from tests.support.paths import ROOT

PAGE = ROOT / "docs" / "config-reference.md"


def test_the_committed_page_is_what_the_models_generate() -> None:
    assert PAGE.read_text() == config_reference.render(), (
        "docs/config-reference.md is out of date with models/: run `make config-reference` and commit it"
    )


def test_every_key_the_loader_reads_is_on_the_page() -> None:
    page = PAGE.read_text()
    for key in (*KNOWN_KEYS, *SECRET_KEYS, *CONTROLLER_KEYS):
        assert f"`vllm-fleet:{key}" in page, key


def test_a_field_added_to_a_model_changes_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the comparison above rests on: a new field (its key, type, default and bounds) shows on the page."""
    before = config_reference.render()
    # The schema pydantic gives on Rollout for
    # `pause_seconds: Annotated[int, Field(ge=0, le=600, description="seconds a rollout waits between two hosts")] = 0`.
    schema = config_reference.stack_schema()
    schema["$defs"]["Rollout"]["properties"]["pauseSeconds"] = {
        "type": "integer",
        "minimum": 0,
        "maximum": 600,
        "default": 0,
        "description": "seconds a rollout waits between two hosts",
    }
    monkeypatch.setattr(config_reference, "stack_schema", lambda: schema)
    after = config_reference.render()
    assert after != before
    assert (
        "| `vllm-fleet:deployments[].rollout.pauseSeconds` | int | `0` | ≥ 0; ≤ 600 | seconds a rollout waits "
        "between two hosts |"
    ) in after


def test_a_field_without_a_description_stops_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field with no `Field(description=...)` in its model (a comment above it does not count): no page."""
    schema = config_reference.stack_schema()
    schema["$defs"]["Rollout"]["properties"]["pauseSeconds"] = {"type": "integer", "default": 0}
    monkeypatch.setattr(config_reference, "stack_schema", lambda: schema)
    with pytest.raises(SystemExit, match=r"vllm-fleet:deployments\[\]\.rollout\.pauseSeconds"):
        config_reference.render()
