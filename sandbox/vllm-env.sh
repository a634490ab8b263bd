#!/usr/bin/env bash
# shellcheck disable=SC2034 # its variables are for the scripts that source it
# sandbox/vllm-env.sh: sourced by sandbox/vllm-wheelhouse.sh and sandbox/install-vllm.sh, which set LOG_AS
# (their name in the log) first: the project's environment (scripts/env.sh), where the wheelhouse and the
# pinned requirements are, and the log helpers both use.

# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh disable=SC1091
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"

WHEELHOUSE="${VLLM_FLEET_WHEELHOUSE:-$VLLM_FLEET_CACHE/wheelhouse}"
REQUIREMENTS="${VLLM_FLEET_VLLM_REQUIREMENTS:-$VLLM_FLEET_ROOT/sandbox/vllm-requirements.txt}"

say() { printf '[%s %(%H:%M:%S)T] %s\n' "$LOG_AS" -1 "$*" >&2; }
die() {
  say "ERROR: $*"
  exit 1
}
elapsed() { # elapsed START_EPOCHREALTIME: seconds since then, one decimal
  awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'
}
