#!/usr/bin/env bash
# Sourced by the set-up scripts: a long step shows one progress line (what, how long so far, what comes
# next) while its own output goes to a log file, which the error names if the step fails.
#
#   progress TAG LABEL NEXT LOG CMD...
#
# On a terminal the line is rewritten every second ("[engine] pulumi CLI ... 95 s; next: language host")
# and ends as "... done in 312 s; next: ..."; elsewhere (CI logs) a step prints that line when it starts
# and when it ends. On failure: the last 25 lines of LOG, then "LABEL failed after N s ...; the whole log
# is LOG", and the command's exit status.
#
# CMD may be a shell function of the caller: it runs as a background job, so its `exit` ends the step and
# not the caller, and `set -e` stops it at its first failing command as it would outside progress (where
# the progress call itself is in an `if`, `&&` or `||`, bash ignores `set -e` inside, as for any function).

progress() {
  local tag="$1" label="$2" next="$3" log="$4" t0=$SECONDS rc=0 pid
  shift 4
  local then="${next:+; next: $next}"
  mkdir -p "$(dirname "$log")"
  printf '\n==> %s: %s\n' "$label" "$*" >>"$log"
  "$@" >>"$log" 2>&1 </dev/null &
  pid=$!
  if [[ -t 2 ]]; then
    while kill -0 "$pid" 2>/dev/null; do
      printf '\r[%s] %s ... %d s%s\033[K' "$tag" "$label" $((SECONDS - t0)) "$then" >&2
      sleep 1
    done
    wait "$pid" || rc=$?
    printf '\r\033[K' >&2
  else
    printf '[%s] %s ...%s\n' "$tag" "$label" "$then" >&2
    wait "$pid" || rc=$?
  fi
  if ((rc != 0)); then
    tail -n 25 "$log" >&2
    printf '[%s] ERROR: %s failed after %d s (exit %d); the whole log is %s\n' \
      "$tag" "$label" $((SECONDS - t0)) "$rc" "$log" >&2
    return "$rc"
  fi
  printf '[%s] %s: done in %d s%s\n' "$tag" "$label" $((SECONDS - t0)) "$then" >&2
}
