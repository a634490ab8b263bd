#!/usr/bin/env bash
# vllm-fleet tool model-sync: model_sync.py of this repository, installed as /usr/local/lib/vllm-fleet/model-sync
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<650 lines, 26315 bytes, sha256 a729bda7981b143b3838e5824facab4527ffaeece44149601faa7500938a931e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
echo "installed /usr/local/lib/vllm-fleet/model-sync"
