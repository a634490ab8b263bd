#!/usr/bin/env bash
# vllm-fleet tool clean-shm: clean-shm.sh of this repository, installed as /usr/local/lib/vllm-fleet/clean-shm
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<26 lines, 910 bytes, sha256 7238163ca9a3e765bf092f82671f77379d560ca7b41ef50c28c3cff49afd428c>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/clean-shm
echo "installed /usr/local/lib/vllm-fleet/clean-shm"
