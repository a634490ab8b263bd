"""What a host is: the facts every host tool reads the same way, written once.

Processes and their systemd units (from /proc and their cgroup), the GPUs' memory and holders as
`nvidia-smi` prints them (tested on the recorded output in tests/fixtures/nvidia-smi/), who holds a
/dev/nvidiaN, listening sockets as `ss -ltnpH` prints them, and /proc/meminfo. Pure parsers take the
text; readers take the /proc root, so the tests can hand them recorded files. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from host.contract import Launch, Listener, Memory, Mount, ProcessUnit, is_managed, managed_owner
from host.processes import run_captured


@dataclass(frozen=True)
class GpuMemory:
    index: int
    used_mib: int


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    name: str
    used_mib: int
    # GPU indices it holds, from nvidia-smi's gpu_uuid; None when nvidia-smi did not say.
    gpus: frozenset[int] | None = None


def _number(field: str) -> int:
    """nvidia-smi prints '21090', '21090 MiB' (units on) or '[N/A]'; the latter counts as 0."""
    value = field.strip().removesuffix("MiB").strip()
    if not value or value.startswith("["):
        return 0
    return int(float(value))


def parse_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    """Rows of `nvidia-smi --query-*=... --format=csv[,noheader][,nounits]` keyed by field name."""
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0].split(" [")[0] == fields[0]:
            continue  # a header line: "index, name, memory.total [MiB]"
        if len(cells) != len(fields):
            raise ValueError(f"nvidia-smi printed {len(cells)} columns, expected {len(fields)}: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


# The exact queries recorded in tests/fixtures/nvidia-smi/ (mem-busy.csv, compute-apps-*.csv).
MEMORY_QUERY = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"]
GPU_UUID_QUERY = ["--query-gpu=index,uuid", "--format=csv,noheader,nounits"]


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    rows = parse_csv(text, ["index", "memory.used"])
    return [GpuMemory(int(r["index"]), _number(r["memory.used"])) for r in rows]


def parse_compute_apps(text: str, uuids: dict[str, int] | None = None) -> list[ComputeApp]:
    """`--query-compute-apps=pid,gpu_uuid,used_memory,process_name` (one row per process and GPU), merged
    per process with its GPUs as indices; the older `pid,process_name,used_memory` form is read too."""
    merged: dict[int, ComputeApp] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",", 3)]
        if cells[0] == "pid":
            continue
        if len(cells) == 4:  # pid, gpu_uuid, used_memory, process_name
            pid, uuid, used, name = int(cells[0]), cells[1], _number(cells[2]), cells[3]
            gpu = (uuids or {}).get(uuid)
            gpus = frozenset({gpu}) if gpu is not None else None
        elif len(cells) == 3:  # pid, process_name, used_memory
            pid, name, used, gpus = int(cells[0]), cells[1], _number(cells[2]), None
        else:
            raise ValueError(f"nvidia-smi printed {len(cells)} columns: {line!r}")
        known = merged.get(pid)
        if known is None:
            merged[pid] = ComputeApp(pid, name, used, gpus)
        else:
            both = None if known.gpus is None or gpus is None else known.gpus | gpus
            merged[pid] = ComputeApp(pid, name, known.used_mib + used, both)
    return list(merged.values())


def parse_gpu_uuids(text: str) -> dict[str, int]:
    """`--query-gpu=index,uuid` as uuid -> index; further columns (a recording with more fields) are ignored."""
    out = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) >= 2 and cells[0].isdigit():
            out[cells[1]] = int(cells[0])
    return out


def device_holders(proc: str = "/proc") -> dict[int, frozenset[int]]:
    """Processes with a /dev/nvidiaN open, and the N's: a child forked after CUDA initialisation holds its
    parent's memory without nvidia-smi listing it (tests/fixtures/nvidia-smi/dead-parent-trace.txt)."""
    found: dict[int, frozenset[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        minors = set()
        try:
            for fd in os.listdir(f"{proc}/{entry}/fd"):
                target = os.readlink(f"{proc}/{entry}/fd/{fd}")
                if target.startswith("/dev/nvidia") and target[len("/dev/nvidia") :].isdigit():
                    minors.add(int(target[len("/dev/nvidia") :]))
        except OSError:
            continue
        if minors:
            found[int(entry)] = frozenset(minors)
    return found


Runner = Callable[[list[str]], str]


def run_nvidia_smi(args: list[str]) -> str:
    binary = os.environ.get("VLLM_FLEET_NVIDIA_SMI", "nvidia-smi")
    result = run_captured([binary, *args], timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def read_memory(run: Runner) -> list[GpuMemory]:
    return parse_gpu_memory(run(MEMORY_QUERY))


def read_apps(
    run: Runner,
    devices: Callable[[], dict[int, frozenset[int]]] = lambda: {},
    is_alive: Callable[[int], bool] = lambda pid: alive(pid),
) -> list[ComputeApp]:
    """What holds GPU memory: nvidia-smi's list by GPU UUID, without PIDs that are gone (it keeps naming a
    killed parent while a child holds its memory), plus live holders of /dev/nvidiaN it does not list."""
    apps = [a for a in parse_compute_apps(run(APPS_QUERY), parse_gpu_uuids(run(GPU_UUID_QUERY))) if is_alive(a.pid)]
    listed = {a.pid for a in apps}
    for pid, minors in devices().items():
        if pid not in listed:
            apps.append(ComputeApp(pid, _comm(pid), 0, minors))
    return apps


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def parent_pid(pid: int, proc: str) -> int:
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def lineage(pid: int, proc: str = "/proc") -> Iterator[int]:
    """`pid`, its parent, its parent's parent and so on, PID 1 left out; it ends early where a process is
    gone or the chain loops back."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        yield pid
        pid = parent_pid(pid, proc)


def visible_gpus(pid: int, proc: str = "/proc") -> set[int] | None:
    """GPUs a process was started with (CUDA_VISIBLE_DEVICES of it or its nearest ancestor that set
    it: vLLM's engine core and workers drop the variable but use their server's devices), or None
    when it could use any."""
    for ancestor in lineage(pid, proc):
        try:
            with open(f"{proc}/{ancestor}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            return None
        for entry in entries:
            if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
                value = entry.split(b"=", 1)[1].decode(errors="replace")
                try:
                    return {int(v) for v in value.split(",") if v.strip()}
                except ValueError:
                    return None  # UUID form: cannot tell, so treat it as possibly ours
    return None


def unit_of(pid: int, proc: str = "/proc") -> str | None:
    """The systemd service a process runs in, from its cgroup path, or None."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as handle:
            for line in handle:
                path = line.rstrip("\n").split(":", 2)[-1]
                for part in reversed(path.split("/")):
                    if part.endswith(".service"):
                        return part
    except OSError:
        return None
    return None


def first_line(path: str) -> str:
    """A file's first line (empty when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline()
    except OSError:
        return ""


def read_process_units(names: list[str]) -> dict[str, ProcessUnit]:
    """The state of each unit in `names` and whether vllm-fleet wrote it (its file's first line), from one
    `systemctl show` (an answer without a block per name: each unit on its own)."""
    if not names:
        return {}

    def show(*units: str) -> list[dict[str, str]]:
        try:
            out = run_captured(["systemctl", "show", *units, "--property=ActiveState,FragmentPath"], timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        blocks = [block for block in out.strip("\n").split("\n\n") if block.strip()]
        return [dict(line.split("=", 1) for line in block.splitlines() if "=" in line) for block in blocks]

    shown = show(*names)
    if len(shown) != len(names):
        shown = [(show(name) or [{}])[0] for name in names]
    units = {}
    for name, props in zip(names, shown, strict=True):
        head = first_line(props.get("FragmentPath", "")) if props.get("FragmentPath") else ""
        units[name] = ProcessUnit(name, props.get("ActiveState", "unknown"), is_managed(head), managed_owner(head))
    return units


def command_line(pid: int, proc: str = "/proc") -> str:
    """A process's command line on one line, cut to 300 characters; empty when it cannot be read."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            return " ".join(handle.read().replace(b"\0", b" ").decode(errors="replace").split())[:300]
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie holds no GPU memory)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


_SS_LINE = re.compile(r"^\S+\s+\d+\s+\d+\s+(\S+):(\d+)\s+\S+\s*(.*)$")
_SS_PID = re.compile(r"pid=(\d+)")


def parse_ss(text: str) -> list[Listener]:
    """`ss -ltnpH` lines: one listener per (address, port, pid); their units are the survey's to read."""
    found = []
    for line in text.splitlines():
        match = _SS_LINE.match(line.strip())
        if not match:
            continue
        address, port, users = match.group(1), int(match.group(2)), match.group(3)
        pids = sorted({int(p) for p in _SS_PID.findall(users)}) or [0]
        for pid in pids:
            found.append(Listener(port=port, pid=pid, address=address.strip("[]")))
    return found


def parse_meminfo(text: str) -> Memory:
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and rest.split():
            values[name] = int(rest.split()[0]) // 1024
    return Memory(values.get("MemTotal", 0), values.get("MemAvailable", 0))


# Filesystems that hold no model: the kernel's own views, control groups, and the like.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts", "devtmpfs",
        "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "proc", "pstore", "ramfs", "rpc_pipefs",
        "securityfs", "selinuxfs", "sysfs", "tracefs",
    }
)  # fmt: skip


def parse_mounts(text: str) -> list[Mount]:
    """The mount table (/proc/self/mounts: source, mount point, type, ...), each mount point once (the last
    mount over it is what a path reaches), pseudo-filesystems left out. A mount point's spaces and other
    odd bytes are octal escapes there (\\040)."""
    found: dict[str, Mount] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[2] in PSEUDO_FILESYSTEMS:
            continue
        path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        found.pop(path, None)
        found[path] = Mount(path, fields[2], fields[0])
    return list(found.values())


def _words(text: str) -> list[str]:
    """`text` split as a shell would; at white space where its quoting is broken."""
    with contextlib.suppress(ValueError):
        return shlex.split(text)
    return text.split()


def parse_environment(text: str) -> dict[str, str]:
    """`systemctl show -p Environment --value`-style text (KEY=VALUE words, shell-quoted where needed)."""
    return dict(word.split("=", 1) for word in _words(text.removeprefix("Environment=")) if "=" in word)


def exec_start(unit_text: str) -> list[str] | None:
    """The command line of a unit file's (last) ExecStart=, as systemd splits it; None when it has none."""
    lines: list[str] = []
    pending = ""
    for raw in unit_text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        lines.append(line)
    command: list[str] | None = None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() != "ExecStart":
            continue
        value = value.strip().lstrip("-@+!:")
        if not value:
            command = None  # `ExecStart=` resets the list
            continue
        command = _words(value)
    return command


def _flag_values(argv: list[str], *names: str) -> list[str] | None:
    """The values after the last of `names` (--flag v1 v2 ... or --flag=v); None when absent."""
    found: list[str] | None = None
    for index, word in enumerate(argv):
        flag, equals, value = word.partition("=")
        if flag not in names:
            continue
        if equals:
            found = [value]
            continue
        found = []
        for following in argv[index + 1 :]:
            if following.startswith("-"):
                break
            found.append(following)
    return found


def vllm_launch(argv: list[str], environment: dict[str, str]) -> Launch | None:
    """What a vLLM command line serves (host/contract.Launch); None when the command is not a vLLM API server."""
    words = list(argv)
    serve_at = next((i for i, w in enumerate(words[:-1]) if w == "serve" and "vllm" in " ".join(words[:i])), None)
    api_server = any("vllm.entrypoints.openai.api_server" in w for w in words)
    if serve_at is None and not api_server:
        return None
    model = None
    if serve_at is not None and not words[serve_at + 1].startswith("-"):
        model = words[serve_at + 1]
    model_flag = _flag_values(words, "--model")
    if model_flag:
        model = model_flag[0]
    served = _flag_values(words, "--served-model-name") or ([model] if model else [])
    port_values = _flag_values(words, "--port")
    port = int(port_values[0]) if port_values and port_values[0].isdigit() else (8000 if not port_values else None)
    host_values = _flag_values(words, "--host")
    tp_values = _flag_values(words, "--tensor-parallel-size", "-tp")
    visible = environment.get("CUDA_VISIBLE_DEVICES")
    gpus: tuple[int, ...] | None = None
    if visible is not None:
        try:
            gpus = tuple(int(v) for v in visible.split(",") if v.strip())
        except ValueError:
            gpus = None  # UUIDs: cannot tell which indices, so count it as all of them
    return Launch(
        argv=tuple(words),
        model=model,
        served_names=tuple(served),
        port=port,
        bind_address=host_values[0] if host_values else None,
        gpus=gpus,
        tensor_parallel=int(tp_values[0]) if tp_values and tp_values[0].isdigit() else 1,
        environment=dict(sorted(environment.items())),
    )


def unit_launch(unit_text: str, environment: dict[str, str]) -> Launch | None:
    command = exec_start(unit_text)
    return vllm_launch(command, environment) if command else None


def unit_environment(unit_text: str) -> dict[str, str]:
    """The variables a unit file's Environment= lines set (later lines win, as systemd reads them)."""
    environment: dict[str, str] = {}
    for raw in unit_text.splitlines():
        key, _, value = raw.strip().partition("=")
        if key.strip() == "Environment":
            environment.update(parse_environment(value.strip()))
    return environment


# Short spellings vLLM's parser takes for a long flag.
_FLAG_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")


def engine_flags(argv: list[str]) -> dict[str, tuple[str, ...]]:
    """A vLLM command line's flags as vLLM's parser reads them, by long name: `--a=b` and `--a b` alike,
    underscores as dashes (vLLM accepts both), a flag given twice counts once with its last values. The
    interpreter and entry point (`python -m vllm.entrypoints.openai.api_server`, `vllm serve`) are not
    flags; `serve`'s positional model counts as --model."""
    words = list(argv)
    start = 0
    for index, word in enumerate(words):
        if word == "vllm.entrypoints.openai.api_server" or word.endswith("vllm.entrypoints.openai.api_server"):
            start = index + 1
            break
        if word == "serve" and "vllm" in " ".join(words[:index]):
            start = index + 1
            if start < len(words) and not words[start].startswith("-"):
                words[start] = "--model=" + words[start]
            break
    flags: dict[str, tuple[str, ...]] = {}
    index = start
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or _NUMBER.fullmatch(word):
            continue  # a stray positional word
        name, equals, value = word.partition("=")
        name = _FLAG_ALIASES.get(name, "--" + name.lstrip("-").replace("_", "-"))
        if equals:
            flags[name] = (value,)
            continue
        values: list[str] = []
        while index < len(words) and (not words[index].startswith("-") or _NUMBER.fullmatch(words[index])):
            values.append(words[index])
            index += 1
        flags[name] = tuple(values)
    return flags


def children_by_parent(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    """Every process's children, by parent PID, from /proc/PID/stat (a process gone meanwhile is left out)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children
