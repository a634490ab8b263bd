#!/usr/bin/env bash
# vllm-fleet tool swap: swap.py of this repository, installed as /usr/local/lib/vllm-fleet/swap
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<1158 lines, 52963 bytes, sha256 7cb004c0ed4b83687fdfeaed91c62a5db729dbeba547045462a1e378d10fb463>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp /usr/local/lib/vllm-fleet/swap
echo "installed /usr/local/lib/vllm-fleet/swap"
