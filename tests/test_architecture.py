"""docs/architecture.md says what the code does: its table of import directions is the imports the code has
(no arrow more, none fewer), and its table of host tools is render/host_bundle.TOOLS, which are the modules of
host/tools/, and none of the host package's library imports."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from render import host_bundle
from tests.support.paths import ROOT

PAGE = (ROOT / "docs" / "architecture.md").read_text()
PACKAGES = ("models", "render", "components", "controller", "host")


def section_table(heading: str) -> list[list[str]]:
    """The rows of the first table under `## heading`, each a list of its cells."""
    section = PAGE.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def code_names(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def imported_names(path: Path) -> Iterator[str]:
    """The modules a module imports, at its top level or inside functions (`from host import contract`
    imports host.contract; `from x.y import z`, x.y)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from [f"host.{a.name}" for a in node.names] if node.module == "host" else [node.module]


def imports_of(package: str) -> tuple[set[str], set[str]]:
    """What the modules of a package import: of this repository (the host package's modules by name, its
    tools as host.tools, the others by package), and beyond the standard library."""
    ours: set[str] = set()
    beyond: set[str] = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in imported_names(path):
            top = name.split(".")[0]
            if top == package or top == "__future__" or top in sys.stdlib_module_names:
                continue
            if top == "host":
                ours.add(".".join(name.split(".")[:2]))
            elif top in PACKAGES:
                ours.add(top)
            else:
                beyond.add(top)
    return ours, beyond


def test_the_import_table_is_the_code_s_imports() -> None:
    table = {
        next(iter(code_names(row[0]))): (code_names(row[1]), code_names(row[2]))
        for row in section_table("Import directions")
    }
    assert set(table) == set(PACKAGES)
    for package in PACKAGES:
        assert imports_of(package) == table[package], package


def test_the_host_package_imports_vllm_only_where_it_asks_vllm_s_parser() -> None:
    """The imports no static reading shows (the page says so): the host's vLLM, through importlib, where its
    parser reads a launch (host/vllm_parser.py, for the args check and the launch identity) and where the
    args check and the launch identity read its tables (attention backends, environment variables)."""
    dynamic = [
        path.relative_to(ROOT / "host").as_posix()
        for path in sorted((ROOT / "host").rglob("*.py"))
        if re.search(r"import_module\(\s*[\"']vllm", path.read_text())
    ]
    assert dynamic == ["launch_identity.py", "tools/vllm_args_check.py", "vllm_parser.py"]


def test_the_tool_table_is_the_bundle_s_tools() -> None:
    rows = section_table("The host's tools")
    listed = {next(iter(code_names(row[0]))): next(iter(code_names(row[1]))) for row in rows}
    expected = {tool: module.replace(".", "/") + ".py" for tool, module in host_bundle.TOOLS.items()}
    assert listed == expected
    # Each module the table names is a tool, with the main() its launcher runs.
    for module in listed.values():
        assert re.search(r"^def main\(", (ROOT / module).read_text(), re.M), module


def test_nothing_outside_tests_imports_from_tests() -> None:
    """What runs outside the tests (the program, the host package, bench/, the sandbox's helpers and their own
    tests, scripts/) imports nothing of tests/: run-time helpers live where they run (the page's "Around
    them")."""
    tops = [top for top in sorted(ROOT.iterdir()) if top.name != "tests" and not top.name.startswith(".")]
    outside = [path for top in tops for path in ([top] if top.suffix == ".py" else sorted(top.rglob("*.py")))]
    assert any(path.relative_to(ROOT).parts[0] == "bench" for path in outside)
    importers = []
    for path in outside:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if any(name == "tests" or name.startswith("tests.") for name in names):
                importers.append(str(path.relative_to(ROOT)))
    assert not importers, importers


def test_host_tools_holds_exactly_the_bundle_s_tools() -> None:
    """host/tools/ is the tools' entry points and nothing else: one module per tool of TOOLS, named after it."""
    modules = {f"host.tools.{path.stem}" for path in (ROOT / "host" / "tools").glob("*.py") if path.stem != "__init__"}
    assert modules == set(host_bundle.TOOLS.values())
    assert all(module == "host.tools." + tool.replace("-", "_") for tool, module in host_bundle.TOOLS.items())
    for module in modules:  # each with the main() its launcher runs
        assert re.search(r"^def main\(", (ROOT / (module.replace(".", "/") + ".py")).read_text(), re.M), module


def test_no_library_module_of_host_imports_a_tool() -> None:
    """The rest of host/ is the library the tools share: a module of it that imported host.tools would make a
    tool's entry point part of the library (what two tools share belongs in a library module)."""
    importing = {
        path.name: name
        for path in sorted((ROOT / "host").glob("*.py"))
        for name in imported_names(path)
        if name == "host.tools" or name.startswith("host.tools.")
    }
    assert importing == {}
