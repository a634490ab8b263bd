"""Issue: hostile and broken config. Every stack file in tests/corpus/invalid is rejected by the real
`pulumi preview` with a message naming its key, before any resource is registered (so before any
command could run on a host)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulumi import automation as auto

from sandbox import engine

CORPUS = sorted((Path(__file__).parent / "corpus" / "invalid").glob("*.yaml"))
pytestmark = pytest.mark.usefixtures("pulumi_engine")


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return engine.project_copy(tmp_path_factory.mktemp("hostile") / "project")


@pytest.mark.parametrize("case", CORPUS, ids=[p.stem for p in CORPUS])
def test_preview_rejects_with_the_key(case: Path, project: Path) -> None:
    expected_key = case.read_text().splitlines()[0].removeprefix("# expect: ")
    name = "c" + str(CORPUS.index(case))
    (project / f"Pulumi.{name}.yaml").write_text(case.read_text())
    stack = engine.stack(project, project.parent / "state", name)
    try:
        with pytest.raises(auto.CommandError) as caught:
            stack.preview()
    finally:
        stack.workspace.remove_stack(name)
    message = str(caught.value)
    assert "invalid stack config" in message, message
    assert expected_key in message, message
    assert "Traceback" not in message
    # Nothing but the stack itself was registered: no host, no step.
    assert "vllm-fleet:index:" not in message and "pulumi-python:dynamic" not in message
