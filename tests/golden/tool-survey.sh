#!/usr/bin/env bash
# vllm-fleet tool survey: survey.py of this repository, installed as /usr/local/lib/vllm-fleet/survey
set -euo pipefail
install -d -m 0755 /usr/local/lib/vllm-fleet
cat > /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
<218 lines, 8481 bytes, sha256 54357a5bb8a2d2e5e9e75ca69b9bb1ba82547c303627545a59e56deb31608836>
VLLM_FLEET_EOF
chmod 0755 /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp
mv -f /usr/local/lib/vllm-fleet/survey.vllm-fleet-tmp /usr/local/lib/vllm-fleet/survey
echo "installed /usr/local/lib/vllm-fleet/survey"
