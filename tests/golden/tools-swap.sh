#!/usr/bin/env bash
# vllm-fleet tools (swap): prewarm, swap, installed in /usr/local/lib/vllm-fleet
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<578 lines, 22994 bytes, sha256 e9c57f5ecebe9660363da1b297b566d85807ba00243663bc965b6c5128241be0>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/prewarm
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<1236 lines, 57334 bytes, sha256 a5b617b872b49a12effea2e24b4eabf89b75b0bf716ba9ce35fac282c4b331cf>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp /usr/local/lib/vllm-fleet/swap
echo "installed 2 vllm-fleet tools in /usr/local/lib/vllm-fleet: prewarm swap"
