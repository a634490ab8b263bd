#!/usr/bin/env bash
# vllm-fleet tool model-sync: model_sync.py of this repository, installed as /usr/local/lib/vllm-fleet/model-sync
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<421 lines, 16529 bytes, sha256 f10d64025890d05657cf639a835e1c221f152fed247a634a51d9220dd2169d9e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
echo "installed /usr/local/lib/vllm-fleet/model-sync"
