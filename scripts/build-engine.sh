#!/usr/bin/env bash
# Brings the real Pulumi engine into .tools/ (git-ignored), built from Go modules: idempotent and cached.
#
# No registry reachable from these machines ships Pulumi binaries, so they are built from the Go module
# proxy. What the proxy serves decides what can be built (checked 2026-11-29; each refusal is a 403
# "This module version is not available", final):
#   github.com/pulumi/pulumi/pkg/v3            v3.274.0 and v3.274.1 served, v3.270-v3.273 refused: the CLI is
#                                              v3.274.1, the oldest served release newer than the 3.272.0 SDK
#                                              pin (a CLI newer than the SDK is the supported direction).
#   github.com/pulumi/pulumi/sdk/v3            served: holds the Python helper scripts of each release.
#   .../sdk/python/cmd/pulumi-language-python/v3   refused at every version. Until v3.79.0 the language host
#                                              lived inside the sdk/v3 module itself, so it is built from
#                                              sdk/v3@v3.79.0: the real host, an older release. It ignores
#                                              Pulumi.yaml's `virtualenv` option, which is why scripts/env.sh
#                                              puts .venv/bin first on PATH.
#   github.com/pulumi/pulumi-command/provider  refused at every version, and the PyPI wheel has no binary:
#                                              no command provider. Remote steps use the project's own
#                                              dynamic provider instead (components/remote_command.py).
# Outputs: .tools/bin/{pulumi, pulumi-language-python, pulumi-language-python-exec,
# pulumi-resource-pulumi-python} and .tools/engine.stamp. Go's own caches are used as they are, so a
# rebuild on the same machine takes seconds. Usage: scripts/build-engine.sh [--force]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"

CLI_VERSION="${PULUMI_ENGINE_VERSION:-v3.274.1}"
LANGUAGE_HOST_VERSION="${PULUMI_LANGUAGE_HOST_VERSION:-v3.79.0}"
TOOLS="$VLLM_FLEET_ROOT/.tools"
BIN="$TOOLS/bin"
STAMP="$TOOLS/engine.stamp"
GO="${GO:-go}"
key="cli=$CLI_VERSION language-host=$LANGUAGE_HOST_VERSION $($GO version 2>/dev/null || echo no-go)"

log() { printf '[build-engine] %s\n' "$*" >&2; }

if [[ "${1:-}" != --force && "$(cat "$STAMP" 2>/dev/null)" == "$key" ]] &&
  [[ -x "$BIN/pulumi" && -x "$BIN/pulumi-language-python" && -x "$BIN/pulumi-language-python-exec" &&
     -x "$BIN/pulumi-resource-pulumi-python" ]]; then
  log "engine $CLI_VERSION (python language host $LANGUAGE_HOST_VERSION) already built"
  exit 0
fi

command -v "$GO" >/dev/null || { log "ERROR: Go is needed to build the Pulumi engine"; exit 1; }
started=$SECONDS
log "building the Pulumi engine from Go modules: a first build takes about 8-10 minutes on 2 cores"
mkdir -p "$BIN"
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

module_dir() { # module_dir MODULE@VERSION: its folder in GOMODCACHE, downloaded if needed
  local dir
  dir="$("$GO" mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || { log "ERROR: the Go module proxy did not serve $1"; exit 1; }
  printf '%s\n' "$dir"
}
writable_copy() { cp -r "$1" "$2" && chmod -R u+w "$2"; }
ldflags() { printf '%s' "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$1"; }

# 1. The CLI: a `pulumi` already on PATH (outside .tools) of exactly this version, else built.
existing="$(PATH="${PATH//$BIN:/}" command -v pulumi || true)"
if [[ -n "$existing" && "$("$existing" version 2>/dev/null)" == "$CLI_VERSION" ]]; then
  ln -sf "$existing" "$BIN/pulumi"
  log "using $existing ($CLI_VERSION)"
else
  log "downloading github.com/pulumi/pulumi/pkg/v3@$CLI_VERSION and sdk/v3@$CLI_VERSION"
  # pkg/v3's go.mod replaces the SDK with ../sdk: lay both out as in the monorepo.
  mkdir -p "$work/cli"
  writable_copy "$(module_dir "github.com/pulumi/pulumi/pkg/v3@$CLI_VERSION")" "$work/cli/pkg"
  writable_copy "$(module_dir "github.com/pulumi/pulumi/sdk/v3@$CLI_VERSION")" "$work/cli/sdk"
  log "compiling the CLI (+$((SECONDS - started)) s)"
  (cd "$work/cli/pkg" && "$GO" build -trimpath -ldflags "$(ldflags "$CLI_VERSION")" -o "$BIN/pulumi" ./cmd/pulumi)
fi
log "pulumi $("$BIN/pulumi" version) ready (+$((SECONDS - started)) s)"

# 2. The scripts the CLI's release runs for Python programs and dynamic providers.
sdk_dir="$(module_dir "github.com/pulumi/pulumi/sdk/v3@$CLI_VERSION")"
install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$BIN/pulumi-language-python-exec"
install -m 0755 "$sdk_dir/python/dist/pulumi-resource-pulumi-python" "$BIN/pulumi-resource-pulumi-python"

# 3. The Python language host, from the last sdk/v3 release that contained it.
log "compiling the python language host from sdk/v3@$LANGUAGE_HOST_VERSION (+$((SECONDS - started)) s)"
writable_copy "$(module_dir "github.com/pulumi/pulumi/sdk/v3@$LANGUAGE_HOST_VERSION")" "$work/host"
(cd "$work/host" && "$GO" build -trimpath -ldflags "$(ldflags "$LANGUAGE_HOST_VERSION")" \
  -o "$BIN/pulumi-language-python" ./python/cmd/pulumi-language-python)

printf '%s\n' "$key" > "$STAMP"
log "engine ready in $((SECONDS - started)) s: pulumi $CLI_VERSION, pulumi-language-python $LANGUAGE_HOST_VERSION"
