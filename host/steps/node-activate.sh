#!/usr/bin/env bash
# vllm-fleet node-activate: make a worker node of a multi-node deployment ready for the head's swap.
#
# Runs after every node staged and checked its unit and launch (while the old model served) and before
# the head's swap. host/tools/node.py activate judges the node again under the host lock, claims its GPUs,
# installs the staged launch beside the one the engine runs, and installs and starts the unit if it does
# not run. Nothing stops here: node-watch moves the engine to the new launch once the head's swap starts
# the new model (and back if the head rolls back).
set -euo pipefail
: "$STAGED_SHA256" # the staged unit and launch this activation is for; their change is what re-runs this step
exec "$PYTHON" "$TOOLS_DIR/node" activate --plan "$STATE_DIR/staged/node-plan.json"
