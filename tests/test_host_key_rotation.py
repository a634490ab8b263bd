"""A host whose SSH key comes from a known_hosts file beside the stack file, end to end on the test host:
it deploys with that key pinned; once the server's key is replaced, the preview refuses the host naming it
and the fix; after the fix (the message's own `ssh-keygen -R` and `ssh-keyscan` commands, run as they are),
the preview says "host key changed" and the `up` updates the host's steps, none replaced, while nothing on
the host changes: the same engine process serves, its unit file is the same. The tests run in file order
and share one stack; the host gets its own key back at the end."""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.sandbox_env import TEST_HOST, exec_on
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "host-key"
MODELS = sandbox_env.tiny_models("hk", keep=False)
UNIT = "vllm-hk-tiny-a.service"
KNOWN_HOSTS = f"known_hosts.{STACK}"
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
BACKUP = "/root/.vllm-fleet-test-host-key"


def stack_file() -> str:
    """The single-host e2e stack (its own model, GPU 3, port 8001) with its key from the file beside it."""
    document = yaml.safe_load(sandbox_env.e2e_stack_file("hk-tiny-a", extra_models=MODELS))
    config = document["config"]
    config["vllm-fleet:models"] = MODELS
    config["vllm-fleet:knownHostsFile"] = KNOWN_HOSTS
    return yaml.safe_dump(document, sort_keys=False)


def main_pid() -> str:
    # Over nsenter: while the server's key is not the file's, ssh (host.sh's too) refuses it.
    return exec_on(TEST_HOST, f"systemctl show -p MainPID --value {UNIT}").strip()


def unit_digest() -> str:
    return exec_on(TEST_HOST, f"sha256sum /etc/systemd/system/{UNIT}").split()[0]


def replace_host_key() -> str:
    """A new ed25519 key for the server (the old one kept aside, as a rotation would not): its public line."""
    with tempfile.TemporaryDirectory() as scratch:
        key = Path(scratch) / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rotated", "-f", str(key)], check=True)
        private, public = key.read_text(), key.with_suffix(".pub").read_text()
    exec_on(
        TEST_HOST,
        f"test -e {BACKUP} || cp -p {HOST_KEY} {BACKUP} && cp -p {HOST_KEY}.pub {BACKUP}.pub; "
        f"printf %s {shlex.quote(private)} > {HOST_KEY} && printf %s {shlex.quote(public)} > {HOST_KEY}.pub && "
        "systemctl restart ssh.service",
    )
    return public


def restore_host_key() -> None:
    exec_on(
        TEST_HOST,
        f"if test -e {BACKUP}; then mv -f {BACKUP} {HOST_KEY} && mv -f {BACKUP}.pub {HOST_KEY}.pub && "
        "systemctl restart ssh.service; fi",
    )


class Rotation(SandboxStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK)
        # The refusal's two commands that fix the file (ssh-keygen -R, ssh-keyscan), as it wrote them.
        self.fix: list[str] = []

    @property
    def known_hosts(self) -> Path:
        return self.work / KNOWN_HOSTS

    def set_up(self) -> None:
        # The test host's keys, as sandbox/host.sh wrote them (`[127.0.0.1]:PORT TYPE KEY`), beside the stack.
        self.known_hosts.write_text((sandbox_env.state_dir(TEST_HOST) / "ssh" / "known_hosts").read_text())
        self.stack = self.select(stack_file())

    def tear_down(self) -> None:
        # The state pins the key of the last up: the rotated one once the fix ran, else the host's own.
        try:
            self.destroy(self.stack)
        except auto.CommandError:
            restore_host_key()
            self.known_hosts.write_text((sandbox_env.state_dir(TEST_HOST) / "ssh" / "known_hosts").read_text())
            self.destroy(self.stack, continue_on_error=True)
        finally:
            restore_host_key()
        assert sandbox_env.on_host(f"ls /etc/systemd/system/{UNIT} 2>/dev/null || true").strip() == ""


rotation = module_state(Rotation)


def test_deploys_with_the_key_from_the_file(rotation: Rotation) -> None:
    rotation.up_succeeds()
    assert exec_on(TEST_HOST, f"systemctl is-active {UNIT}").strip() == "active"
    # The preflight recorded the key this stack's steps pinned: the host's ed25519 key from the file.
    own = exec_on(TEST_HOST, f"ssh-keygen -lf {HOST_KEY}.pub").split()[1]
    assert exec_on(TEST_HOST, f"cat /var/lib/vllm-fleet/host-keys/{STACK}").strip() == own


def test_a_changed_key_is_refused_naming_the_host_and_the_fix(rotation: Rotation) -> None:
    pid = main_pid()
    replace_host_key()
    # Every preview reads the host (controller/survey.py): the first run after the rotation refuses it.
    with pytest.raises(auto.CommandError) as refused:
        rotation.stack.preview()
    message = " ".join(str(refused.value).split())
    port = sandbox_env.SSH_PORT
    assert f"host 'sandbox' (root@127.0.0.1:{port}): its SSH host key changed: it showed the ED25519 key" in message
    assert f"`ssh-keygen -R '[127.0.0.1]:{port}' -f {rotation.known_hosts}`" in message
    assert f"`ssh-keyscan -t ed25519 -p {port} 127.0.0.1 >> {rotation.known_hosts}`" in message
    assert main_pid() == pid
    rotation.fix = list(re.findall(r"run `([^`]+)`.*?then `([^`]+)`", message)[0])


def test_after_the_fix_the_up_changes_nothing_on_the_host(rotation: Rotation) -> None:
    pid, digest = main_pid(), unit_digest()
    # The fix, as the refusal wrote it: the host's old lines out, the key it shows now in.
    assert len(rotation.fix) == 2, "the refusal's fix was not read"
    for command in rotation.fix:
        subprocess.run(command, shell=True, check=True, capture_output=True)
    assert rotation.known_hosts.read_text().count(f"[127.0.0.1]:{sandbox_env.SSH_PORT} ") == 1
    preview = rotation.stack.preview(on_output=rotation.output.append)
    assert "host 'sandbox': host key changed: its steps pinned SHA256:" in " ".join(rotation.log().split())
    # Each step of the host updates (a new connection); none is created, deleted or replaced.
    assert set(preview.change_summary) <= {"update", "same"}, preview.change_summary
    started = time.monotonic()
    result = rotation.up_succeeds()
    seconds = time.monotonic() - started
    changes: dict[str, int] = {
        str(getattr(op, "value", op)): n for op, n in (result.summary.resource_changes or {}).items()
    }
    assert set(changes) <= {"update", "same"} and changes.get("update", 0) >= 8, changes
    # Nothing changed on the host: the same engine serves from the same unit, and the swap found nothing to do.
    assert main_pid() == pid and unit_digest() == digest
    assert f"{UNIT} already serves" in rotation.log()
    sandbox_env.record_phase("host_key_rotation", {"up_s": round(seconds, 1), "changes": changes})
