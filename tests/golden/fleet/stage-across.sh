#!/usr/bin/env bash
# vllm-fleet stage.sh: parameters rendered from the stack config
readonly DEPLOYMENT=across
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across
readonly UNIT_NAME=vllm-across.service
readonly UNIT_STEM=vllm-across
# shellcheck disable=SC2016  # data, never expanded
readonly UNIT_TEXT='# Managed by vllm-fleet: stack fleet, deployment across. `pulumi up` overwrites this file;
# change Pulumi.fleet.yaml instead.
[Unit]
Description=vLLM serving tiny-chat-a (across) for deployment across
Documentation=https://docs.vllm.ai/
After=network-online.target
Wants=network-online.target
# A model that keeps failing to load should not hammer the GPUs forever.
StartLimitIntervalSec=1920
StartLimitBurst=3

[Service]
Type=exec
User=root
WorkingDirectory=/var/lib/vllm-fleet/deployments/fleet.across
Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID
Environment=GLOO_SOCKET_IFNAME=fabric0
Environment=HF_HOME=/shared/huggingface
Environment=HF_HUB_DISABLE_TELEMETRY=1
Environment=HF_HUB_OFFLINE=1
Environment=NCCL_SOCKET_IFNAME=fabric0
Environment=TRANSFORMERS_CACHE=/shared/huggingface/hub
Environment=VLLM_CPU_KVCACHE_SPACE=1
Environment=VLLM_CPU_OMP_THREADS_BIND=nobind
Environment=VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=60
Environment=VLLM_HOST_IP=10.77.0.11
Environment=VLLM_NO_USAGE_STATS=1
# torch.compile'"'"'s cache on host-local disk, kept across restarts and swaps of this deployment.
CacheDirectory=vllm-fleet/fleet.across
Environment=VLLM_CACHE_ROOT=/var/cache/vllm-fleet/fleet.across
# Where this engine runs, written by the swap on the host: its GPUs (VLLM_FLEET_GPUS and
# CUDA_VISIBLE_DEVICES) and its loopback port behind the front door (VLLM_FLEET_BACKEND_PORT). A
# blue/green swap starts the new engine on the GPUs and port the old one does not use.
EnvironmentFile=/etc/vllm-fleet/vllm-across.placement.env
# Secrets (the Hugging Face token) live in a root-only 0600 file, never in this world-readable unit.
EnvironmentFile=-/etc/vllm-fleet/vllm-across.env
# Before the engine starts: refuse model files that changed since they were verified (sizes and
# mtimes against the manifest, no bytes read); wait for this deployment'"'"'s GPUs to be released,
# stopping stray holders; remove stale shared-memory segments that break the next launch.
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/model-sync check --dir /shared/tiny-chat-a
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/gpu-release-guard --gpus ${VLLM_FLEET_GPUS} --threshold-mib 1000 --timeout 120 --unit vllm-across.service --foreign refuse
ExecStartPre=/usr/local/lib/vllm-fleet/clean-shm
ExecStart=/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /shared/tiny-chat-a --served-model-name across --tensor-parallel-size 1 --pipeline-parallel-size 2 --max-model-len 512 --gpu-memory-utilization 0.9 --nnodes 2 --node-rank 0 --master-addr 10.77.0.11 --master-port 29578 --host 127.0.0.1 --port ${VLLM_FLEET_BACKEND_PORT} --dtype float32 --compilation-config "{\"mode\": 2, \"backend\": \"eager\"}"
# The unit counts as started only once the server answers /health, lists the model and completes.
ExecStartPost=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/wait-ready --host 127.0.0.1 --port ${VLLM_FLEET_BACKEND_PORT} --served-name across --timeout 300 --unit vllm-across.service
ExecStopPost=/usr/local/lib/vllm-fleet/clean-shm
TimeoutStartSec=480
TimeoutStopSec=120
# Stop the whole control group: tensor-parallel workers and engine cores must not outlive the server.
KillMode=control-group
KillSignal=SIGTERM
SendSIGKILL=yes
Restart=on-failure
RestartSec=15
LimitNOFILE=65536
LimitMEMLOCK=infinity
SyslogIdentifier=vllm-across

[Install]
WantedBy=multi-user.target
'
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly ARGS_CHECK_SPEC='{"args": ["--model", "/shared/tiny-chat-a", "--served-model-name", "across", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "2", "--max-model-len", "512", "--gpu-memory-utilization", "0.9", "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.77.0.11", "--master-port", "29578", "--host", "127.0.0.1", "--port", "18002", "--dtype", "float32", "--compilation-config", "{\"mode\": 2, \"backend\": \"eager\"}"], "origins": {"--attention-backend": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "--compilation-config": "vllm-fleet:deployments[across].overrides.extraArgs", "--dtype": "vllm-fleet:deployments[across].overrides.extraArgs", "--enable-auto-tool-choice": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.enableAutoToolChoice", "--enable-expert-parallel": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.expertParallel", "--gpu-memory-utilization": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.gpuMemoryUtilization", "--host": "vllm-fleet:deployments[across].bindAddress", "--load-format": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.loadFormat", "--max-model-len": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.maxModelLen", "--model": "vllm-fleet:models.tiny-chat-a (its storage path and dir)", "--model-loader-extra-config": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.modelLoaderExtraConfig", "--pipeline-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.pipelineParallel", "--port": "vllm-fleet:deployments[across].port", "--reasoning-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.reasoningParser", "--safetensors-load-strategy": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.safetensorsLoadStrategy", "--served-model-name": "vllm-fleet:deployments[across].servedModelName", "--tensor-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.tensorParallel", "--tool-call-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.toolCallParser", "--trust-remote-code": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.trustRemoteCode", "float32": "vllm-fleet:deployments[across].overrides.extraArgs", "{\"mode\":": "vllm-fleet:deployments[across].overrides.extraArgs"}, "unit": "vllm-across.service"}'
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
