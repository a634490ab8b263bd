#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/prod.primary
readonly PYTHON=/root/ml-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly UNIT_SHA256=4b1d6c4e6513dfd9967f41ce30a80bfd02ac80c9c20543100ce169f282ef758f
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
 "forecast_basis": "",
 "forecast_made_at": 0.0,
 "forecast_seconds": 0.0,
 "forecast_source": "",
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
 "model": "kimi-k2.5-int4",
 "model_dir": "/shared/kimi-k2.5-int4",
 "port": 8000,
 "prewarm_margin_gib": 8.0,
 "prewarm_min_resident_share": null,
 "python": "/root/ml-env/bin/python3",
 "readiness_address": "127.0.0.1",
 "ready_timeout": 4122,
 "replaces": [
  "vllm-kimi-k25-int4.service",
  "vllm-glm5.service",
  "vllm-kimi-k25.service",
  "vllm-minimax-m25.service"
 ],
 "report_every": 15,
 "served_name": "kimi-k2.5-int4",
 "stack": "prod",
 "state_dir": "/var/lib/vllm-fleet/deployments/prod.primary",
 "swap_mode": "auto",
 "tools_dir": "/usr/local/lib/vllm-fleet",
 "unit_name": "vllm-kimi-k25-int4.service",
 "unit_sha256": "4b1d6c4e6513dfd9967f41ce30a80bfd02ac80c9c20543100ce169f282ef758f",
 "unit_stem": "vllm-kimi-k25-int4"
}'
REPORT_ARGS=(--report '{"deployments": [{"bench": null, "deployment": "primary", "frontDoor": "http://127.0.0.1:8000", "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "host": {"address": "10.40.0.11", "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF/YMcoT532LXfUQvgXIcTEcumoFw1vI6JkD8tNza+8P placeholder-not-the-servers-key", "name": "gpu-01", "port": 22, "user": "root"}, "modelDir": "/shared/kimi-k2.5-int4", "owner": "prod.primary", "python": "/root/ml-env/bin/python3", "servedName": "kimi-k2.5-int4", "stateDir": "/var/lib/vllm-fleet/deployments/prod.primary", "unit": "vllm-kimi-k25-int4.service", "unitSha256": "4b1d6c4e6513dfd9967f41ce30a80bfd02ac80c9c20543100ce169f282ef758f"}]}')
readonly REPORT_ARGS
# <the body of host/steps/activate.sh after line 1: 20 lines, 1412 bytes, sha256 479805646b340a860b9ae45c073da332757d9a632a5c53c030b6efb31e9ed236>
