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
# The parts of the repository that run (each a folder, and the program's entry point), as the page's floors
# name them.
FLOOR_PARTS = ("host", "models", "render", "sandbox", "components", "controller", "scripts", "__main__", "bench")
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


def test_nothing_outside_tests_imports_from_tests() -> None:
    """What runs outside the tests (the program, the host package, bench/, the sandbox's helpers and their own
    tests, scripts/) imports nothing of tests/: run-time helpers live where they run (the page's "Around
    them")."""
    tops = [top for top in sorted(ROOT.iterdir()) if top.name != "tests" and not top.name.startswith(".")]
    outside = [path for top in tops for path in ([top] if top.suffix == ".py" else sorted(top.rglob("*.py")))]
    assert any(path.relative_to(ROOT).parts[0] == "bench" for path in outside)
    importers = [
        str(path.relative_to(ROOT))
        for path in outside
        if any(name == "tests" or name.startswith("tests.") for name in imported_names(path))
    ]
    assert not importers, importers


def part_of(name: str) -> str | None:
    """The part of the repository a module name belongs to (its first dotted name, as a folder), or None
    for the standard library and what is installed."""
    top = name.split(".")[0]
    return top if top in FLOOR_PARTS else None


def floors_of_the_code() -> dict[str, int]:
    """Each part's floor as the import graph gives it: a part that imports no other part stands on floor 1,
    any other one floor above the highest part it imports (what `farm-studio look` draws; their tests are
    no rooms of it, so they are left out here too). A circle fails."""
    imports: dict[str, set[str]] = {}
    for part in FLOOR_PARTS:
        paths = [ROOT / f"{part}.py"] if part == "__main__" else sorted((ROOT / part).rglob("*.py"))
        names = {name for path in paths if "tests" not in path.relative_to(ROOT).parts for name in imported_names(path)}
        imports[part] = {found for found in map(part_of, names) if found is not None and found != part}
    floors: dict[str, int] = {}

    def floor(part: str, below: tuple[str, ...]) -> int:
        assert part not in below, f"an import circle: {' -> '.join((*below, part))}"
        if part not in floors:
            floors[part] = 1 + max((floor(other, (*below, part)) for other in imports[part]), default=0)
        return floors[part]

    for part in FLOOR_PARTS:
        floor(part, ())
    return floors


def test_the_floors_on_the_page_are_the_import_graph_s() -> None:
    """The page's floors (the parts as `farm-studio look` stacks them) are what the imports give: a part
    that starts to import one on its own floor or above moves up, and the page must say so."""
    on_the_page = {
        name.strip("/").removesuffix(".py"): int(row[0])
        for row in section_table("Floors")
        for name in code_names(row[1])
    }
    assert on_the_page == floors_of_the_code()


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
