#!/usr/bin/env bash
# Create SuperNode authentication key pairs, in the format Flower 1.41 expects.
#
# Usage: scripts/make_node_keys.sh [OUT_DIR] [NAME ...]
#
#   OUT_DIR   where to write the keys (default: keys)
#   NAME      one key pair per SuperNode (default: supernode-1 supernode-2 supernode-3)
#
# Each SuperNode gets an ECDSA P-384 key pair in OpenSSH format (ssh-keygen, no passphrase):
#   OUT_DIR/NAME       private key: stays on the SuperNode host; pass it to
#                      flower-supernode --auth-supernode-private-key OUT_DIR/NAME
#   OUT_DIR/NAME.pub   public key: registered with the SuperLink (started with
#                      --enable-supernode-auth) by the federation operator:
#                      flwr supernode register OUT_DIR/NAME.pub <connection>
# Only registered SuperNodes may then connect. Existing keys are kept.
set -euo pipefail

out="${1:-keys}"
shift || true
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(supernode-1 supernode-2 supernode-3)

command -v ssh-keygen >/dev/null || { echo "error: ssh-keygen (openssh-client) is not installed" >&2; exit 1; }
mkdir -p "$out"
for name in "${names[@]}"; do
  if [[ -e "$out/$name" ]]; then
    echo "$out/$name exists; kept"
    continue
  fi
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "flowerbed $name" -f "$out/$name"
  echo "wrote $out/$name (private) and $out/$name.pub (public)"
done
