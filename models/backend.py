"""Where a stack's state lives, and whether that suits the stack's tier. Pure: no resources, no I/O
beyond reading the engine's login file.

A production stack is shared by a team: its state must be in a backend every operator reaches, whose
lock refuses a second `pulumi up` from any machine (PostgreSQL, see docs/state-backend.md).
A local file backend is one checkout's: a second operator would see an empty stack. Such a stack is
refused unless the operator opts out for single-operator use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from models.config import StackTier

# The explicit opt-out: a production stack that one operator alone ever runs may keep local state.
SINGLE_OPERATOR_ENV = "VLLM_FLEET_SINGLE_OPERATOR"
# What the engine uses when no backend is chosen at all.
DEFAULT_BACKEND_URL = "https://api.pulumi.com"
_SECRET_PARAMS = {"password", "sslpassword"}


def current_backend_url(env: Mapping[str, str]) -> str:
    """The backend the engine uses: PULUMI_BACKEND_URL, else the one `pulumi login` stored, else Pulumi Cloud."""
    url = env.get("PULUMI_BACKEND_URL", "")
    if url:
        return url
    home = Path(env["PULUMI_HOME"]) if env.get("PULUMI_HOME") else Path(env.get("HOME", "~")).expanduser() / ".pulumi"
    try:
        current = json.loads((home / "credentials.json").read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        current = None
    return current if isinstance(current, str) and current else DEFAULT_BACKEND_URL


def is_local(url: str) -> bool:
    """A file backend: state in a folder of this machine (`file://...`, or the engine's `--local`)."""
    return url.startswith("file:")


def redact(url: str) -> str:
    """The URL as it may be printed: the password (in the user part or a query parameter) replaced by ****."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//****@", url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:****@{hostport}" if has_password else netloc
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "****" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="/*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def refusal(tier: StackTier, env: Mapping[str, str]) -> str | None:
    """Why this stack must not run on the backend it is on, or None when it may."""
    if tier is not StackTier.PRODUCTION or env.get(SINGLE_OPERATOR_ENV) == "1":
        return None
    url = current_backend_url(env)
    if not is_local(url):
        return None
    return (
        f"vllm-fleet:tier is production, but this stack's state is on the local file backend {redact(url)}: "
        "a second operator would not see it and its lock protects only this machine. Choose a shared backend: "
        "export PULUMI_BACKEND_URL=postgres://ROLE@DBHOST:5432/DATABASE?sslmode=verify-full (password in "
        "~/.pgpass, never in the URL) and move the stack there with `pulumi stack export` / `pulumi stack import` "
        f"(docs/state-backend.md); a stack that only you ever run may set {SINGLE_OPERATOR_ENV}=1 instead"
    )
