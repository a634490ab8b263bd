#!/usr/bin/env bash
# vllm-fleet stage: put a deployment's rendered unit and its secret environment next to the running
# one, and check the unit with systemd-analyze, without touching what serves now. The serving step
# activates what is staged; a bad unit is refused here while the old model keeps serving.
set -euo pipefail

staged="$STATE_DIR/staged"
install -d -m 0700 "$STATE_DIR" "$staged"
# Secrets arrive on stdin and go straight into a 0600 file.
umask 077
cat > "$staged/$UNIT_STEM.env.tmp"
chmod 0600 "$staged/$UNIT_STEM.env.tmp"
mv -f "$staged/$UNIT_STEM.env.tmp" "$staged/$UNIT_STEM.env"
umask 022
printf '%s' "$UNIT_TEXT" > "$staged/$UNIT_NAME.tmp"
mv -f "$staged/$UNIT_NAME.tmp" "$staged/$UNIT_NAME"
# Drop stale staged units of earlier models of this deployment.
find "$staged" -maxdepth 1 -name 'vllm-*.service' ! -name "$UNIT_NAME" -delete
find "$staged" -maxdepth 1 -name 'vllm-*.env' ! -name "$UNIT_STEM.env" -delete
if ! out=$(systemd-analyze verify "$staged/$UNIT_NAME" 2>&1); then
  echo "unit $UNIT_NAME does not pass systemd-analyze verify:" >&2
  echo "$out" >&2
  exit 1
fi
echo "staged $UNIT_NAME for deployment $DEPLOYMENT ($(wc -c < "$staged/$UNIT_NAME") bytes, verified)"
