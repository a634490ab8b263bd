#!/usr/bin/env bash
# sandbox/tls.sh: a throwaway certificate authority and a server certificate for the sandbox hosts'
# front doors, in .sandbox/tls (kept across `down`, like the client SSH key; made again when missing
# or within a day of expiry). The dev stack serves with server.pem/server.key; clients (scripts/chat.py,
# the tests) verify the chain against ca.pem. The certificate names every way this machine and the
# sandbox hosts reach a front door: 127.0.0.1 and ::1 (the forwarded API ports), localhost, and each
# host's fabric address and name. Nothing here is anyone's secret beyond this machine.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="${VLLM_FLEET_SANDBOX_TLS_DIR:-$HERE/../.sandbox/tls}"
mkdir -p "$DIR"
chmod 0700 "$DIR"
cd "$DIR"

if [[ -s ca.pem && -s server.pem && -s server.key ]] &&
  openssl x509 -checkend 86400 -noout -in server.pem >/dev/null &&
  openssl verify -CAfile ca.pem server.pem >/dev/null 2>&1; then
  exit 0
fi
umask 077
names="IP:127.0.0.1,IP:::1,DNS:localhost,DNS:vllm-sandbox,IP:10.77.0.10"
for i in 1 2 3 4 5 6 7 8; do names+=",DNS:vllm-fleet-$i,IP:10.77.0.$((10 + i))"; done
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=vllm-fleet sandbox CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout ca.key -out ca.pem 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=vllm-fleet sandbox front door" \
  -keyout server.key -out server.csr 2>/dev/null
printf '%s\n' "subjectAltName=$names" "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
  "extendedKeyUsage=serverAuth" "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile server.ext \
  -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
chmod 0644 ca.pem server.pem
echo "[sandbox] made a throwaway CA and front door certificate in $DIR (clients trust ca.pem)"
