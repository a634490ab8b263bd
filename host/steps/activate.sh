#!/usr/bin/env bash
# vllm-fleet activate: make a deployment serve its staged unit (a swap, when the model changed).
#
# The swap itself is host/tools/swap.py, run as a transient systemd unit on the host: it checks everything it
# can while the old model serves, then stops the old units (the deployment's previous unit and the
# hand-made ones it replaces), starts the new one, waits until it serves, and puts the old ones back if
# it does not. Running there, it finishes whatever happens to this SSH session or the controller. This
# step writes the plan, starts the transaction (or attaches to one already running for this
# deployment), shows its journal as it goes and exits with its result; once the deployment serves, it
# prints the post-deploy report (host/status.py, REPORT_ARGS) as one JSON line before the result's.
set -euo pipefail
: "$UNIT_SHA256" # the staged unit this activation is for; its change is what re-runs this step
# Drift repairs: one more than the host's count when the survey found the unit file edited or removed by
# hand, which re-runs this step; the swap then puts the staged unit back.
: "$REPAIRS"

install -d -m 0700 "$STATE_DIR"
printf '%s\n' "$REPAIRS" > "$STATE_DIR/repairs"
printf '%s\n' "$PLAN" > "$STATE_DIR/swap-plan.json.tmp"
mv -f "$STATE_DIR/swap-plan.json.tmp" "$STATE_DIR/swap-plan.json"
exec "$PYTHON" "$TOOLS_DIR/swap" start --plan "$STATE_DIR/swap-plan.json" "${REPORT_ARGS[@]}"
