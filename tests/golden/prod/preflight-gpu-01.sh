#!/usr/bin/env bash
# vllm-fleet preflight.sh: parameters rendered from the stack config
readonly HOST_NAME=gpu-01
readonly PYTHON=/root/ml-env/bin/python3
readonly EXPECTED_GPUS=8
readonly EXPECTED_VLLM_VERSION=0.11.1.dev0
readonly STACK=prod
readonly HOST_KEYS_DIR=/var/lib/vllm-fleet/host-keys
readonly PINNED_HOST_KEY=SHA256:az50aXq0BcLVAGjx+nVB1IEQDCuy2XAfbCBJ8BvPnLM
# <the body of render/templates/preflight.sh after line 1: 63 lines, 3710 bytes, sha256 4028f21b25db85140562bf494045937d0109dbf337cda3d888b6794f4ba01d1b>
