#!/usr/bin/env bash
# vllm-fleet tool prewarm: prewarm.py of this repository, installed as /usr/local/lib/vllm-fleet/prewarm
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<578 lines, 22994 bytes, sha256 e9c57f5ecebe9660363da1b297b566d85807ba00243663bc965b6c5128241be0>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/prewarm
echo "installed /usr/local/lib/vllm-fleet/prewarm"
