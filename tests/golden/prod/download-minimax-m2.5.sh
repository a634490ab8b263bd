#!/usr/bin/env bash
# vllm-fleet download.sh: parameters rendered from the stack config
readonly MODEL=minimax-m2.5
readonly REPO=MiniMaxAI/MiniMax-M2.5
readonly REVISION=0000000000000000000000000000000000000002
readonly MODEL_DIR=/shared/minimax-m2.5
readonly HF_HOME_DIR=/shared/huggingface
readonly ENDPOINT=''
readonly PYTHON=/root/ml-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly MARGIN_GB=100.0
readonly STACK=dev
readonly REPAIRS=0
# <the body of host/steps/download.sh after line 1: 15 lines, 1018 bytes, sha256 82b7a547c2330a3074790a4e4d6dba3a3aeac2b90e5095d178c7d6291bf65061>
