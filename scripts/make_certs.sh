#!/usr/bin/env bash
# Create a self-signed certificate authority and the SuperLink's TLS server certificate.
#
# Usage: scripts/make_certs.sh [OUT_DIR] [NAME_OR_IP ...]
#
#   OUT_DIR      where to write the files (default: certificates)
#   NAME_OR_IP   extra host names / IP addresses the SuperLink is reached at (subjectAltName);
#                localhost, 127.0.0.1, ::1 and "superlink" (the docker compose service) are
#                always included. Put the SuperLink host's DNS name or public IP here.
#
# Environment: CERT_DAYS (validity, default 365), CERT_SUBJECT_PREFIX (default "/O=flowerbed").
#
# Writes:
#   ca.crt / ca.key          the certificate authority (keep ca.key secret and off the network;
#                            give ca.crt to every SuperNode host and to the flwr CLI user)
#   server.pem / server.key  the SuperLink's certificate (signed by the CA) and private key
#   supernode-runtime.pem/.key  certificate for the SuperNodes' local Runtime API, used only
#                            when SuperNode and SuperExec run in separate containers (docker)
#
# Keys are ECDSA P-384. Only standard tools: openssl. Existing files are kept unless FORCE=1 is set.
set -euo pipefail

out="${1:-certificates}"
shift || true
days="${CERT_DAYS:-365}"
prefix="${CERT_SUBJECT_PREFIX:-/O=flowerbed}"

command -v openssl >/dev/null || { echo "error: openssl is not installed" >&2; exit 1; }
mkdir -p "$out"
if [[ -e "$out/ca.crt" && "${FORCE:-0}" != 1 ]]; then
  echo "$out/ca.crt exists; keeping the existing certificates (FORCE=1 to recreate)" >&2
  exit 0
fi

# subjectAltName entry for each name: IP:... for addresses, DNS:... for host names.
san_list() {
  local entries=() name
  for name in "$@"; do
    if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then entries+=("IP:$name"); else entries+=("DNS:$name"); fi
  done
  local IFS=,
  echo "${entries[*]}"
}

# sign NAME CN SAN...: key + CSR + certificate signed by the CA, with the given SANs.
sign() {
  local name="$1" cn="$2"
  shift 2
  local ext
  ext="$(mktemp)"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$(san_list "$@")" > "$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -sha256 -subj "$prefix/CN=$cn" \
    -keyout "$out/$name.key" -out "$out/$name.csr" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$ext" -out "$out/$name.pem" 2>/dev/null
  rm -f "$ext" "$out/$name.csr"
  chmod 600 "$out/$name.key"
}

umask 077
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -sha256 -days "$days" \
  -subj "$prefix/CN=flowerbed CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null

sign server superlink localhost 127.0.0.1 ::1 superlink "$@"
sign supernode-runtime supernode localhost 127.0.0.1 ::1 supernode-1 supernode-2 supernode-3
rm -f "$out/ca.srl"
chmod 644 "$out/ca.crt" "$out/server.pem" "$out/supernode-runtime.pem"

echo "wrote $out/ca.crt, $out/server.pem, $out/server.key, $out/supernode-runtime.pem/.key"
openssl x509 -in "$out/server.pem" -noout -ext subjectAltName | tail -n 1 | sed 's/^ */SuperLink certificate names: /'
