#!/usr/bin/env bash
# One-shot `init` service of docker/compose.yml: the demo's TLS certificates and SuperNode
# authentication keys, created once into bind-mounted folders of docker/, each mounted only
# where it is needed:
#
#   certificates/ca.crt            the CA certificate (public): every service, and `flwr`
#   superlink-tls/server.pem/.key  the SuperLink's certificate and private key: the SuperLink
#   supernode-tls/supernode-runtime.pem/.key  the SuperNodes' Runtime API: the SuperNodes
#   keys/<node>/<node>             a SuperNode's private key: that SuperNode
#   keys/public/<node>.pub         the public keys: the `register` service
#   ca-private/ca.key              the CA's private key: no service
#
# Certificates: scripts/make_certs.sh (SUPERLINK_NAMES: extra host names / IPs of the SuperLink,
# space separated); keys: scripts/make_node_keys.sh. Existing files are kept; a folder made by
# an older demo (every file in certificates/) is sorted into this layout. Flower's containers
# run as user `app` (uid 49999): the files, and the SuperLink's database volume, are handed to
# that user, the private ones readable by it only.
set -euo pipefail
certs=/app/certificates
link=/app/superlink-tls
runtime=/app/supernode-tls
keys=/app/keys
if [[ ! -e "$certs/ca.crt" ]]; then
  # shellcheck disable=SC2086
  /opt/flowerbed/make_certs.sh "$certs" ${SUPERLINK_NAMES:-}
fi
mkdir -p /app/ca-private "$link" "$runtime" "$keys/public"
move() {  # move FILE... from the shared certificates folder into FOLDER (the last argument)
  local folder="${*: -1}" file
  for file in "${@:1:$#-1}"; do
    if [[ -e "$certs/$file" ]]; then mv -f "$certs/$file" "$folder/$file"; fi
  done
}
move ca.key /app/ca-private
move server.pem server.key "$link"
move supernode-runtime.pem supernode-runtime.key "$runtime"
for node in ${SUPERNODES:-supernode-1 supernode-2 supernode-3}; do
  /opt/flowerbed/make_node_keys.sh "$keys/$node" "$node"
  cp "$keys/$node/$node.pub" "$keys/public/$node.pub"
done
chown -R 49999:49999 "$certs" "$link" "$runtime" "$keys" /app/superlink-state
chmod 700 "$link" "$runtime" "$keys"/supernode-*
echo "certificates in $certs, $link, $runtime; SuperNode keys in $keys"
