#!/usr/bin/env bash
# vllm-fleet tool model-sync: model_sync.py of this repository, installed as /usr/local/lib/vllm-fleet/model-sync
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<655 lines, 26808 bytes, sha256 7ba832df3e91dd6125d633e73bcaf411f35b64d282c5d4bcf6c4353f545ae0f7>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
echo "installed /usr/local/lib/vllm-fleet/model-sync"
