"""The end-to-end modules' state (tests/support/sandbox_stack.py): torn down after the module's tests, and
also when its set-up fails half-way, so what that set-up left does not fail the next module."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.support.sandbox_stack import set_up_and_torn_down


@dataclass
class Steps:
    """A module's state that records its set-up and tear-down; `fails` makes a step raise."""

    fails: frozenset[str] = frozenset()
    done: list[str] = field(default_factory=list)

    def step(self, name: str, error: str) -> None:
        self.done.append(name)
        if name in self.fails:
            raise RuntimeError(error)

    def set_up(self) -> None:
        self.step("set_up", "the hand-made engine never answered")

    def tear_down(self) -> None:
        self.step("tear_down", "nothing to destroy")


def test_the_state_is_set_up_before_the_tests_and_torn_down_after_them() -> None:
    state = Steps()
    opened = set_up_and_torn_down(state)
    assert next(opened) is state and state.done == ["set_up"]
    with pytest.raises(StopIteration):
        next(opened)
    assert state.done == ["set_up", "tear_down"]


def test_a_set_up_that_fails_is_torn_down_and_its_own_error_is_raised() -> None:
    state = Steps(fails=frozenset({"set_up", "tear_down"}))
    with pytest.raises(RuntimeError, match="never answered"):
        next(set_up_and_torn_down(state))
    assert state.done == ["set_up", "tear_down"]
