#!/usr/bin/env bash
# vllm-fleet host tools: the host package, the archive of host/ that the host's tools-archive step copied
# to $INCOMING, checked against its version (the start of its sha256) and installed as $TOOLS_DIR/$BUNDLE
# with the bytecode this host's python3 compiles; then a launcher per tool (LAUNCHERS: tool:module),
# which units and steps call by path.
set -euo pipefail

install -d -m 0755 "$TOOLS_DIR"
if [[ ! -f $INCOMING ]]; then
  echo "the host package $INCOMING is missing: it was removed after the tools-archive step copied it;" \
    "run \`pulumi up --replace '$ARCHIVE_URN'\` where the stack is deployed from, to copy it again" >&2
  exit 1
fi
read -r digest _ < <(sha256sum "$INCOMING")
if [[ $digest != "$VERSION"* ]]; then
  echo "the host package $INCOMING is not version $VERSION (sha256 $digest): a copy that did not finish" \
    "or another file; run \`pulumi up --replace '$ARCHIVE_URN'\` where the stack is deployed from, to copy it again" >&2
  exit 1
fi
python3 -c "$UNPACK" "$TOOLS_DIR/$BUNDLE" <"$INCOMING" >"$TOOLS_DIR/.$BUNDLE.tmp"
chmod 0644 "$TOOLS_DIR/.$BUNDLE.tmp"
mv -f "$TOOLS_DIR/.$BUNDLE.tmp" "$TOOLS_DIR/$BUNDLE"
# The copy step never deletes: archives of other versions go here once a month old. Not at once: another
# stack on this host, at another version of vllm-fleet, may re-run its tools step without copying again.
find "$(dirname "$INCOMING")" -maxdepth 1 -name '*.pyz' ! -name "$VERSION.pyz" -mtime +30 -delete
for launcher in "${LAUNCHERS[@]}"; do
  tool=${launcher%%:*}
  module=${launcher#*:}
  printf '%s\n' '#!/usr/bin/env python3' \
    "# vllm-fleet $tool: runs $module from the host package $BUNDLE beside this file." \
    'import os, runpy, sys' \
    "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), \"$BUNDLE\"))" \
    "runpy.run_module(\"$module\", run_name=\"__main__\", alter_sys=True)" >"$TOOLS_DIR/.$tool.tmp"
  chmod 0755 "$TOOLS_DIR/.$tool.tmp"
  mv -f "$TOOLS_DIR/.$tool.tmp" "$TOOLS_DIR/$tool"
done
echo "installed the vllm-fleet host package $VERSION in $TOOLS_DIR: ${LAUNCHERS[*]%%:*}"
