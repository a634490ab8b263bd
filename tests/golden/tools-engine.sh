#!/usr/bin/env bash
# vllm-fleet tools (engine): clean-shm, gpu-release-guard, model-sync, survey, vllm-args-check, wait-ready, installed in /usr/local/lib/vllm-fleet
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<26 lines, 910 bytes, sha256 7238163ca9a3e765bf092f82671f77379d560ca7b41ef50c28c3cff49afd428c>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/clean-shm.vllm-fleet-tmp /usr/local/lib/vllm-fleet/clean-shm
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<436 lines, 17924 bytes, sha256 d3702aa322769d0a8697972fe3471d3a45930384c70cdab31e137330776dbb6d>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/gpu-release-guard.vllm-fleet-tmp /usr/local/lib/vllm-fleet/gpu-release-guard
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<675 lines, 27932 bytes, sha256 34d78cfbf3a8c4347e87638e94debc650fb5904dacd380149fcacfce5bbab15a>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/model-sync.vllm-fleet-tmp /usr/local/lib/vllm-fleet/model-sync
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<229 lines, 9084 bytes, sha256 f14377ccb74d41eb0d03571bcdba3535fd1bd4b0786f44b893970ae021e610b1>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp /usr/local/lib/vllm-fleet/survey
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<151 lines, 6819 bytes, sha256 105876aeab1b83e58f55d2e6e706d96fc439873826df86e980dfdd9e3fdad300>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/vllm-args-check.vllm-fleet-tmp /usr/local/lib/vllm-fleet/vllm-args-check
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<114 lines, 4399 bytes, sha256 6828b83674eba96176cee255caf3770f5a3f912a42f99d7d28e7dc84bc9c9166>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/wait-ready.vllm-fleet-tmp /usr/local/lib/vllm-fleet/wait-ready
echo "installed 6 vllm-fleet tools in /usr/local/lib/vllm-fleet: clean-shm gpu-release-guard model-sync survey vllm-args-check wait-ready"
