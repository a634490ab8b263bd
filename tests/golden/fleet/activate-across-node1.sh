#!/usr/bin/env bash
# vllm-fleet node-activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly STAGED_SHA256=8ffa50ab28de17bf84e94033fbfe6a79e0fb0179d81113977e57050de7ed0788
# <the body of components/files/node-activate.sh after line 1: 10 lines, 781 bytes, sha256 8ad5f682fe908f17cfe807f19c76c3cd7c331896755101dcc605c1ff5c111c75>
