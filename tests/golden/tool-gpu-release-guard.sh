#!/usr/bin/env bash
# vllm-fleet tool gpu-release-guard: gpu_release_guard.py of this repository, installed as /usr/local/lib/vllm-fleet/gpu-release-guard
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<436 lines, 17918 bytes, sha256 19adffffb719aec14857f53c66fe83f7678ffac0dfb969c835a13baa80a8337e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp /usr/local/lib/vllm-fleet/gpu-release-guard
echo "installed /usr/local/lib/vllm-fleet/gpu-release-guard"
