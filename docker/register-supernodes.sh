#!/usr/bin/env bash
# One-shot `register` service of docker/compose.yml: registers every public key of a folder
# with the SuperLink (SuperNode authentication, docs/deploy.md section 3), once it answers.
# A key the SuperLink knows already (its database keeps them across restarts) is left as it is.
#
# Usage: register-supernodes.sh SUPERLINK_ADDRESS KEY_FOLDER CA_CERTIFICATE
set -euo pipefail
address="$1"
keys="$2"
ca="$3"
FLWR_HOME="$(mktemp -d)"
export FLWR_HOME
printf '[superlink.demo]\naddress = "%s"\nroot-certificates = "%s"\n' "$address" "$ca" \
  > "$FLWR_HOME/config.toml"
for _ in $(seq 90); do
  if flwr supernode list demo > /dev/null 2>&1; then break; fi
  sleep 2
done
for key in "$keys"/*.pub; do
  if output="$(flwr supernode register "$key" demo 2>&1)"; then
    echo "$key: registered"
  elif grep -q "already in use" <<< "$output"; then
    echo "$key: registered before"
  else
    echo "$key: $output" >&2
    exit 1
  fi
done
rm -rf "$FLWR_HOME"
