#!/usr/bin/env bash
# vllm-fleet stage.sh: parameters rendered from the stack config
readonly DEPLOYMENT=across.node1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly UNIT_NAME=vllm-across-node1.service
readonly UNIT_STEM=vllm-across-node1
# shellcheck disable=SC2016  # data, never expanded
readonly UNIT_TEXT=<the unit of golden file vllm-across-node1.service: 42 lines, 2241 bytes, sha256 c06a8a3738ed128661d939423a66aa0c5f82c96bb114562b91c2cbf5399c52bc>
readonly BRIDGE_NAME=''
readonly BRIDGE_TEXT=''
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly ARGS_CHECK_SPEC='{"args": ["--model", "/shared/tiny-chat-a", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "2", "--max-model-len", "512", "--gpu-memory-utilization", "0.9", "--nnodes", "2", "--master-addr", "10.77.0.11", "--master-port", "29506", "--dtype", "float32", "--compilation-config", "{\"mode\": 2, \"backend\": \"eager\"}", "--node-rank", "1", "--headless"], "origins": {"--attention-backend": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "--compilation-config": "vllm-fleet:deployments[across].overrides.extraArgs", "--dtype": "vllm-fleet:deployments[across].overrides.extraArgs", "--enable-auto-tool-choice": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.enableAutoToolChoice", "--enable-expert-parallel": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.expertParallel", "--enable-lora": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.lora", "--gpu-memory-utilization": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.gpuMemoryUtilization", "--host": "vllm-fleet:deployments[across].bindAddress", "--load-format": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.loadFormat", "--lora-modules": "vllm-fleet:adapters and deployments[].adapters (loaded at runtime, no restart)", "--max-cpu-loras": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxCpuLoras", "--max-lora-rank": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxLoraRank", "--max-loras": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.lora.maxLoras", "--max-model-len": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.maxModelLen", "--model": "vllm-fleet:models.tiny-chat-a (its storage path and dir)", "--model-loader-extra-config": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.modelLoaderExtraConfig", "--pipeline-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.pipelineParallel", "--port": "vllm-fleet:deployments[across].port", "--reasoning-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.reasoningParser", "--safetensors-load-strategy": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.safetensorsLoadStrategy", "--served-model-name": "vllm-fleet:deployments[across].servedModelName", "--tensor-parallel-size": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.tensorParallel", "--tool-call-parser": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.toolCallParser", "--trust-remote-code": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.trustRemoteCode", "VLLM_ATTENTION_BACKEND": "vllm-fleet:deployments[across].overrides / vllm-fleet:models.tiny-chat-a.serving.attentionBackend", "float32": "vllm-fleet:deployments[across].overrides.extraArgs", "{\"mode\":": "vllm-fleet:deployments[across].overrides.extraArgs"}, "unit": "vllm-across-node1.service"}'
readonly NODE_LAUNCH='{
  "argv": [
    "/opt/vllm-env/bin/python3",
    "-m",
    "vllm.entrypoints.cli.main",
    "serve",
    "--model",
    "/shared/tiny-chat-a",
    "--tensor-parallel-size",
    "1",
    "--pipeline-parallel-size",
    "2",
    "--max-model-len",
    "512",
    "--gpu-memory-utilization",
    "0.9",
    "--nnodes",
    "2",
    "--master-addr",
    "10.77.0.11",
    "--master-port",
    "29506",
    "--dtype",
    "float32",
    "--compilation-config",
    "{\"mode\": 2, \"backend\": \"eager\"}",
    "--node-rank",
    "1",
    "--headless"
  ],
  "environment": {
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "GLOO_SOCKET_IFNAME": "fabric0",
    "HF_HOME": "/shared/huggingface",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
    "NCCL_SOCKET_IFNAME": "fabric0",
    "TRANSFORMERS_CACHE": "/shared/huggingface/hub",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "60",
    "VLLM_HOST_IP": "10.77.0.12",
    "VLLM_NO_USAGE_STATS": "1"
  },
  "master_port": 29506,
  "model": "tiny-chat-a",
  "model_dir": "/shared/tiny-chat-a"
}'
readonly NODE_PLAN='{
  "deployment": "across",
  "foreign_gpu_processes": "refuse",
  "gpus": [
    2
  ],
  "head": "fleet-1",
  "head_address": "10.77.0.11",
  "host": "fleet-2",
  "python": "/opt/vllm-env/bin/python3",
  "rank": 1,
  "stack": "fleet",
  "state_dir": "/var/lib/vllm-fleet/deployments/fleet.across.node1",
  "tools_dir": "/usr/local/lib/vllm-fleet",
  "unit_name": "vllm-across-node1.service"
}'
# <the body of host/steps/stage.sh after line 1: 55 lines, 3211 bytes, sha256 9565f4f6c0a995d3f60ce86165f39d2f7ed873664363ce08f5ff4652c88b1c32>
