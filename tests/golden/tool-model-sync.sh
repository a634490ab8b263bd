#!/usr/bin/env bash
# vllm-fleet tool model-sync: model_sync.py of this repository, installed as /usr/local/lib/vllm-fleet/model-sync
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<655 lines, 26753 bytes, sha256 339806c9e3736297eed61c34f3e834726738e080d79e12a4c87f9ac4da5a3d2e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
echo "installed /usr/local/lib/vllm-fleet/model-sync"
