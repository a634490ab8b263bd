"""sandbox/host.sh builds from the Debian mirror this machine's apt uses (or VLLM_FLEET_DEBIAN_MIRROR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.processes import run_captured

HOST_SH = Path(__file__).resolve().parents[1] / "host.sh"


def mirror_of(root: Path) -> str:
    """apt_debian_mirror of host.sh, run on its own against a made-up /etc/apt under `root`."""
    function = run_captured(["sed", "-n", "/^apt_debian_mirror()/,/^}/p", str(HOST_SH)], check=True).stdout
    assert function, "host.sh has no apt_debian_mirror"
    return run_captured(
        ["bash", "-c", f'{function}\napt_debian_mirror "$1"', "-", str(root)], check=True
    ).stdout.strip()


def write(root: Path, name: str, text: str) -> None:
    path = root / "etc/apt" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


DEB822 = """Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://mirror.example/debian/ http://second.example/debian
Suites: bookworm bookworm-updates
Components: main
"""


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("sources.list.d/debian.sources", DEB822, "http://mirror.example/debian"),
        (
            "sources.list",
            "# comment\ndeb http://security.example/debian-security bookworm-security main\n"
            "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n",
            "http://mirror.example/debian",
        ),
        (
            "sources.list.d/debian.sources",
            "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n",
            "",
        ),
    ],
)
def test_the_mirror_comes_from_apt(tmp_path: Path, name: str, text: str, expected: str) -> None:
    write(tmp_path, name, text)
    assert mirror_of(tmp_path) == expected


def test_no_apt_sources_means_no_mirror_and_host_sh_falls_back(tmp_path: Path) -> None:
    assert mirror_of(tmp_path) == ""
    assert 'DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"' in HOST_SH.read_text()
