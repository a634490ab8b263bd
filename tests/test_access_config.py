"""The access configuration: API keys validated without showing them, the production rule (a non-loopback
address needs keys unless the stack says it is open), the rendered front door files, and the swap's site."""

from __future__ import annotations

import json
from typing import Any

import pytest

from host import contract, front_door
from models.access import Access, access_problems, parse_api_keys
from models.loader import ConfigError, parse_stack_config
from render.access import keys_map, metrics_conf, server_conf
from tests.support.pulumi_mocks import run_program

SECRET = "s3cret-key-value-0123456789"


def test_api_keys_parse_from_an_object_or_its_json() -> None:
    assert parse_api_keys({"alice": SECRET}) == {"alice": SECRET}
    assert parse_api_keys(json.dumps({"alice": SECRET, "bob": "x" * 16})) == {"alice": SECRET, "bob": "x" * 16}
    assert parse_api_keys(None) == {}


@pytest.mark.parametrize(
    "keys", [{"alice": "short"}, {"alice": "has space in it 123456"}, {"Alice": SECRET}, {"a": SECRET, "b": SECRET}]
)
def test_bad_api_keys_are_refused_without_showing_the_key(keys: dict[str, str]) -> None:
    with pytest.raises(ValueError) as caught:
        parse_api_keys(keys)
    assert SECRET not in str(caught.value) and "has space" not in str(caught.value)


def test_production_on_a_public_address_needs_keys_or_says_it_is_open() -> None:
    errors, _ = access_problems(Access(), "production", {"primary": "0.0.0.0"}, 0, False)
    assert len(errors) == 1 and "vllm-fleet:apiKeys" in errors[0] and "access.open: true" in errors[0]
    # The entry's key first, as every config error: the second deployment is deployments[1].
    errors, warnings = access_problems(Access(), "production", {"local": "127.0.0.1", "primary": "0.0.0.0"}, 0, False)
    assert errors[0].startswith("vllm-fleet:deployments[1].bindAddress: deployment 'primary' listens on 0.0.0.0")
    assert warnings[0].startswith("vllm-fleet:deployments[1].bindAddress: deployment 'primary'")
    assert access_problems(Access(), "production", {"primary": "0.0.0.0"}, 1, False)[0] == []
    assert access_problems(Access(open=True), "production", {"primary": "0.0.0.0"}, 0, False)[0] == []
    assert access_problems(Access(), "production", {"primary": "127.0.0.1"}, 0, False) == ([], [])
    # Development: a warning, not a refusal.
    errors, warnings = access_problems(Access(), "development", {"chat": "0.0.0.0"}, 0, False)
    assert errors == [] and len(warnings) == 1
    assert access_problems(Access(open=True), "production", {"p": "0.0.0.0"}, 2, False)[0]  # open and keys


def test_prod_preview_without_keys_is_refused(prod_raw: dict[str, Any]) -> None:
    prod_raw["apiKeys"] = "{}"
    # Pulumi.prod.yaml says open explicitly (its clients send no key today); without that line it is refused.
    assert prod_raw["access"] == {"open": True}
    del prod_raw["access"]
    with pytest.raises(Exception, match="no API key is set"):
        run_program("prod", prod_raw)
    prod_raw["access"] = {"open": True}
    run_program("prod", prod_raw)


def test_access_key_is_validated(dev_raw: dict[str, Any]) -> None:
    dev_raw["access"] = {"metricsFrom": ["10.0.0.0/24", "not-an-address"]}
    with pytest.raises(ConfigError, match="not-an-address"):
        parse_stack_config(dev_raw)
    dev_raw["access"] = {"tls": {"certificateFile": "cert.pem"}, "opn": True}
    with pytest.raises(ConfigError, match=r"vllm-fleet:access.opn: unknown key"):
        parse_stack_config(dev_raw)


def test_plaintext_api_keys_are_refused(dev_raw: dict[str, Any]) -> None:
    dev_raw["apiKeys"] = {"alice": SECRET}
    with pytest.raises(ConfigError, match="vllm-fleet:apiKeys: stored in plaintext"):
        parse_stack_config(dev_raw)
    dev_raw["apiKeys"] = {"alice": {"secure": "v1:abc"}}  # `pulumi config set --secret --path`
    parse_stack_config(dev_raw)


def test_rendered_access_files(dev_raw: dict[str, Any]) -> None:
    dev_raw["access"] = {"tls": {"certificateFile": "cert.pem"}, "metricsFrom": ["10.1.2.3"]}
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    server = server_conf(rd, "dev")
    assert "listen 127.0.0.1:8000 ssl;" in server and "ssl_protocols TLSv1.2 TLSv1.3;" in server
    assert metrics_conf(rd, "dev").endswith("allow 10.1.2.3/32;\ndeny all;\n")
    keys = keys_map("dev", "chat", {"alice": "a.b-c_d0123456789xyz"}, open_access=False)
    assert '"~^Bearer a[.]b-c_d0123456789xyz$" 1;  # alice' in keys and "default 0;" in keys
    assert "default 1;" in keys_map("dev", "chat", {}, open_access=True)
    # The swap reads one key back from the map for its check through the front door.
    assert front_door.first_key(keys) == "a.b-c_d0123456789xyz"
    assert front_door.first_key(keys_map("dev", "chat", {}, open_access=True)) is None


def test_site_includes_the_access_files_and_proxies_only_the_api() -> None:
    plan = contract.Plan(
        stack="dev", deployment="chat", state_dir="/s", unit_name="vllm-a.service", unit_stem="vllm-a",
        served_name="chat", port=8000, gpus=(0,), model_dir="/m", python="/p", tools_dir="/t",
        ready_timeout=60, unit_sha256="x", backend_ports=(18000, 28000),
        access_dir="/etc/vllm-fleet/frontdoor/access/dev.chat", keys_file="/k",
    )  # fmt: skip
    site = front_door.front_door_site(plan, contract.Placement((0,), 18000))
    assert "include /etc/vllm-fleet/frontdoor/access/dev.chat/server.conf;" in site
    assert "listen" not in site  # the address and TLS are the access step's
    assert "location /v1/ {\n        include /etc/vllm-fleet/frontdoor/access/dev.chat/api.conf;" in site
    assert "location = /metrics {\n        include /etc/vllm-fleet/frontdoor/access/dev.chat/metrics.conf;" in site
    assert "location / {\n        return 404;\n    }" in site
    assert site.count("proxy_pass http://127.0.0.1:18000;") == 3
