#!/usr/bin/env bash
# Sourced by every make target and script: one place that says where the engine, state and caches live,
# so nothing depends on what a developer installed by hand.
# shellcheck disable=SC2034
VLLM_FLEET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VLLM_FLEET_ROOT
# Only the engine goes on PATH: the language host runs the program under Pulumi.yaml's `virtualenv`
# (.venv) by itself, so `pulumi` works from any shell. The project's own tools are called as $VENV/NAME.
export PATH="$VLLM_FLEET_ROOT/.tools/bin:$PATH"
VENV="$VLLM_FLEET_ROOT/.venv/bin"
# The full output of each set-up step (scripts/progress.sh shows one line per step; a failure names the log).
VLLM_FLEET_LOGS="$VLLM_FLEET_ROOT/.run/logs"
export PULUMI_HOME="$VLLM_FLEET_ROOT/.tools/pulumi-home"
# What takes minutes to build and depends only on its inputs (the sandbox's base images, keyed by the hash
# of what builds them, and the vLLM wheelhouse, keyed by its pins) lives in one cache for the whole
# machine, so a second checkout (a CI clone) reuses it; builds there are atomic and locked. `make down`
# leaves it alone.
if [ -z "${VLLM_FLEET_CACHE:-}" ]; then
  if [ "$(id -u)" = 0 ]; then VLLM_FLEET_CACHE=/var/cache/vllm-fleet; else VLLM_FLEET_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/vllm-fleet"; fi
fi
export VLLM_FLEET_CACHE
# State: the backend the operator chose (PULUMI_BACKEND_URL, or `pulumi login` under this PULUMI_HOME) is
# kept; otherwise the local folder .state. The dev stack's scripts (make setup/up/down) always use the
# local folder: shared stacks go to a shared backend (docs/state-backend.md).
VLLM_FLEET_DEV_BACKEND_URL="file://$VLLM_FLEET_ROOT/.state"
if [ -z "${PULUMI_BACKEND_URL:-}" ] && ! grep -qs '"current": *"[^"]' "$PULUMI_HOME/credentials.json"; then
  export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"
fi
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=false
# The dev stack's secrets are sandbox-only; prod stacks must get their passphrase from the operator.
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-vllm-fleet-dev-sandbox}"
export HF_HUB_DISABLE_TELEMETRY=1
export HF_HUB_DISABLE_UPDATE_CHECK=1
