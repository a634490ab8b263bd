#!/usr/bin/env bash
# vllm-fleet tool vllm-args-check: vllm_args_check.py of this repository, installed as /usr/local/lib/vllm-fleet/vllm-args-check
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<148 lines, 6559 bytes, sha256 1caf804a5907589fee18db63c826840a548e33a9b819ec057905407a1a4c420e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp /usr/local/lib/vllm-fleet/vllm-args-check
echo "installed /usr/local/lib/vllm-fleet/vllm-args-check"
