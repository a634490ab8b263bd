#!/usr/bin/env bash
# vllm-fleet tool model-sync: model_sync.py of this repository, installed as /usr/local/lib/vllm-fleet/model-sync
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<659 lines, 26977 bytes, sha256 84a644f8ff9d10a37a81cd5990576e0de43dec78e21cea2df1646db14c1255aa>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
echo "installed /usr/local/lib/vllm-fleet/model-sync"
