#!/usr/bin/env bash
# vllm-fleet download.sh: parameters rendered from the stack config
readonly MODEL=kimi-k2.5-int4
readonly REPO=moonshotai/Kimi-K2.5
readonly REVISION=0000000000000000000000000000000000000001
readonly MODEL_DIR=/shared/kimi-k2.5-int4
readonly HF_HOME_DIR=/shared/huggingface
readonly ENDPOINT=''
readonly PYTHON=/root/ml-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly MARGIN_GB=100.0
# <the body of components/files/download.sh after line 1: 13 lines, 742 bytes, sha256 7d8b98fa219206a54bc2cc22a8aa47e96c4fff3777f7a2995caf7f81341f55de>
