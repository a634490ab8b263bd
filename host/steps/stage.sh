#!/usr/bin/env bash
# vllm-fleet stage: put a deployment's rendered unit and its secret environment next to the running
# one, after checking the unit with systemd-analyze and its launch with the host's own vLLM, without
# touching what serves now. The serving step activates what is staged; a unit systemd refuses, or a flag
# this host's vLLM does not know, fails here while the old model keeps serving. Where the deployment's
# GPUs hold a second engine (BRIDGE_NAME set), its bridge unit is staged and checked beside it: the unit
# that serves a restart's new launch while the deployment's own unit restarts (host/bridge.py).
set -euo pipefail

staged="$STATE_DIR/staged"
install -d -m 0700 "$STATE_DIR" "$staged"
# Secrets arrive on stdin and go straight into a 0600 file.
umask 077
cat > "$staged/$UNIT_STEM.env.tmp"
chmod 0600 "$staged/$UNIT_STEM.env.tmp"
umask 022
printf '%s' "$UNIT_TEXT" > "$staged/$UNIT_NAME.tmp"
if [ -n "$BRIDGE_NAME" ]; then printf '%s' "$BRIDGE_TEXT" > "$staged/$BRIDGE_NAME.tmp"; fi
printf '%s\n' "$ARGS_CHECK_SPEC" > "$staged/$UNIT_STEM.args.json.tmp"
# systemd-analyze verify judges a unit by its file name: check a copy under the real name.
check_dir="$staged/.check"
rm -rf "$check_dir"
install -d -m 0700 "$check_dir"
for name in "$UNIT_NAME" ${BRIDGE_NAME:+"$BRIDGE_NAME"}; do
  cp "$staged/$name.tmp" "$check_dir/$name"
  if ! out=$(systemd-analyze verify "$check_dir/$name" 2>&1); then
    echo "unit $name does not pass systemd-analyze verify:" >&2
    echo "$out" >&2
    exit 1
  fi
done
rm -rf "$check_dir"
# Bounded well inside this step's own limit, so a stuck import says what it is.
timeout 200 "$PYTHON" "$TOOLS_DIR/vllm-args-check" --spec "$staged/$UNIT_STEM.args.json.tmp" || {
  rc=$?
  [ "$rc" -ne 124 ] || echo "vllm-args-check: the host's vLLM did not load its argument parser within 200 s; the launch of $UNIT_NAME was not checked and nothing was stopped" >&2
  exit "$rc"
}
# A node of a model across hosts (NODE_PLAN set): its launch of this model and its plan, then the node's
# own judgement of its GPUs (host/tools/node.py check: the rule the preview applied), while every engine runs.
if [ -n "$NODE_PLAN" ]; then
  printf '%s\n' "$NODE_LAUNCH" > "$staged/launch.json.tmp"
  printf '%s\n' "$NODE_PLAN" > "$staged/node-plan.json.tmp"
  mv -f "$staged/launch.json.tmp" "$staged/launch.json"
  mv -f "$staged/node-plan.json.tmp" "$staged/node-plan.json"
  "$PYTHON" "$TOOLS_DIR/node" check --plan "$staged/node-plan.json"
fi
mv -f "$staged/$UNIT_STEM.env.tmp" "$staged/$UNIT_STEM.env"
mv -f "$staged/$UNIT_STEM.args.json.tmp" "$staged/$UNIT_STEM.args.json"
mv -f "$staged/$UNIT_NAME.tmp" "$staged/$UNIT_NAME"
if [ -n "$BRIDGE_NAME" ]; then mv -f "$staged/$BRIDGE_NAME.tmp" "$staged/$BRIDGE_NAME"; fi
# Drop stale staged units of earlier models of this deployment (and a bridge it no longer has room for).
find "$staged" -maxdepth 1 -name 'vllm-*.service' ! -name "$UNIT_NAME" ! -name "${BRIDGE_NAME:-$UNIT_NAME}" -delete
find "$staged" -maxdepth 1 \( -name 'vllm-*.env' -o -name 'vllm-*.args.json' \) \
  ! -name "$UNIT_STEM.env" ! -name "$UNIT_STEM.args.json" -delete
echo "staged $UNIT_NAME for deployment $DEPLOYMENT ($(wc -c < "$staged/$UNIT_NAME") bytes, verified)"
