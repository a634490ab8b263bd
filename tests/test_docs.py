"""The README and docs/ name only what exists: every page of docs/ is linked from the README, every link
resolves, and every `make` target, file of the repository, `python -m` module and config key they name is
there (the keys as the generated config reference lists them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import config_reference
from tests.support.paths import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAKEFILE_TARGETS = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
# The folders of this repository whose files the pages name by path.
FOLDERS = ("scripts", "host", "controller", "render", "models", "components", "sandbox", "bench", "tests", "docs")
# A path with a placeholder in it (`sandbox/base-<flavour>-<key>/`) is left out: it names no one file.
REPO_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(FOLDERS)})/[\w./-]*\w/?)(?![\w./-]*<)")
# A key path as the pages write it: `vllm-fleet:hosts[2].gpus.count`, or, without the namespace, one that
# starts with a structured key: `deployments[].gpus`, `access.metricsFrom`, `serving.lora`.
NAMESPACED_KEY = re.compile(r"vllm-fleet:([A-Za-z]+(?:(?:\[\d*\])|\.[\w<>-]+)*)")
# (A Python path such as `models.config.Deployment.port` is no key: its class name starts in upper case, and a
# file name such as `adapters.json` ends in its type.)
BARE_KEY = re.compile(
    r"`((?:hosts|storage|deployments|models|adapters|access|monitoring|serving)(?:\[\d*\])?"
    r"(?:\.(?!(?:py|json|yaml|md|sh)`)[a-z<][A-Za-z<>]*(?:\[\d*\])?)+)`"
)
# defaults.<entry> holds the fields of that list's entries.
DEFAULTS_ENTRIES = {"host": "hosts[]", "storage": "storage[]", "deployment": "deployments[]"}


def text_of(page: Path) -> str:
    return page.read_text()


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def reference_paths() -> list[re.Pattern[str]]:
    """Each key path of the generated reference as a pattern: `<name>` stands for any name."""
    reference = config_reference.Reference()
    paths = [row.path.removeprefix("vllm-fleet:") for _, rows in reference.top_level() for row in rows]
    paths += [*config_reference.OUTSIDE_THE_MODEL, "defaults", *(f"defaults.{e}" for e in DEFAULTS_ENTRIES)]
    paths.append("apiKeys.<name>")
    # Every key that holds others is a key too (`adapters.<name>`, `hosts[]`).
    paths += [path[: m.start()] for path in paths for m in re.finditer(r"\.|\[\]", path)]
    return [re.compile(re.escape(path).replace(re.escape("<name>"), r"[^.\[\]]+")) for path in paths]


KNOWN_KEYS = reference_paths()


def normalized(key: str) -> str:
    """The reference's spelling of a key as a page writes it: list indices as `[]`, defaults' fields as the
    fields of the entries they go under, a model's `serving` under `models.<name>`."""
    key = re.sub(r"\[\d+\]", "[]", key)
    for entry, target in DEFAULTS_ENTRIES.items():
        if key.startswith(f"defaults.{entry}."):
            key = target + key.removeprefix(f"defaults.{entry}")
    if key.startswith("serving."):
        key = "models.<name>." + key
    return key


def is_known_key(key: str) -> bool:
    key = normalized(key)
    return any(pattern.fullmatch(key) for pattern in KNOWN_KEYS)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)(?:#[\w-]*)?\)", text_of(README)))
    assert {page_id(page) for page in DOCS} - linked == set()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_between_pages_resolve(page: Path) -> None:
    prose = re.sub(r"`[^`\n]*`", "", text_of(page))  # a pattern in a code span is no link
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    missing = [
        target
        for target in targets
        if not target.startswith(("http://", "https://", "#")) and not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_make_targets_named_exist(page: Path) -> None:
    named = set(re.findall(r"(?:`|^)make ([a-z][a-z-]*)", text_of(page), re.M))
    assert named - MAKEFILE_TARGETS == set()


def exists(path: str) -> bool:
    """A path of the repository, or a module's attribute written after it (`render/host_bundle.TOOLS`,
    `host/judgement.adoption`)."""
    if (ROOT / path).exists():
        return True
    module, _, _attribute = path.rpartition(".")
    return bool(module) and (ROOT / f"{module}.py").is_file()


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_files_named_exist(page: Path) -> None:
    named = {path.rstrip(".") for path in REPO_PATH.findall(text_of(page))}
    missing = sorted(path for path in named if not exists(path))
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_python_modules_named_exist(page: Path) -> None:
    modules = set(re.findall(r"python3? -m ([\w.]+)", text_of(page)))
    missing = [
        module
        for module in modules
        if not (ROOT / f"{module.replace('.', '/')}.py").is_file()
        and not (ROOT / module.replace(".", "/") / "__init__.py").is_file()
        and module not in {"pstats"}  # the standard library's
    ]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_config_keys_named_exist(page: Path) -> None:
    text = text_of(page)
    keys = set(NAMESPACED_KEY.findall(text)) | set(BARE_KEY.findall(text))
    unknown = sorted(key for key in keys if not is_known_key(key))
    assert unknown == []


def test_the_key_check_tells_a_key_from_a_typo() -> None:
    assert is_known_key("hosts[2].gpus.count")
    assert is_known_key("defaults.deployment.gpus")
    assert is_known_key("models.kimi-k2.5-int4.serving.lora.maxLoraRank".replace("kimi-k2.5-int4", "kimi"))
    assert is_known_key("apiKeys.alice")
    assert is_known_key("serving.lora")
    assert not is_known_key("hosts[].gpus.cores")
    assert not is_known_key("deployments[].swapmode")
    assert not is_known_key("acess.open")


def test_the_two_commands_are_on_the_first_screen_and_ci_runs_the_readme_s_test_command() -> None:
    first_screen = text_of(README).splitlines()[:40]
    block = first_screen[first_screen.index("```sh") + 1 :]
    commands = [line.split("#", 1)[0].strip() for line in block[: block.index("```")]]
    assert commands == ["make up", "make test"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "exec make test"


def test_the_readme_stays_a_front_door() -> None:
    assert len(text_of(README).splitlines()) <= 250
