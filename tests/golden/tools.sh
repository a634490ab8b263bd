#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
# <the body of components/files/tools.sh after line 1: 6 lines, 295 bytes, sha256 1826a20b91bd54be620832b3eb2f1d135871bcc137e5eea5d78dece02e4fa283>
