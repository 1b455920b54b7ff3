#!/usr/bin/env bash
# One-shot `init` service of docker/compose.yml: the demo's TLS certificates, created once into
# the bind-mounted docker/certificates folder (scripts/make_certs.sh).
#
# Flower's containers run as user `app` (uid 49999): the private keys are handed to that user.
# The CA's private key is moved to docker/ca-private/, which no service mounts.
set -euo pipefail
certs=/app/certificates
if [[ ! -e "$certs/ca.crt" ]]; then
  # SUPERLINK_NAMES: extra host names / IPs of the SuperLink (space separated), if any
  # shellcheck disable=SC2086
  /opt/flowerbed/make_certs.sh "$certs" ${SUPERLINK_NAMES:-}
  mkdir -p /app/ca-private && mv "$certs/ca.key" /app/ca-private/ca.key
fi
chown -R 49999:49999 "$certs"
echo "certificates in $certs"
