#!/usr/bin/env bash
# vllm-fleet clean-shm: remove shared-memory segments a previous vLLM run left behind.
# Stale psm_*/sem.mp-* segments from a killed engine broke later launches in production; the unit runs
# this before it starts and after it stops. A segment still mapped or open by a live process (another
# deployment on the same host) is kept.
set -euo pipefail
shopt -s nullglob

in_use() {
  local segment=$1
  grep -qsF -- "$segment" /proc/[0-9]*/maps && return 0
  [ -n "$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$segment" -print -quit 2>/dev/null)" ]
}

removed=0
kept=0
for segment in /dev/shm/psm_* /dev/shm/sem.mp-* /dev/shm/*vllm* /dev/shm/*nccl*; do
  [ -e "$segment" ] || continue
  if in_use "$segment"; then
    kept=$((kept + 1))
    continue
  fi
  rm -f -- "$segment"
  removed=$((removed + 1))
done
echo "clean-shm: removed $removed stale segment(s) from /dev/shm, kept $kept in use"
