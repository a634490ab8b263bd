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

progress() {
  local tag="$1" label="$2" next="$3" log="$4" t0=$SECONDS rc=0 pid
  shift 4
  local then="${next:+; next: $next}"
  mkdir -p "$(dirname "$log")"
  printf '\n==> %s: %s\n' "$label" "$*" >>"$log"
  if [[ -t 2 ]]; then
    "$@" >>"$log" 2>&1 </dev/null &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      printf '\r[%s] %s ... %d s%s\033[K' "$tag" "$label" $((SECONDS - t0)) "$then" >&2
      sleep 1
    done
    wait "$pid" || rc=$?
    printf '\r\033[K' >&2
  else
    printf '[%s] %s ...%s\n' "$tag" "$label" "$then" >&2
    "$@" >>"$log" 2>&1 </dev/null || rc=$?
  fi
  if ((rc != 0)); then
    tail -n 25 "$log" >&2
    printf '[%s] ERROR: %s failed after %d s (exit %d); the whole log is %s\n' \
      "$tag" "$label" $((SECONDS - t0)) "$rc" "$log" >&2
    return "$rc"
  fi
  printf '[%s] %s: done in %d s%s\n' "$tag" "$label" $((SECONDS - t0)) "$then" >&2
}
