#!/usr/bin/env bash
# The project's Hugging Face mirror on loopback: generates the tiny chat models once, then serves them
# to the sandbox (which reaches it through host.sh's forwarder) with tiny-chat-b gated behind a token.
#   scripts/mirror.sh up | down | status
set -euo pipefail
# shellcheck source=scripts/prelude.sh
source "$(dirname "$0")/prelude.sh"

port=${VLLM_FLEET_MIRROR_PORT:-18080}
# The sandbox mirror's token: not a secret of anyone's, but it travels as one (Pulumi.dev.yaml hfToken).
token=${VLLM_FLEET_MIRROR_TOKEN:-hf_sandboxMirrorToken0000000000000000}
repos=.cache/mirror/repos
run=.run/mirror
pid_file=$run/pid

running() { [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; }
# The mirror of another checkout of this machine (its pid file is there, not here) serves the same models on
# the same port: it serves this checkout's tests too, and a second one would fail on the port.
served_elsewhere() { curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:$port/api/models/acme/tiny-chat-a"; }

case "${1:-}" in
  up)
    if running; then echo "[mirror] already serving on 127.0.0.1:$port (pid $(cat "$pid_file"))"; exit 0; fi
    if served_elsewhere; then echo "[mirror] another checkout's mirror already serves 127.0.0.1:$port; using it"; exit 0; fi
    stamp=$(cat sandbox/tiny_repos.py sandbox/tiny_models.py sandbox/tiny_adapters.py | sha256sum | cut -c1-16)
    if [ "$(cat "$repos/.stamp" 2>/dev/null)" != "$stamp" ]; then
      rm -rf "$repos"
      progress mirror "generating the tiny chat models and their LoRA adapters" "" "$VLLM_FLEET_LOGS/mirror.log" \
        "$VENV/python" -m sandbox.tiny_repos --out "$repos"
      echo "$stamp" > "$repos/.stamp"
    fi
    mkdir -p "$run"
    setsid "$VENV/python" -m sandbox.hf_mirror --root "$repos" --host 127.0.0.1 --port "$port" --token "$token" \
      --gated acme/tiny-chat-b --log-file "$run/requests.jsonl" > "$run/mirror.log" 2>&1 < /dev/null &
    echo $! > "$pid_file"
    for _ in $(seq 1 100); do
      grep -q "listening on" "$run/mirror.log" 2>/dev/null && break
      running || { tail -n 25 "$run/mirror.log" >&2; echo "[mirror] ERROR: the mirror exited at once; its log is $run/mirror.log" >&2; exit 1; }
      sleep 0.1
    done
    echo "[mirror] serving acme/tiny-chat-a, acme/tiny-chat-b (gated) and their adapters on http://127.0.0.1:$port (pid $(cat "$pid_file"))"
    ;;
  down)
    if running; then
      kill "$(cat "$pid_file")"
      for _ in $(seq 1 50); do running || break; sleep 0.1; done
      echo "[mirror] stopped"
    fi
    rm -f "$pid_file"
    ;;
  status)
    if running; then
      echo "[mirror] up on 127.0.0.1:$port"
    elif served_elsewhere; then
      echo "[mirror] up on 127.0.0.1:$port (another checkout's)"
    else
      echo "[mirror] down"
      exit 3
    fi
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
