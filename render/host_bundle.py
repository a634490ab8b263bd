"""The host package as it ships: `host/` as one zip archive, a launcher per tool, and a bootstrap that
runs one of its tools over SSH before anything is installed.

A host gets one archive (`/usr/local/lib/vllm-fleet/vllm-fleet-host.pyz`) and, for each tool the units
and steps call by path, a launcher of three lines that runs the tool's module from it (the tools step
writes them, render/templates/tools.sh). The archive is
built reproducibly (sorted names, fixed timestamps and modes), so it changes, and its steps show an
update in the preview, exactly when a file of `host/` changes; its digest is the package's version. It
travels to a host as a file (`archive_file`, copied over SFTP by the host's tools-archive step), not
inside a step's script: a step's inputs are in the stack's state twice and pass through the engine on
every run, and the 100 KB of an archive inside the install script were 60% of the dev stack's state and
the longest link of a no-op's registrations. The survey and `make status` run before the tools
exist on a new host: they send the same archive on stdin inside a bootstrap (`bootstrap_source`), so the
code that reads the host in a preview is the code the swap runs there.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import lzma
import zipfile
from pathlib import Path

from host.contract import BUNDLE_NAME, TOOLS_DIR
from host.swap_files import write_file
from render.checkout import CACHE

HOST_PACKAGE = Path(__file__).resolve().parent.parent / "host"
# The archive file the copy step sends and the bootstrap's compressed package, by the archive's digest,
# beside the survey's cache (gitignored): xz at this preset takes a third of a second of CPU, the largest
# single cost of a no-op preview of a small stack when it was done on every run.
TRANSPORTED_CACHE = HOST_PACKAGE.parent / CACHE / "host-bundle"
# Where the copy step puts the archive on a host, one file per version; the tools step unpacks it from there.
INCOMING_DIR = f"{TOOLS_DIR}/.incoming"
# Tool name (what units and steps call) -> the module of the host package that runs it.
TOOLS: dict[str, str] = {
    "gpu-release-guard": "host.tools.gpu_release_guard",
    "wait-ready": "host.tools.wait_ready",
    "model-sync": "host.tools.model_sync",
    "vllm-args-check": "host.tools.vllm_args_check",
    "swap": "host.tools.swap",
    "survey": "host.tools.survey",
    "prewarm": "host.tools.prewarm",
    "node-watch": "host.tools.node_watch",
    "node": "host.tools.node",
    "status": "host.tools.status",
    "clean-shm": "host.tools.clean_shm",
    "adapters": "host.tools.adapters",
    "step": "host.tools.step",
}
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@functools.cache
def archive() -> bytes:
    """The host package as a zip archive, byte for byte the same for the same sources: its library's modules,
    its tools' (host/tools/) and its steps' scripts (host/steps/, which the `step` tool runs)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        sources = [*HOST_PACKAGE.glob("*.py"), *HOST_PACKAGE.glob("tools/*.py"), *HOST_PACKAGE.glob("steps/*.sh")]
        for path in sorted(sources):
            # Stored, not deflated: the archive travels xz-compressed as a whole (`transported`), which
            # shares what the modules have in common (per-file deflate outgrew one SSH argument).
            info = zipfile.ZipInfo(path.relative_to(HOST_PACKAGE.parent).as_posix(), date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            bundle.writestr(info, path.read_bytes())
    return buffer.getvalue()


def _keep_in_cache(path: Path, data: bytes, versions: str) -> None:
    """Write `data` to `path` whole (a temporary file, then a rename) and remove the files of the other
    versions of host/ beside it (those matching the glob `versions`). OSError when the folder is not writable."""
    write_file(path, data)
    for stale in path.parent.glob(versions):
        if stale != path:
            stale.unlink(missing_ok=True)


@functools.cache
def archive_file(cache_dir: Path = TRANSPORTED_CACHE) -> str:
    """The archive as a file for the copy step's asset (`cache_dir/vllm-fleet-host-<version>.pyz`),
    written when missing or different. The path is relative to the working directory when it lies below
    it (the engine runs the program in the project's directory), so every checkout of the project states
    the same asset and the engine compares it by its digest alone."""
    data = archive()
    path = cache_dir / f"vllm-fleet-host-{version()}.pyz"
    try:
        current = path.read_bytes()
    except OSError:
        current = None
    if current != data:
        try:
            _keep_in_cache(path, data, "vllm-fleet-host-*.pyz")
        except OSError as error:
            raise OSError(
                f"cannot write the host package for the copy to the hosts at {path} ({error.strerror}): "
                f"make {cache_dir} writable (it is the project's gitignored cache)"
            ) from error
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def incoming_path() -> str:
    """Where the copy step puts this version's archive on a host."""
    return f"{INCOMING_DIR}/{version()}.pyz"


@functools.cache
def transported(cache_dir: Path | None = TRANSPORTED_CACHE) -> str:
    """The archive as the bootstrap carries it: xz-compressed, base64 (about 80 KB for 240 KB of sources).
    Compressed once per archive and kept in `cache_dir` (None: no cache), named by the archive's digest
    and headed by the digest of the text that follows: a copy is used only when that text is the one
    written for this archive, so a stale or damaged file is compressed afresh. (Checking the digest takes
    ~0.1 ms; decompressing the copy to compare took 3 ms of every run.)"""
    data = archive()
    path = None if cache_dir is None else cache_dir / f"{hashlib.sha256(data).hexdigest()}.xz.b64"
    if path is not None:
        try:
            digest, _, cached = path.read_text(encoding="ascii").partition("\n")
            if digest == hashlib.sha256(cached.encode("ascii")).hexdigest():
                return cached
        except (OSError, ValueError):
            pass
    text = base64.b64encode(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)).decode()
    if path is not None:
        headed = f"{hashlib.sha256(text.encode('ascii')).hexdigest()}\n{text}".encode("ascii")
        with contextlib.suppress(OSError):  # a read-only checkout compresses on every run, as before
            _keep_in_cache(path, headed, "*.xz.b64")
    return text


# The host's python3 unpacks it (nothing else is assumed installed there) and adds to each module its
# bytecode, compiled there by that python3: Python cannot cache the bytecode of modules it imports from a
# zip, so every tool run compiled what it imports again (the swap's transaction 70 ms of its 170 ms import,
# measured on the sandbox). Hash-checked against the source beside it in the archive; a python3 of another
# version (a tool run by the engine's python) finds its magic number different and compiles the source, as
# before. The archive the controller builds stays source only, so its digest is the same on every
# controller. stdin: the archive as copied; argv[1]: the installed archive's path, which tracebacks name
# as for the source.
UNPACK = """import importlib.util, io, marshal, sys, zipfile
out = io.BytesIO()
with zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read())) as src, zipfile.ZipFile(out, "w") as dst:
    for info in src.infolist():
        source = src.read(info)
        dst.writestr(info, source)
        if not info.filename.endswith(".py"):
            continue  # a step's script: data the `step` tool reads
        try:
            code = compile(source, f"{sys.argv[1]}/{info.filename}", "exec", dont_inherit=True)
        except SyntaxError:
            continue  # too new for this python3: the tools that import it fail as they would from source
        compiled = zipfile.ZipInfo(f"{info.filename}c", date_time=info.date_time)
        compiled.external_attr = info.external_attr
        flags = (3).to_bytes(4, "little")  # hash-based, checked (PEP 552)
        dst.writestr(compiled, importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code))
sys.stdout.buffer.write(out.getvalue())
"""


def version() -> str:
    """The package's version: the digest of its archive."""
    return hashlib.sha256(archive()).hexdigest()[:16]


def bundle_path() -> str:
    return f"{TOOLS_DIR}/{BUNDLE_NAME}"


@functools.cache
def bootstrap_source(module: str) -> str:
    """Python source that, piped into `python3 -`, runs `module` of the host package from a private copy
    of the archive it carries (the host needs nothing installed). Arguments follow the `-`."""
    return (
        "import base64, lzma, os, runpy, sys, tempfile\n"
        f"# vllm-fleet host package {version()}: runs {module} without installing anything\n"
        f'data = lzma.decompress(base64.b64decode("{transported()}"))\n'
        'handle, path = tempfile.mkstemp(prefix="vllm-fleet-host-", suffix=".pyz")\n'
        "os.write(handle, data)\n"
        "os.close(handle)\n"
        "sys.path.insert(0, path)\n"
        "try:\n"
        f'    runpy.run_module("{module}", run_name="__main__", alter_sys=True)\n'
        "finally:\n"
        "    os.unlink(path)\n"
    )
