"""Who may call a deployment, end to end on the sandbox: API keys and TLS at the front door, /metrics
for listed addresses only, vLLM's development endpoints never proxied, key rotation as two `pulumi up`s
that restart nothing while a client that switches keys sees no failed request, and the keys nowhere but
their 0600 files. The tests run in file order on one stack ("access"), on stand-in GPU 3 and port 8001."""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request

import openai
import pytest
import yaml
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from sandbox.processes import run_captured
from sandbox.sandbox_env import E2E_PORT, on_host
from scripts.api_client import client, tls_context
from scripts.downtime_probe import DowntimeProbe
from tests.support.sandbox_stack import SandboxStack, module_state

STACK = "access"
ENDPOINT = sandbox_env.api_url(E2E_PORT).replace("http://", "https://")
UNIT = "vllm-e2e-tiny-a.service"
CA = sandbox_env.TLS_DIR / "ca.pem"
# Throwaway keys of this test (the secret scan looks for them everywhere).
KEY_A = "test-key-a-3f1c9e27d4b8a6051e2f"
KEY_B = "test-key-b-8d2a61f0c97e4b35a0d4"
OWNER_FILES = "/etc/vllm-fleet/frontdoor"


class Access(SandboxStack):
    def configure(self, keys: dict[str, str]) -> auto.Stack:
        doc = yaml.safe_load(sandbox_env.e2e_stack_file("e2e-tiny-a", gpus=[3], port=E2E_PORT))
        config = doc["config"]
        config["vllm-fleet:deployments"][0].update(bindAddress="0.0.0.0", publicUrl=ENDPOINT)
        # The host itself, by its fabric address: the one place /metrics may be read from.
        sandbox_env.with_tls(config, metrics_from=sandbox_env.FABRIC_ADDRESS)
        return self.select(doc, secrets={"vllm-fleet:apiKeys": json.dumps(keys)})

    def up(self, stack: auto.Stack) -> auto.UpResult:
        return stack.up(on_output=self.output.append, on_error=self.output.append)

    def tear_down(self) -> None:
        with contextlib.suppress(auto.CommandError):
            self.destroy(self.configure({"a": KEY_A}))


access = module_state(lambda tmp: Access(tmp, STACK))


def status_of(path: str, key: str | None = None, method: str = "GET", scheme: str = "https") -> int:
    url = sandbox_env.api_url(E2E_PORT).replace("http://", f"{scheme}://").removesuffix("/v1") + path
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=tls_context(CA)) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def complete(key: str | None) -> str:
    reply = client(ENDPOINT, key, CA, timeout=60, max_retries=0).completions.create(
        model="e2e-tiny-a", prompt="hello", max_tokens=2
    )
    return reply.choices[0].text


def engine_pid() -> str:
    return on_host(f"systemctl show -p MainPID --value {UNIT}").strip()


def test_keys_and_verified_tls_at_the_front_door(access: Access) -> None:
    result = access.up(access.configure({"a": KEY_A}))
    assert result.summary.result == "succeeded"
    # With the key, over TLS verified against the sandbox's CA (host name 127.0.0.1 in the certificate).
    assert isinstance(complete(KEY_A), str)
    # Without a key, with a wrong one: 401 from the front door.
    for key in (None, "not-the-key-0000000000000000"):
        with pytest.raises(openai.AuthenticationError):
            complete(key)
    assert status_of("/v1/models") == 401 and status_of("/v1/models", KEY_B) == 401
    assert status_of("/v1/models", KEY_A) == 200
    # Plain HTTP on the TLS port is refused; a client that does not trust the CA fails the handshake.
    assert status_of("/v1/models", KEY_A, scheme="http") == 400
    with pytest.raises(urllib.error.URLError) as caught:
        urllib.request.urlopen(f"{ENDPOINT}/models", timeout=10, context=ssl.create_default_context())
    assert isinstance(caught.value.reason, ssl.SSLCertVerificationError)
    # vLLM's development endpoints never leave the host, with a key or without.
    for path in ("/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache", "/is_sleeping"):
        assert status_of(path, KEY_A, method="POST") == 404, path
    assert status_of("/health") == 200


def test_metrics_only_from_listed_addresses(access: Access) -> None:
    # This machine reaches the host through its port forwarder, from 127.0.0.1: not listed.
    assert status_of("/metrics", KEY_A) == 403
    on_host(f"printf '%s' '{CA.read_text()}' > /tmp/access-ca.pem")
    url = f"https://{sandbox_env.FABRIC_ADDRESS}:{E2E_PORT}/metrics"
    listed = on_host(f"curl -s -o /dev/null -w '%{{http_code}}' --cacert /tmp/access-ca.pem {url}")
    assert listed == "200", listed
    loopback = on_host(
        f"curl -s -o /dev/null -w '%{{http_code}}' --cacert /tmp/access-ca.pem https://127.0.0.1:{E2E_PORT}/metrics"
    )
    assert loopback == "403", loopback


def test_key_rotation_restarts_nothing_and_fails_no_request(access: Access) -> None:
    pid = engine_pid()
    since = on_host(f"systemctl show -p ActiveEnterTimestampMonotonic --value {UNIT}").strip()
    probe = DowntimeProbe(ENDPOINT, "e2e-tiny-a", timeout=10.0, api_key=KEY_A, ca_file=str(CA)).start()
    try:
        time.sleep(2)
        # 1. Add the new key: only the access step changes.
        stack = access.configure({"a": KEY_A, "b": KEY_B})
        preview = stack.preview(diff=True)
        assert preview.change_summary.get(auto.OpType.UPDATE) == 1, preview.change_summary
        assert "chat-access-files" in preview.stdout
        assert access.up(stack).summary.result == "succeeded"
        assert status_of("/v1/models", KEY_A) == 200 and status_of("/v1/models", KEY_B) == 200
        probe.api_key = KEY_B  # the client moves to its new key
        time.sleep(2)
        # 2. Remove the old key.
        stack = access.configure({"b": KEY_B})
        assert access.up(stack).summary.result == "succeeded"
        assert status_of("/v1/models", KEY_A) == 401 and status_of("/v1/models", KEY_B) == 200
        time.sleep(2)
    finally:
        probe.stop()
    report = probe.report()
    print(f"rotation: {report}")
    assert report["requests"] > 20 and report["failed"] == 0, repr(report)
    assert engine_pid() == pid
    assert on_host(f"systemctl show -p ActiveEnterTimestampMonotonic --value {UNIT}").strip() == since
    stack.preview(expect_no_changes=True)


def test_secrets_appear_nowhere(access: Access) -> None:
    """The API keys and the TLS private key: not in any output (a verbose up included), not in the state's
    plaintext, `ps`, the journal or a unit file; on the host only in the 0600 files of the front door."""
    tls_line = (sandbox_env.TLS_DIR / "server.key").read_text().splitlines()[1]
    stack = access.configure({"b": KEY_B})
    verbose: list[str] = []
    stack.up(on_output=verbose.append, on_error=verbose.append, log_verbosity=9, debug=True, log_to_std_err=True)
    stack.preview(diff=True, on_output=verbose.append, on_error=verbose.append)
    secrets = (KEY_A, KEY_B, tls_line)
    captured = "\n".join([*access.output, *verbose])
    # The state as `pulumi stack export` shows it without --show-secrets (the Automation API's export
    # decrypts secrets).
    exported = run_captured(
        ["pulumi", "stack", "export", "--stack", STACK],
        cwd=access.work,
        env=engine.engine_env(access.backend),
        check=True,
    ).stdout
    assert '"secure"' in exported or "ciphertext" in exported
    state = "\n".join(p.read_text() for p in access.backend.rglob("*.json"))
    for secret in secrets:
        for place, text in (("output", captured), ("export", exported), ("state", state)):
            if secret in text:
                i = text.index(secret)
                print(f"LEAK in {place}: ...{text[max(0, i - 600) : i].replace(secret, '<S>')}<SECRET>")
        assert secret not in captured and secret not in exported and secret not in state
        assert secret not in on_host("ps -eo args")
        assert secret not in on_host("journalctl --no-pager -o cat")
        assert secret not in on_host("cat /etc/systemd/system/*.service /etc/vllm-fleet/*.env 2>/dev/null || true")
    owner = f"{STACK}.chat"
    where = {
        KEY_B: [f"{OWNER_FILES}/keys/{owner}.conf"],
        tls_line: [f"{OWNER_FILES}/access/{owner}/tls.key"],
    }
    for secret, expected in where.items():
        holders = on_host(
            f"grep -rlsF -D skip -e '{secret}' /etc /var /usr/local /shared /root /tmp /run || true"
        ).split()
        assert holders == expected, (secret[:6], holders)
        for holder in holders:
            assert on_host(f"stat -c %a {holder}").strip() == "600", holder
    assert not on_host(f"grep -rlsF -D skip -e '{KEY_A}' /etc /var /usr/local /shared /root /tmp /run || true").split()


def test_destroy_removes_the_access_files(access: Access) -> None:
    stack = access.configure({"b": KEY_B})
    stack.destroy(on_output=access.output.append)
    owner = f"{STACK}.chat"
    assert (
        on_host(f"ls {OWNER_FILES}/access/{owner} {OWNER_FILES}/keys/{owner}.conf 2>&1 || true").count("No such") == 2
    )
    assert not on_host(f"grep -rlsF -D skip -e '{KEY_B}' /etc /var /usr/local /shared /root /tmp /run || true").split()
