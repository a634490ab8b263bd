"""The host package installed as a host gets it: the archive put where the copy step puts it, then the
tools step's own script, with the tools' directory moved under a test's temporary directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

# The URN the tools step's advice names for the copy (components/host.py renders the stack's).
ARCHIVE_URN = "urn:pulumi:dev::vllm-fleet::vllm-fleet:index:GpuHost$command:remote:CopyToRemote::sandbox-tools-archive"


def install_host_package(tools_dir: Path) -> subprocess.CompletedProcess[str]:
    """Copy the archive to tools_dir's incoming folder (the tools-archive step's part) and run the tools
    step's script there; the completed process (check=True: a failed install raises)."""
    from render import host_bundle  # imports the program's modules: keep the import out of module scope
    from render.paths import TOOLS_DIR
    from render.steps import tools_script

    incoming = Path(host_bundle.incoming_path().replace(TOOLS_DIR, str(tools_dir), 1))
    incoming.parent.mkdir(parents=True, exist_ok=True)
    incoming.write_bytes(host_bundle.archive())
    script = tools_script(ARCHIVE_URN).replace(TOOLS_DIR, str(tools_dir))
    return subprocess.run(["bash", "-c", script], check=True, capture_output=True, text=True)
