"""The stack of one end-to-end test module on the sandbox: a copy of the project with a state backend of
its own, the stack file written and the stack selected with the mirror's token, and a destroy that removes
the stack from the backend whatever the destroy did. Each module's state class builds on it; WatchedStack
adds a client that sends requests throughout the module's tests, its view kept phase by phase.
`module_state` makes a module's fixture of it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import yaml
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from scripts.downtime_probe import DowntimeProbe


class SandboxStack:
    def __init__(self, tmp: Path, name: str) -> None:
        self.work = engine.project_copy(tmp / "project")
        self.backend = tmp / "state"
        self.name = name
        # What the engine printed (each module decides which operations it collects).
        self.output: list[str] = []
        # The stack the module selected last (its `configure` sets it).
        self.stack: auto.Stack

    def select(
        self, stack_file: Mapping[str, Any] | str, secrets: Mapping[str, str] | None = None, name: str | None = None
    ) -> auto.Stack:
        """Write `stack_file` (a stack file's document or its text) as Pulumi.<name>.yaml and select that
        stack, with the mirror's token as its Hugging Face token and `secrets` besides."""
        name = name or self.name
        text = stack_file if isinstance(stack_file, str) else yaml.safe_dump(dict(stack_file), sort_keys=False)
        (self.work / f"Pulumi.{name}.yaml").write_text(text)
        return engine.stack(
            self.work,
            self.backend,
            name,
            secrets={"vllm-fleet:hfToken": sandbox_env.MIRROR_TOKEN, **(secrets or {})},
        )

    def set_up(self) -> None:
        """What the module's tests need before the first of them (nothing, unless the module says)."""

    def tear_down(self) -> None:
        """After the module's last test: leave the sandbox as the module found it, whatever its tests did."""
        raise NotImplementedError(f"{type(self).__name__} says nothing of how it leaves the sandbox")

    def log(self) -> str:
        """What the engine printed, as one text (an assertion shows its end)."""
        return "\n".join(self.output)

    def try_up(self) -> auto.UpResult | None:
        """`pulumi up` of the stack the module selected last (`self.stack`); None when it failed (the
        collected output says why)."""
        self.output.clear()
        try:
            return self.stack.up(on_output=self.output.append)
        except auto.CommandError:
            return None

    def up_succeeds(self) -> auto.UpResult:
        """An up that must succeed (the end of its output says why when it does not)."""
        result = self.try_up()
        assert result is not None and result.summary.result == "succeeded", self.log()[-3000:]
        return result

    def destroy(self, stack: auto.Stack, *, force_remove: bool = False, **options: Any) -> None:
        """Destroy `stack`, its output collected, then remove it from the backend even when that failed
        (with force_remove, even when resources are left)."""
        try:
            stack.destroy(on_output=self.output.append, **options)
        finally:
            stack.workspace.remove_stack(stack.name, force=force_remove)

    def destroy_left_over(self, stack: auto.Stack, *, force_remove: bool = False) -> None:
        """The module's last destroy, whatever its tests left: a lock of a killed run is cancelled first,
        and a resource that fails to go does not stop the others."""
        with contextlib.suppress(auto.CommandError):
            stack.cancel()  # a lock left by a killed run
        self.destroy(stack, force_remove=force_remove, continue_on_error=True)


State = TypeVar("State", bound=SandboxStack)


class SetUpAndTornDown(Protocol):
    def set_up(self) -> None: ...

    def tear_down(self) -> None: ...


Settled = TypeVar("Settled", bound=SetUpAndTornDown)


def set_up_and_torn_down(state: Settled) -> Iterator[Settled]:
    """`state` set up, then torn down after its module's tests, also when its set-up fails half-way: what
    that left (units written by hand, an engine started on a port) would fail the next module too. The
    set-up's own error is the one raised."""
    try:
        state.set_up()
    except BaseException:
        with contextlib.suppress(Exception):
            state.tear_down()
        raise
    yield state
    state.tear_down()


def module_state(make: Callable[[Path], State], *, on_fleet: bool = False) -> Any:
    """The module-scoped fixture of an end-to-end module (assign it to the fixture's name): the state that
    `make` builds in a temporary folder of the module's name, its set_up before the module's first test and
    its tear_down after the last. It needs the sandbox up, and with on_fleet the fleet hosts beside it."""

    def opened(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> Iterator[State]:
        yield from set_up_and_torn_down(make(tmp.mktemp(request.module.__name__.rsplit(".", 1)[-1])))

    if on_fleet:

        def on_the_fleet(fleet: int, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
            yield from opened(request, tmp_path_factory)

        return pytest.fixture(scope="module")(on_the_fleet)

    def on_the_sandbox(sandbox: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
        yield from opened(request, tmp_path_factory)

    return pytest.fixture(scope="module")(on_the_sandbox)


class WatchedStack(SandboxStack):
    """A stack whose deployment a client calls throughout the module's tests; what it saw in each phase
    goes to .run/<results>.json."""

    def __init__(self, tmp: Path, name: str, client: DowntimeProbe, results: str) -> None:
        super().__init__(tmp, name)
        self.client = client
        self.phases = sandbox_env.PhaseResults(results)

    def watch_once_serving(self, endpoint: str, root: str, timeout: float) -> None:
        """Start the client once `endpoint` serves the model files at `root` (an engine started by hand)."""
        sandbox_env.wait_serving(endpoint, root, timeout)
        self.client.start()

    def tear_down(self) -> None:
        self.client.stop()
        self.leave_sandbox()

    def leave_sandbox(self) -> None:
        """After the module's last test, the client stopped: leave the sandbox as the module found it."""
        raise NotImplementedError(f"{type(self).__name__} says nothing of how it leaves the sandbox")

    def record(self, phase: str, start: float, **extra: Any) -> dict[str, Any]:
        """The client's requests from `start` until now, as `phase` (with `extra` figures besides)."""
        return self.phases.record(phase, {**self.client.report(start, time.monotonic()), **extra})


def start_without_failures(client: DowntimeProbe, seconds: float) -> None:
    """Start `client`, and check that none of its requests fails in its first `seconds`."""
    client.start()
    time.sleep(seconds)
    assert client.report()["failed"] == 0, repr(client.report())
