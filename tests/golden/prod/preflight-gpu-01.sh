#!/usr/bin/env bash
# vllm-fleet preflight.sh: parameters rendered from the stack config
readonly HOST_NAME=gpu-01
readonly PYTHON=/root/ml-env/bin/python3
readonly EXPECTED_GPUS=8
readonly EXPECTED_VLLM_VERSION=0.11.1.dev0
# <the body of components/files/preflight.sh after line 1: 50 lines, 2718 bytes, sha256 0bef6ec3c3fbb3c99141ee51ad921b8c0330b2445ba1bd2f73f59a86df8bfc1f>
