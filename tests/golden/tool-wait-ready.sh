#!/usr/bin/env bash
# vllm-fleet tool wait-ready: wait_ready.py of this repository, installed as /usr/local/lib/vllm-fleet/wait-ready
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<114 lines, 4399 bytes, sha256 6828b83674eba96176cee255caf3770f5a3f912a42f99d7d28e7dc84bc9c9166>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp /usr/local/lib/vllm-fleet/wait-ready
echo "installed /usr/local/lib/vllm-fleet/wait-ready"
