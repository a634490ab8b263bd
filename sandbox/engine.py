"""Drive the real Pulumi engine (the binaries `make setup` built) through the Automation API.

Each test (and each bench section that needs one) gets a copy of the project in a temporary folder (so stack
files the engine writes, such as an encryption salt, never touch the checkout) and a local state backend of its
own. The tests and bench/ import it; it lives here, beside the sandbox the engine deploys to, not under tests/.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from pulumi import automation as auto

from sandbox.processes import run_captured

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
# The project's PULUMI_HOME (scripts/env.sh), where make setup registered the command provider.
SHARED_HOME = TOOLS / "pulumi-home"
COMMAND_PROVIDER_VERSION = "1.2.1"
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components", "controller", "models", "host", "render")


def engine_home(backend: Path) -> Path:
    """The PULUMI_HOME of an engine on `backend`: the project's own (.tools/pulumi-home, where make setup
    registered the command provider) for the project's state and the engine's own checks; for any other
    backend (a test's, a bench section's) a home beside it that shares those plugins. The CLI writes an
    automatic log of every command into PULUMI_HOME/logs (Pulumi 3.274, kept 7 days or 500 MB) and lists
    that folder at every start: make test's thousands of commands made each later command of the user's
    ~90 ms slower for a week, and each test's commands list the logs of every test before it."""
    if backend == ROOT / ".state" or backend.is_relative_to(TOOLS):
        return SHARED_HOME
    return home_with_shared_plugins(backend.parent / f"{backend.name}-pulumi-home")


def home_with_shared_plugins(home: Path) -> Path:
    """`home` as a PULUMI_HOME of its own (logs, workspaces) whose plugins are those make setup registered."""
    with contextlib.suppress(FileExistsError):
        home.mkdir(parents=True)
        (home / "plugins").symlink_to(SHARED_HOME / "plugins")
    return home


def engine_env(backend: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "PULUMI_BACKEND_URL": f"file://{backend}",
        # The dev passphrase of scripts/env.sh, so a copy of Pulumi.dev.yaml (its salt, its secret) opens.
        "PULUMI_CONFIG_PASSPHRASE": "vllm-fleet-dev-sandbox",
        "PULUMI_HOME": str(engine_home(backend)),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # Hosts are probed unless a test asks otherwise, whatever the calling environment says.
        "VLLM_FLEET_OFFLINE": "0",
        # A production stack on a test's local backend is refused unless a test opts out itself.
        "VLLM_FLEET_SINGLE_OPERATOR": "0",
        # Only the engine: the language host finds the program's Python through Pulumi.yaml's virtualenv.
        "PATH": f"{TOOLS / 'bin'}:{os.environ['PATH']}",
    }
    env.update(extra or {})
    return env


def project_copy(dest: Path, stack_files: Mapping[str, str] | None = None) -> Path:
    """A runnable copy of the project: sources copied, the venv linked, stack files as given."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    for name, text in (stack_files or {}).items():
        (dest / name).write_text(text)
    return dest


def stack(
    work_dir: Path,
    backend: Path,
    name: str,
    config: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> auto.Stack:
    backend.mkdir(parents=True, exist_ok=True)
    options = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir),
        pulumi_command=auto.PulumiCommand(root=str(TOOLS)),
        env_vars=engine_env(backend, env),
        secrets_provider="passphrase",
    )
    created = auto.create_or_select_stack(stack_name=name, work_dir=str(work_dir), opts=options)
    for key, value in (config or {}).items():
        created.set_config(key, auto.ConfigValue(value=value))
    for key, value in (secrets or {}).items():
        created.set_config(key, auto.ConfigValue(value=value, secret=True))
    return created


def missing_engine() -> str | None:
    """What of the engine is missing (the CLI, the language host, the registered command provider)."""
    for binary in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec"):
        if not (TOOLS / "bin" / binary).exists():
            return f"{TOOLS / 'bin' / binary} is missing"
    plugins = run_captured([str(TOOLS / "bin" / "pulumi"), "plugin", "ls"], env=engine_env(TOOLS / "no-state")).stdout
    if not re.search(rf"^command\s+resource\s+{re.escape(COMMAND_PROVIDER_VERSION)}\b", plugins, re.M):
        return f"the pulumi-command provider {COMMAND_PROVIDER_VERSION} is not registered (`pulumi plugin ls`)"
    return None


def kill_orphans_of(project: Path) -> None:
    """The engine starts its plugins in process groups of their own: stop the ones of this project that
    outlived the killed `pulumi up` (by their working directory or command line), as a user would."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == str(project) or str(project) in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


@contextlib.contextmanager
def up_killed_on_exit(
    work_dir: Path, env: Mapping[str, str], stack_name: str, stdout: int | IO[str] = subprocess.DEVNULL
) -> Iterator[subprocess.Popen[str]]:
    """`pulumi up` of a stack in a process group of its own, killed with the whole group (SIGKILL, as a
    lost laptop would be) when the block ends, and then its plugins that outlived it. stdout takes its
    output and errors (subprocess.PIPE to read them in the block)."""
    process = subprocess.Popen(
        ["pulumi", "up", "--yes", "--skip-preview", "--stack", stack_name],
        cwd=work_dir,
        env=dict(env),
        stdout=stdout,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        kill_orphans_of(work_dir)
