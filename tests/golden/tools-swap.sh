#!/usr/bin/env bash
# vllm-fleet tools (swap): node-watch, prewarm, swap, installed in /usr/local/lib/vllm-fleet
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/node-watch.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<172 lines, 6594 bytes, sha256 21293caeb0a3bcbcfd6f8acb96ad5a65fd4a912c53192d91e7845207827cefa6>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/node-watch.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/node-watch.vllm-fleet-tmp /usr/local/lib/vllm-fleet/node-watch
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
echo "installed 3 vllm-fleet tools in /usr/local/lib/vllm-fleet: node-watch prewarm swap"
