#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/prod.primary
readonly PYTHON=/root/ml-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly UNIT_SHA256=0ac4faaa1f17e48be70574fd57ea4cd3e67ed523605b24cd6d9bd7e1bf6e2c2f
readonly REPAIRS=0
readonly PLAN='{
 "access_dir": "/etc/vllm-fleet/frontdoor/access/prod.primary",
 "backend_ports": [
  18000,
  28000
 ],
 "bind_address": "0.0.0.0",
 "deployment": "primary",
 "drain_seconds": 120,
 "foreign_gpu_processes": "refuse",
 "gpus": [
  0,
  1,
  2,
  3,
  4,
  5,
  6,
  7
 ],
 "gpus_needed": 8,
 "journal_lines": 40,
 "keys_file": "/etc/vllm-fleet/frontdoor/keys/prod.primary.conf",
 "load_dir": "/shared/kimi-k2.5-int4",
 "model_dir": "/shared/kimi-k2.5-int4",
 "port": 8000,
 "prewarm_margin_gib": 8.0,
 "python": "/root/ml-env/bin/python3",
 "readiness_address": "127.0.0.1",
 "ready_timeout": 4122,
 "replaces": [],
 "report_every": 15,
 "served_name": "kimi-k2.5-int4",
 "stack": "prod",
 "state_dir": "/var/lib/vllm-fleet/deployments/prod.primary",
 "swap_mode": "auto",
 "tools_dir": "/usr/local/lib/vllm-fleet",
 "unit_name": "vllm-kimi-k25-int4.service",
 "unit_sha256": "0ac4faaa1f17e48be70574fd57ea4cd3e67ed523605b24cd6d9bd7e1bf6e2c2f",
 "unit_stem": "vllm-kimi-k25-int4"
}'
# vllm-fleet activate: make a deployment serve its staged unit (a swap, when the model changed).
#
# The swap itself is host/swap.py, run as a transient systemd unit on the host: it checks everything it
# can while the old model serves, then stops the old units (the deployment's previous unit and the
# hand-made ones it replaces), starts the new one, waits until it serves, and puts the old ones back if
# it does not. Running there, it finishes whatever happens to this SSH session or the controller. This
# step writes the plan, starts the transaction (or attaches to one already running for this
# deployment), shows its journal as it goes and exits with its result.
set -euo pipefail
: "$UNIT_SHA256" # the staged unit this activation is for; its change is what re-runs this step
# Drift repairs: one more than the host's count when the survey found the unit file edited or removed by
# hand, which re-runs this step; the swap then puts the staged unit back.
: "$REPAIRS"

install -d -m 0700 "$STATE_DIR"
printf '%s\n' "$REPAIRS" > "$STATE_DIR/repairs"
printf '%s\n' "$PLAN" > "$STATE_DIR/swap-plan.json.tmp"
mv -f "$STATE_DIR/swap-plan.json.tmp" "$STATE_DIR/swap-plan.json"
exec "$PYTHON" "$TOOLS_DIR/swap" start --plan "$STATE_DIR/swap-plan.json"
