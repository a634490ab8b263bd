#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly UNIT_SHA256=d9991fd2e6fd3ab7d2730ce7745e28e644f76a4dce3fb5cc41fcdfa14039e693
readonly REPAIRS=0
readonly PLAN='{
 "access_dir": "/etc/vllm-fleet/frontdoor/access/fleet.across",
 "backend_ports": [
  18002,
  28002
 ],
 "bind_address": "127.0.0.1",
 "deployment": "across",
 "drain_seconds": 120,
 "forecast_basis": "",
 "forecast_made_at": 0.0,
 "forecast_seconds": 0.0,
 "forecast_source": "",
 "foreign_gpu_processes": "refuse",
 "gpus": [
  2
 ],
 "gpus_needed": 1,
 "journal_lines": 40,
 "keys_file": "/etc/vllm-fleet/frontdoor/keys/fleet.across.conf",
 "load_dir": "/shared/tiny-chat-a",
 "model": "tiny-chat-a",
 "model_dir": "/shared/tiny-chat-a",
 "port": 8002,
 "prewarm_margin_gib": 8.0,
 "prewarm_min_resident_share": null,
 "python": "/opt/vllm-env/bin/python3",
 "readiness_address": "127.0.0.1",
 "ready_timeout": 540,
 "replaces": [],
 "report_every": 15,
 "served_name": "across",
 "stack": "fleet",
 "state_dir": "/var/lib/vllm-fleet/deployments/fleet.across",
 "swap_mode": "stop-start",
 "tools_dir": "/usr/local/lib/vllm-fleet",
 "unit_name": "vllm-across.service",
 "unit_sha256": "d9991fd2e6fd3ab7d2730ce7745e28e644f76a4dce3fb5cc41fcdfa14039e693",
 "unit_stem": "vllm-across"
}'
REPORT_ARGS=(--report '{"deployments": [{"bench": null, "deployment": "across", "frontDoor": "http://127.0.0.1:8002", "gpus": [2], "host": {"address": "127.0.0.1", "hostKey": null, "name": "fleet-1", "port": 2231, "user": "root"}, "modelDir": "/shared/tiny-chat-a", "owner": "fleet.across", "python": "/opt/vllm-env/bin/python3", "servedName": "across", "stateDir": "/var/lib/vllm-fleet/deployments/fleet.across", "unit": "vllm-across.service", "unitSha256": "d9991fd2e6fd3ab7d2730ce7745e28e644f76a4dce3fb5cc41fcdfa14039e693"}]}')
readonly REPORT_ARGS
# <the body of host/steps/activate.sh after line 1: 20 lines, 1412 bytes, sha256 479805646b340a860b9ae45c073da332757d9a632a5c53c030b6efb31e9ed236>
