#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
# vllm-fleet host tools: the GPU-release guard, readiness check, model verifier and /dev/shm cleaner
# that units and steps call on the host. The files follow this header; each is written atomically.
set -euo pipefail

install -d -m 0755 "$TOOLS_DIR"
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<26 lines, 910 bytes, sha256 7238163ca9a3e765bf092f82671f77379d560ca7b41ef50c28c3cff49afd428c>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/clean-shm
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<436 lines, 17918 bytes, sha256 19adffffb719aec14857f53c66fe83f7678ffac0dfb969c835a13baa80a8337e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp /usr/local/lib/vllm-fleet/gpu-release-guard
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<421 lines, 16529 bytes, sha256 f10d64025890d05657cf639a835e1c221f152fed247a634a51d9220dd2169d9e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<578 lines, 22994 bytes, sha256 e9c57f5ecebe9660363da1b297b566d85807ba00243663bc965b6c5128241be0>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/prewarm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/prewarm
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<218 lines, 8481 bytes, sha256 54357a5bb8a2d2e5e9e75ca69b9bb1ba82547c303627545a59e56deb31608836>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp /usr/local/lib/vllm-fleet/survey
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<1158 lines, 52963 bytes, sha256 7cb004c0ed4b83687fdfeaed91c62a5db729dbeba547045462a1e378d10fb463>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/swap.vllm-fleet-tmp /usr/local/lib/vllm-fleet/swap
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<148 lines, 6559 bytes, sha256 1caf804a5907589fee18db63c826840a548e33a9b819ec057905407a1a4c420e>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp /usr/local/lib/vllm-fleet/vllm-args-check
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<114 lines, 4399 bytes, sha256 6828b83674eba96176cee255caf3770f5a3f912a42f99d7d28e7dc84bc9c9166>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp /usr/local/lib/vllm-fleet/wait-ready
echo "installed 8 vllm-fleet tools in /usr/local/lib/vllm-fleet"
