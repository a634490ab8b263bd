"""controller/code_cache.py: the generated code of data classes and forward references, compiled once."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller import code_cache


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "codes.marshal"
    code_cache.uninstall()


def make_classes() -> tuple[type, type]:
    """A frozen data class with a default factory and one with ordering, and a forward reference, as a
    module would define them (without this test module's `from __future__ import annotations`: the
    annotations are objects)."""
    namespace: dict[str, object] = {"dataclasses": dataclasses, "typing": typing, "__name__": __name__}
    exec(  # test classes defined from text, as in a module of their own
        "@dataclasses.dataclass(frozen=True)\n"
        "class Plan:\n"
        "    name: str\n"
        "    steps: list = dataclasses.field(default_factory=list, hash=False)\n"
        "    owner: 'typing.Optional[str]' = None\n"
        "@dataclasses.dataclass(order=True)\n"
        "class Version:\n"
        "    major: int\n"
        "    minor: int = 0\n",
        namespace,
    )
    return namespace["Plan"], namespace["Version"]  # type: ignore[return-value]


def behaviour(plan: type, version: type) -> list[object]:
    one = plan("a")
    errors: list[str] = []
    try:
        one.name = "b"
    except dataclasses.FrozenInstanceError as error:
        errors.append(type(error).__name__)
    return [
        repr(one),
        one == plan("a"),
        one == plan("b"),
        hash(one) == hash(plan("a")),
        one.steps is not plan("a").steps,
        errors,
        version(1, 2) < version(1, 3),
        sorted([version(2), version(1, 5)]),
        inspect.signature(plan),
        vars(plan)["__init__"].__annotations__,
        typing.get_type_hints(plan),  # its string annotation: a forward reference typing compiles
    ]


def test_classes_made_through_the_cache_behave_as_without_it(installed: Path) -> None:
    expected = behaviour(*make_classes())
    cache = code_cache.install(installed, save_at_exit=False)
    first = behaviour(*make_classes())
    assert cache.misses > 0  # an empty cache: everything compiled here
    cache.save()
    code_cache.uninstall()

    again = code_cache.install(installed, save_at_exit=False)
    second = behaviour(*make_classes())
    assert [repr(x) for x in first] == [repr(x) for x in expected]
    assert [repr(x) for x in second] == [repr(x) for x in expected]
    # The second run compiled nothing: all of it came from the file the first one wrote.
    assert again.misses == 0
    assert again.hits >= 6  # __init__, __repr__, __eq__, __hash__, __setattr__, __delattr__, the orders...


def test_the_cached_code_is_the_code_compile_makes(installed: Path) -> None:
    cache = code_cache.install(installed, save_at_exit=False)
    make_classes()
    assert cache.codes
    for (filename, mode, source), code in cache.codes.items():
        fresh = compile(source, filename, mode, 0, True)
        assert code == fresh  # code objects compare by their bytecode, constants, names and flags
        # None of this module's __future__ flags (annotations) leaked into the generated functions.
        assert not code.co_flags & 0x1000000  # CO_FUTURE_ANNOTATIONS


def test_a_run_that_compiles_nothing_new_writes_nothing(installed: Path) -> None:
    cache = code_cache.install(installed, save_at_exit=False)
    make_classes()
    cache.save()
    code_cache.uninstall()
    written = installed.stat().st_mtime_ns
    again = code_cache.install(installed, save_at_exit=False)
    make_classes()
    again.save()
    assert again.misses == 0
    assert installed.stat().st_mtime_ns == written


@pytest.mark.parametrize(
    "content", [b"", b"not marshal at all", marshal.dumps([1, 2]), marshal.dumps({("a", "exec", "x"): 1})]
)
def test_a_damaged_cache_file_is_ignored_and_replaced(installed: Path, content: bytes) -> None:
    installed.write_bytes(content)
    cache = code_cache.install(installed, save_at_exit=False)
    expected_classes = make_classes()
    assert cache.misses > 0
    cache.save()
    assert all(isinstance(v, type(compile("0", "<s>", "eval"))) for v in marshal.loads(installed.read_bytes()).values())
    assert behaviour(*expected_classes)[0] == "Plan(name='a', steps=[], owner=None)"


def test_an_unwritable_cache_is_not_kept_and_nothing_fails(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-directory"
    blocked.write_text("")
    cache = code_cache.install(blocked / "codes.marshal", save_at_exit=False)
    try:
        make_classes()
        cache.save()  # the directory cannot be made: nothing kept, no error
    finally:
        code_cache.uninstall()
    assert not (blocked / "codes.marshal").exists()


def test_other_compiles_pass_through(installed: Path) -> None:
    cache = code_cache.install(installed, save_at_exit=False)
    code = cache.compile("x = 1", "<s>", "exec", 0x1000000, False)  # flags given: not cached
    assert code.co_flags & 0x1000000
    assert cache.compile(b"1", "<s>", "eval") is not None  # bytes: not cached
    assert cache.codes == {}


def test_uninstall_restores_the_builtins() -> None:
    code_cache.install(None, save_at_exit=False)
    assert "exec" in vars(dataclasses) and "compile" in vars(typing)
    code_cache.uninstall()
    assert "exec" not in vars(dataclasses) and "compile" not in vars(typing)


def test_the_cache_file_names_the_bytecode_format(tmp_path: Path) -> None:
    name = code_cache.cache_file(tmp_path).name
    assert name.startswith("cpython-") and name.endswith(".marshal")
