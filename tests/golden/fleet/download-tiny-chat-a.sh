#!/usr/bin/env bash
# vllm-fleet download.sh: parameters rendered from the stack config
readonly MODEL=tiny-chat-a
readonly REPO=acme/tiny-chat-a
readonly REVISION=main
readonly MODEL_DIR=/shared/tiny-chat-a
readonly HF_HOME_DIR=/shared/huggingface
readonly ENDPOINT=http://127.0.0.1:18080
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly MARGIN_GB=1.0
# <the body of components/files/download.sh after line 1: 13 lines, 742 bytes, sha256 7d8b98fa219206a54bc2cc22a8aa47e96c4fff3777f7a2995caf7f81341f55de>
