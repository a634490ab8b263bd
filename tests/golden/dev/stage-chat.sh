#!/usr/bin/env bash
# vllm-fleet stage.sh: parameters rendered from the stack config
readonly DEPLOYMENT=chat
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/dev.chat
readonly UNIT_NAME=vllm-tiny-chat-a.service
readonly UNIT_STEM=vllm-tiny-chat-a
# shellcheck disable=SC2016  # data, never expanded
readonly UNIT_TEXT=<the unit of golden file vllm-tiny-chat-a.service: 57 lines, 3135 bytes, sha256 d4cad1dcfa09a1580d45c083c0a768468cb63ddd53eabd415062326f6ded3f05>
readonly BRIDGE_NAME=vllm-tiny-chat-a-bridge.service
# shellcheck disable=SC2016  # data, never expanded
readonly BRIDGE_TEXT='# Managed by vllm-fleet: stack dev, deployment chat. `pulumi up` overwrites this file;
# change Pulumi.dev.yaml instead.
[Unit]
Description=vLLM serving tiny-chat-a (chat) for deployment chat
Documentation=https://docs.vllm.ai/
After=network-online.target
Wants=network-online.target
# A model that keeps failing to load should not hammer the GPUs forever.
StartLimitIntervalSec=1920
StartLimitBurst=3

[Service]
Type=exec
User=root
WorkingDirectory=/var/lib/vllm-fleet/deployments/dev.chat
Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID
Environment=HF_HOME=/shared/huggingface
Environment=HF_HUB_DISABLE_TELEMETRY=1
Environment=HF_HUB_OFFLINE=1
Environment=TRANSFORMERS_CACHE=/shared/huggingface/hub
Environment=VLLM_CPU_KVCACHE_SPACE=1
Environment=VLLM_CPU_OMP_THREADS_BIND=nobind
Environment=VLLM_ENABLE_V1_MULTIPROCESSING=0
Environment=VLLM_NO_USAGE_STATS=1
# torch.compile'"'"'s cache on host-local disk, kept across restarts and swaps of this deployment.
CacheDirectory=vllm-fleet/dev.chat
Environment=VLLM_CACHE_ROOT=/var/cache/vllm-fleet/dev.chat
# Where this engine runs, written by the swap on the host: its GPUs (VLLM_FLEET_GPUS and
# CUDA_VISIBLE_DEVICES) and its loopback port behind the front door (VLLM_FLEET_BACKEND_PORT). A
# blue/green swap starts the new engine on the GPUs and port the old one does not use.
EnvironmentFile=/etc/vllm-fleet/vllm-tiny-chat-a-bridge.placement.env
# Secrets (the Hugging Face token) live in a root-only 0600 file, never in this world-readable unit.
EnvironmentFile=-/etc/vllm-fleet/vllm-tiny-chat-a-bridge.env
# Before the engine starts: refuse model files that changed since they were verified (sizes and
# mtimes against the manifest, no bytes read); wait for this deployment'"'"'s GPUs to be released,
# stopping stray holders; remove stale shared-memory segments that break the next launch.
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/model-sync check --dir /shared/tiny-chat-a
ExecStartPre=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/gpu-release-guard --gpus ${VLLM_FLEET_GPUS} --threshold-mib 1000 --timeout 120 --unit vllm-tiny-chat-a-bridge.service --foreign refuse
ExecStartPre=/usr/local/lib/vllm-fleet/clean-shm
ExecStart=/opt/vllm-env/bin/python3 -m vllm.entrypoints.openai.api_server --model /shared/tiny-chat-a --served-model-name chat --tensor-parallel-size 1 --max-model-len 512 --gpu-memory-utilization 0.9 --host 127.0.0.1 --port ${VLLM_FLEET_BACKEND_PORT} --enforce-eager --dtype float32
# The unit counts as started only once the server answers /health, lists the model and completes.
ExecStartPost=/opt/vllm-env/bin/python3 /usr/local/lib/vllm-fleet/wait-ready --host 127.0.0.1 --port ${VLLM_FLEET_BACKEND_PORT} --served-name chat --timeout 300 --unit vllm-tiny-chat-a-bridge.service
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
SyslogIdentifier=vllm-tiny-chat-a-bridge

[Install]
WantedBy=multi-user.target
'
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly ARGS_CHECK_SPEC='{"args": ["--model", "/shared/tiny-chat-a", "--served-model-name", "chat", "--tensor-parallel-size", "1", "--max-model-len", "512", "--gpu-memory-utilization", "0.9", "--host", "127.0.0.1", "--port", "18000", "--enforce-eager", "--dtype", "float32"], "origins": {"--attention-backend": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "--dtype": "vllm-fleet:models.tiny-chat-a.serving.extraArgs", "--enable-auto-tool-choice": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.enableAutoToolChoice", "--enable-expert-parallel": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.expertParallel", "--enable-lora": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.lora", "--enforce-eager": "vllm-fleet:models.tiny-chat-a.serving.extraArgs", "--gpu-memory-utilization": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.gpuMemoryUtilization", "--host": "vllm-fleet:deployments[chat].bindAddress", "--load-format": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.loadFormat", "--lora-modules": "vllm-fleet:adapters and deployments[].adapters (loaded at runtime, no restart)", "--max-cpu-loras": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxCpuLoras", "--max-lora-rank": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxLoraRank", "--max-loras": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxLoras", "--max-model-len": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.maxModelLen", "--model": "vllm-fleet:models.tiny-chat-a (its storage path and dir)", "--model-loader-extra-config": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.modelLoaderExtraConfig", "--pipeline-parallel-size": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.pipelineParallel", "--port": "vllm-fleet:deployments[chat].port", "--reasoning-parser": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.reasoningParser", "--safetensors-load-strategy": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.safetensorsLoadStrategy", "--served-model-name": "vllm-fleet:deployments[chat].servedModelName", "--tensor-parallel-size": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.tensorParallel", "--tool-call-parser": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.toolCallParser", "--trust-remote-code": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.trustRemoteCode", "VLLM_ATTENTION_BACKEND": "vllm-fleet:deployments[chat].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "float32": "vllm-fleet:models.tiny-chat-a.serving.extraArgs"}, "unit": "vllm-tiny-chat-a.service"}'
readonly NODE_LAUNCH=''
readonly NODE_PLAN=''
# <the body of host/steps/stage.sh after line 1: 55 lines, 3211 bytes, sha256 9565f4f6c0a995d3f60ce86165f39d2f7ed873664363ce08f5ff4652c88b1c32>
