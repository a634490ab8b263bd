"""The OpenAI client as this project's scripts and tests use it against a deployment's front door: its
API key (`Authorization: Bearer`), and TLS verified against a CA file (the sandbox's throwaway CA) or
the system's trust store; never without verification."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

from openai import DefaultHttpxClient, OpenAI

from scripts.pulumi_cli import pulumi

ROOT = Path(__file__).resolve().parent.parent
SANDBOX_CA = ROOT / ".sandbox" / "tls" / "ca.pem"


def tls_context(ca_file: str | Path | None = None) -> ssl.SSLContext:
    """Chain and host name verified: against `ca_file`, or the system's CAs."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)


def default_ca_file(url: str) -> Path | None:
    """The sandbox's CA for an https endpoint on this machine when it exists; else the system's CAs."""
    local = url.startswith(("https://127.0.0.1", "https://localhost", "https://[::1]"))
    return SANDBOX_CA if local and SANDBOX_CA.is_file() else None


def client(base_url: str, api_key: str | None = None, ca_file: str | Path | None = None, **options: Any) -> OpenAI:
    http = DefaultHttpxClient(verify=tls_context(ca_file)) if base_url.startswith("https://") else None
    # The OpenAI client wants some key; an open deployment's front door does not look at it.
    return OpenAI(base_url=base_url, api_key=api_key or "none", http_client=http, **options)


def stack_api_key(stack: str, client_name: str | None = None) -> str | None:
    """A client's key from the stack's `vllm-fleet:apiKeys` secret (decrypted by the engine), or None
    when the stack has none. It goes from the engine's stdout into this process only."""
    result = pulumi("config", "get", "vllm-fleet:apiKeys", "--json", "--stack", stack)
    if result.returncode != 0:
        return None
    value = json.loads(result.stdout)
    keys = value.get("value", value) if isinstance(value, dict) else value
    if isinstance(keys, str):
        keys = json.loads(keys)
    if not isinstance(keys, dict) or not keys:
        return None
    name = client_name or sorted(keys)[0]
    key = keys.get(name)
    return str(key) if key is not None else None
