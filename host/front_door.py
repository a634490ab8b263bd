"""The deployment's site in the front door (nginx): where it listens, which engine it passes requests to,
and the first API key of its map (the swap's check through the public port uses one). Pure functions of
the plan and the placement; the swap writes the text and reloads nginx. Standard library only."""

from __future__ import annotations

import re

from host.contract import BACKEND_HEADER, Placement, Plan


def nginx_listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


# What the front door passes to the engine: the OpenAI API, its health and (to listed addresses) its
# metrics. Nothing else: vLLM's development endpoints (sleep, wake_up, collective_rpc, ...) stay on the host.
PROXIED_LOCATIONS = (("/v1/", "api.conf"), ("= /health", None), ("= /metrics", "metrics.conf"))
# vLLM's runtime LoRA endpoints live under /v1/ but load code paths from the host's disk: only the
# adapters step calls them, on the engine's loopback port. Exact matches win over the /v1/ prefix, and
# they answer before any key check, so a caller learns nothing either way.
ENGINE_ONLY = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
_ENGINE_ONLY_BLOCKS = "".join(f"    location = {path} {{\n        return 404;\n    }}\n" for path in ENGINE_ONLY)


# How long a client told "503, the model is being swapped" should wait before it asks again.
RETRY_AFTER_SECONDS = 10


def front_door_site(plan: Plan, placement: Placement | None, backend: str | None = None) -> str:
    """The deployment's server block: its public address and port, passed to the engine that serves now.
    With no placement (a stop-then-start swap between its stop and its start) it answers 503 with
    Retry-After, so no request reaches an engine that is stopping (vLLM holds a request caught by its
    shutdown until its graceful timeout, ~10 s) and clients are told, not hung.

    With access control (plan.access_dir) the address, TLS, key check and /metrics allow list are files
    the site includes, which the access step rewrites without the site (or the engine) changing.

    `backend`: the unit the placement's engine runs in, which the answers' header names (the deployment's
    unit, or the bridge that serves while it restarts)."""
    if placement is None:
        proxy = f"        add_header Retry-After {RETRY_AFTER_SECONDS} always;\n        return 503;\n"
    else:
        proxy = (
            f"        proxy_pass http://127.0.0.1:{placement.port};\n"
            "        proxy_set_header Host $host;\n"
            '        proxy_set_header Connection "";\n'
            f"        add_header {BACKEND_HEADER} {backend or plan.unit_name} always;\n"
        )
    if plan.access_dir:
        text = (
            f"# Managed by vllm-fleet: front door of deployment {plan.owner}, written by its swap.\n"
            f"# Who may call it (address, TLS, API keys, /metrics): {plan.access_dir}, written by its access step.\n"
            "server {\n"
            f"    include {plan.access_dir}/server.conf;\n" + _ENGINE_ONLY_BLOCKS
        )
        for location, include in PROXIED_LOCATIONS:
            text += f"    location {location} {{\n"
            if include is not None:
                text += f"        include {plan.access_dir}/{include};\n"
            text += proxy + "    }\n"
        return (
            text
            + "    # Every other path, vLLM's development endpoints among them, stays on the host.\n    location / {\n        return 404;\n    }\n}\n"
        )
    return (
        f"# Managed by vllm-fleet: front door of deployment {plan.owner}, written by its swap.\n"
        "server {\n"
        f"    listen {nginx_listen(plan.bind_address, plan.port)};\n" + _ENGINE_ONLY_BLOCKS + "    location / {\n"
        f"{proxy}"
        "    }\n"
        "}\n"
    )


_MAP_KEY = re.compile(r'^\s*"~\^Bearer ([A-Za-z0-9_\[\].-]+)\$"\s+1;', re.M)


def first_key(keys_map: str) -> str | None:
    """One accepted API key from a deployment's keys' map (render/access.py), for the check
    through the front door; None when the map lists none (an open deployment)."""
    match = _MAP_KEY.search(keys_map)
    return match.group(1).replace("[.]", ".") if match else None
