#!/usr/bin/env bash
# vllm-fleet access: who may call a deployment through the front door. Writes its listen line and TLS
# certificate, the key check of /v1/ and the /metrics allow list (rendered, in this script), and, from
# stdin, its API keys' map and the TLS private key (0600 files, never in a command line); checks the
# whole front door with nginx -t, putting the previous files back if it fails, and reloads it
# gracefully. The deployment's site includes these files: a new key restarts no engine.
set -euo pipefail

umask 077
new="$ACCESS_DIR.new"
old="$ACCESS_DIR.old"
rm -rf -- "$new" "$old" "$KEYS_FILE.new" "$KEYS_FILE.old"
install -d -m 0755 "$(dirname "$ACCESS_DIR")" "$(dirname "$KEYS_FILE")"
install -d -m 0700 "$new"
# stdin: the keys' map, a separator line, then the TLS private key (nothing without TLS).
awk -v map="$KEYS_FILE.new" -v key="$new/tls.key" -v sep="$SEPARATOR" \
  '$0 == sep { part = 1; next } { if (part) print > key; else print > map }'
[ -s "$new/tls.key" ] || rm -f "$new/tls.key"
printf '%s' "$SERVER_CONF" > "$new/server.conf"
printf '%s' "$API_CONF" > "$new/api.conf"
printf '%s' "$METRICS_CONF" > "$new/metrics.conf"
if [ -n "$CERTIFICATE" ]; then printf '%s' "$CERTIFICATE" > "$new/tls.crt"; fi
chmod 0644 "$new"/*.conf
if [ -f "$new/tls.crt" ]; then chmod 0644 "$new/tls.crt"; fi

# Into place, keeping the previous files until nginx accepts the new ones.
if [ -d "$ACCESS_DIR" ]; then mv -- "$ACCESS_DIR" "$old"; fi
mv -- "$new" "$ACCESS_DIR"
if [ -f "$KEYS_FILE" ]; then mv -f -- "$KEYS_FILE" "$KEYS_FILE.old"; fi
mv -f -- "$KEYS_FILE.new" "$KEYS_FILE"
if ! out=$(/usr/sbin/nginx -t -q -c "$FRONT_DOOR_DIR/nginx.conf" 2>&1); then
  rm -rf -- "$ACCESS_DIR"
  if [ -d "$old" ]; then mv -- "$old" "$ACCESS_DIR"; fi
  if [ -f "$KEYS_FILE.old" ]; then mv -f -- "$KEYS_FILE.old" "$KEYS_FILE"; else rm -f -- "$KEYS_FILE"; fi
  echo "access of $OWNER: the front door refused the new files (nginx -t); the previous ones are back:" >&2
  echo "$out" >&2
  exit 1
fi
rm -rf -- "$old" "$KEYS_FILE.old"

keys=$(grep -c '"~^Bearer ' "$KEYS_FILE" || true)
if grep -q '^    default 1;' "$KEYS_FILE"; then keys="open: no key asked for"; else keys="$keys API key(s)"; fi
if [ -f "$SITE" ] && systemctl is-active --quiet "$FRONT_DOOR_UNIT"; then
  # A graceful reload; then wait (bounded) until the workers of the old configuration stop accepting,
  # so a client that switches keys after this step never meets a worker that does not know its key.
  main=$(systemctl show -p MainPID --value "$FRONT_DOOR_UNIT")
  before=$(pgrep -P "$main" || true)
  systemctl reload "$FRONT_DOOR_UNIT"
  for _ in $(seq 1 100); do
    current=0
    for pid in $before; do
      if ps -o args= -p "$pid" 2>/dev/null | grep -qx 'nginx: worker process *'; then current=1; fi
    done
    [ "$current" = 0 ] && break
    sleep 0.1
  done
  echo "access of $OWNER: $keys, $SUMMARY; front door reloaded"
else
  echo "access of $OWNER: $keys, $SUMMARY; in effect once its site is written"
fi
