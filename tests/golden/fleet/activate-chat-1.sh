#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.chat-1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly UNIT_SHA256=fab81f238e6c6f5006d5f9a80f090cc5dc1ddc47c5bea7c2c498c7d77fdf2e48
readonly REPAIRS=0
readonly PLAN='{
 "access_dir": "/etc/vllm-fleet/frontdoor/access/fleet.chat-1",
 "backend_ports": [
  18000,
  28000
 ],
 "bind_address": "127.0.0.1",
 "deployment": "chat-1",
 "drain_seconds": 120,
 "forecast_basis": "",
 "forecast_made_at": 0.0,
 "forecast_seconds": 0.0,
 "forecast_source": "",
 "foreign_gpu_processes": "refuse",
 "gpus": [
  0,
  1
 ],
 "gpus_needed": 1,
 "journal_lines": 40,
 "keys_file": "/etc/vllm-fleet/frontdoor/keys/fleet.chat-1.conf",
 "load_dir": "/shared/tiny-chat-a",
 "model": "tiny-chat-a",
 "model_dir": "/shared/tiny-chat-a",
 "port": 8000,
 "prewarm_margin_gib": 8.0,
 "prewarm_min_resident_share": null,
 "python": "/opt/vllm-env/bin/python3",
 "readiness_address": "127.0.0.1",
 "ready_timeout": 540,
 "replaces": [],
 "report_every": 15,
 "served_name": "chat",
 "stack": "fleet",
 "state_dir": "/var/lib/vllm-fleet/deployments/fleet.chat-1",
 "swap_mode": "auto",
 "tools_dir": "/usr/local/lib/vllm-fleet",
 "unit_name": "vllm-tiny-chat-a.service",
 "unit_sha256": "fab81f238e6c6f5006d5f9a80f090cc5dc1ddc47c5bea7c2c498c7d77fdf2e48",
 "unit_stem": "vllm-tiny-chat-a"
}'
REPORT_ARGS=(--report '{"deployments": [{"bench": null, "deployment": "chat-1", "frontDoor": "http://127.0.0.1:8000", "gpus": [0, 1], "host": {"address": "127.0.0.1", "hostKey": null, "name": "fleet-1", "port": 2231, "user": "root"}, "modelDir": "/shared/tiny-chat-a", "owner": "fleet.chat-1", "python": "/opt/vllm-env/bin/python3", "servedName": "chat", "stateDir": "/var/lib/vllm-fleet/deployments/fleet.chat-1", "unit": "vllm-tiny-chat-a.service", "unitSha256": "fab81f238e6c6f5006d5f9a80f090cc5dc1ddc47c5bea7c2c498c7d77fdf2e48"}]}')
readonly REPORT_ARGS
# <the body of host/steps/activate.sh after line 1: 20 lines, 1412 bytes, sha256 479805646b340a860b9ae45c073da332757d9a632a5c53c030b6efb31e9ed236>
