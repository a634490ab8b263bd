#!/usr/bin/env bash
# vllm-fleet stage.sh: parameters rendered from the stack config
readonly DEPLOYMENT=across.node1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly UNIT_NAME=vllm-across-node1.service
readonly UNIT_STEM=vllm-across-node1
# shellcheck disable=SC2016  # data, never expanded
readonly UNIT_TEXT='# Managed by vllm-fleet: stack fleet, deployment across, node 1 of 2. `pulumi up`
# overwrites this file; change Pulumi.fleet.yaml instead.
[Unit]
Description=vLLM headless engine of tiny-chat-a for deployment across (node 1 of 2; the API is on fleet-1)
Documentation=https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=root
WorkingDirectory=/var/lib/vllm-fleet/deployments/fleet.across.node1
Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID
Environment=CUDA_VISIBLE_DEVICES=2
Environment=GLOO_SOCKET_IFNAME=fabric0
Environment=HF_HOME=/shared/huggingface
Environment=HF_HUB_DISABLE_TELEMETRY=1
Environment=HF_HUB_OFFLINE=1
Environment=NCCL_SOCKET_IFNAME=fabric0
Environment=TRANSFORMERS_CACHE=/shared/huggingface/hub
Environment=VLLM_CPU_KVCACHE_SPACE=1
Environment=VLLM_CPU_OMP_THREADS_BIND=nobind
Environment=VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=60
Environment=VLLM_HOST_IP=10.77.0.12
Environment=VLLM_NO_USAGE_STATS=1
CacheDirectory=vllm-fleet/fleet.across
Environment=VLLM_CACHE_ROOT=/var/cache/vllm-fleet/fleet.across
# Secrets (the Hugging Face token) live in a root-only 0600 file, never in this world-readable unit.
EnvironmentFile=-/etc/vllm-fleet/vllm-across-node1.env
# The same checks as the head'"'"'s unit: model files unchanged since verified, this node'"'"'s GPUs released
# (stray holders stopped), stale shared-memory segments gone.
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/model-sync check --dir /shared/tiny-chat-a
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/gpu-release-guard --gpus 2 --threshold-mib 1000 --timeout 120 --unit vllm-across-node1.service --foreign refuse
ExecStartPre=/usr/local/lib/vllm-fleet/clean-shm
ExecStart=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/node-watch --head 10.77.0.11 --grace 10 -- /opt/vllm-env/bin/python3 -m vllm.entrypoints.cli.main serve --model /shared/tiny-chat-a --tensor-parallel-size 1 --pipeline-parallel-size 2 --max-model-len 512 --gpu-memory-utilization 0.9 --nnodes 2 --master-addr 10.77.0.11 --master-port 29578 --dtype float32 --compilation-config "{\"mode\": 2, \"backend\": \"eager\"}" --node-rank 1 --headless
ExecStopPost=/usr/local/lib/vllm-fleet/clean-shm
TimeoutStartSec=480
TimeoutStopSec=120
KillMode=control-group
KillSignal=SIGTERM
SendSIGKILL=yes
# A headless engine does not notice that its head died and the next head cannot use it: node-watch (the
# main process, the engine its child) ends it once it lost the head, and systemd starts a fresh one
# that waits for the next head at the master address.
Restart=always
RestartSec=5
LimitNOFILE=65536
LimitMEMLOCK=infinity
SyslogIdentifier=vllm-across-node1

[Install]
WantedBy=multi-user.target
'
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly ARGS_CHECK_SPEC='{"args": ["--model", "/shared/tiny-chat-a", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "2", "--max-model-len", "512", "--gpu-memory-utilization", "0.9", "--nnodes", "2", "--master-addr", "10.77.0.11", "--master-port", "29578", "--dtype", "float32", "--compilation-config", "{\"mode\": 2, \"backend\": \"eager\"}", "--node-rank", "1", "--headless"], "origins": {"--attention-backend": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "--compilation-config": "vllm-fleet:deployments[across].overrides.extraArgs", "--dtype": "vllm-fleet:deployments[across].overrides.extraArgs", "--enable-auto-tool-choice": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.enableAutoToolChoice", "--enable-expert-parallel": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.expertParallel", "--gpu-memory-utilization": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.gpuMemoryUtilization", "--host": "vllm-fleet:deployments[across].bindAddress", "--load-format": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.loadFormat", "--max-model-len": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.maxModelLen", "--model": "vllm-fleet:models.tiny-chat-a (its storage path and dir)", "--model-loader-extra-config": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.modelLoaderExtraConfig", "--pipeline-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.pipelineParallel", "--port": "vllm-fleet:deployments[across].port", "--reasoning-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.reasoningParser", "--safetensors-load-strategy": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.safetensorsLoadStrategy", "--served-model-name": "vllm-fleet:deployments[across].servedModelName", "--tensor-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.tensorParallel", "--tool-call-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.toolCallParser", "--trust-remote-code": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.trustRemoteCode", "float32": "vllm-fleet:deployments[across].overrides.extraArgs", "{\"mode\":": "vllm-fleet:deployments[across].overrides.extraArgs"}, "unit": "vllm-across-node1.service"}'
# vllm-fleet stage: put a deployment's rendered unit and its secret environment next to the running
# one, after checking the unit with systemd-analyze and its launch with the host's own vLLM, without
# touching what serves now. The serving step activates what is staged; a unit systemd refuses, or a flag
# this host's vLLM does not know, fails here while the old model keeps serving.
set -euo pipefail

staged="$STATE_DIR/staged"
install -d -m 0700 "$STATE_DIR" "$staged"
# Secrets arrive on stdin and go straight into a 0600 file.
umask 077
cat > "$staged/$UNIT_STEM.env.tmp"
chmod 0600 "$staged/$UNIT_STEM.env.tmp"
umask 022
printf '%s' "$UNIT_TEXT" > "$staged/$UNIT_NAME.tmp"
printf '%s\n' "$ARGS_CHECK_SPEC" > "$staged/$UNIT_STEM.args.json.tmp"
# systemd-analyze verify judges a unit by its file name: check a copy under the real name.
check_dir="$staged/.check"
rm -rf "$check_dir"
install -d -m 0700 "$check_dir"
cp "$staged/$UNIT_NAME.tmp" "$check_dir/$UNIT_NAME"
if ! out=$(systemd-analyze verify "$check_dir/$UNIT_NAME" 2>&1); then
  echo "unit $UNIT_NAME does not pass systemd-analyze verify:" >&2
  echo "$out" >&2
  exit 1
fi
rm -rf "$check_dir"
# Bounded well inside this step's own limit, so a stuck import says what it is.
timeout 200 "$PYTHON" "$TOOLS_DIR/vllm-args-check" --spec "$staged/$UNIT_STEM.args.json.tmp" || {
  rc=$?
  [ "$rc" -ne 124 ] || echo "vllm-args-check: the host's vLLM did not load its argument parser within 200 s; the launch of $UNIT_NAME was not checked and nothing was stopped" >&2
  exit "$rc"
}
mv -f "$staged/$UNIT_STEM.env.tmp" "$staged/$UNIT_STEM.env"
mv -f "$staged/$UNIT_STEM.args.json.tmp" "$staged/$UNIT_STEM.args.json"
mv -f "$staged/$UNIT_NAME.tmp" "$staged/$UNIT_NAME"
# Drop stale staged units of earlier models of this deployment.
find "$staged" -maxdepth 1 -name 'vllm-*.service' ! -name "$UNIT_NAME" -delete
find "$staged" -maxdepth 1 \( -name 'vllm-*.env' -o -name 'vllm-*.args.json' \) \
  ! -name "$UNIT_STEM.env" ! -name "$UNIT_STEM.args.json" -delete
echo "staged $UNIT_NAME for deployment $DEPLOYMENT ($(wc -c < "$staged/$UNIT_NAME") bytes, verified)"
