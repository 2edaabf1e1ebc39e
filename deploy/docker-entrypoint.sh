#!/bin/sh
# The container's entrypoint: bring the key material the replicas share into this replica's data dir, then run
# `sandgate ARGS` (default `serve`).
#
# SANDGATE_KEYS_DIR (a read-only Secret or volume) must hold `signing.key` (token signing key) and
# `mitmproxy-ca.pem` (the egress CA: private key and certificate), as `sandgate-keys` writes them, and may hold
# `audit.key` (the audit checkpoints' key). Every replica
# copies the same files, so a token minted by one is valid on all and sandboxes trust one CA whichever replica
# they reach. Unset, sandgate makes its own key and CA in the data dir on first start (one replica only).
set -eu

data="${SANDGATE_DATA_DIR:-/var/lib/sandgate}"
keys="${SANDGATE_KEYS_DIR:-}"

if [ -n "$keys" ]; then
  for f in signing.key mitmproxy-ca.pem; do
    if [ ! -s "$keys/$f" ]; then
      echo "sandgate-entrypoint: $keys/$f is missing or empty: every replica needs the shared key material" \
           "(make it once with sandgate-keys)" >&2
      exit 2
    fi
  done
  if ! grep -q -- '-----BEGIN CERTIFICATE-----' "$keys/mitmproxy-ca.pem"; then
    echo "sandgate-entrypoint: $keys/mitmproxy-ca.pem holds no certificate" >&2
    exit 2
  fi
  umask 077
  mkdir -p "$data"
  cp "$keys/signing.key" "$data/signing.key.new"
  cp "$keys/mitmproxy-ca.pem" "$data/mitmproxy-ca.pem.new"
  # The certificate alone, as mitmproxy itself would write it next to the key (sandgate serves it to sandboxes).
  sed -n '/-----BEGIN CERTIFICATE-----/,/-----END CERTIFICATE-----/p' "$keys/mitmproxy-ca.pem" \
    > "$data/mitmproxy-ca-cert.pem.new"
  for f in signing.key mitmproxy-ca.pem mitmproxy-ca-cert.pem; do
    mv -f "$data/$f.new" "$data/$f"
  done
  # The audit checkpoints' key (sandgate-keys makes it): every replica signs with the same one. Without it each
  # replica makes its own at start, and loses it with its data dir.
  if [ -s "$keys/audit.key" ]; then
    cp "$keys/audit.key" "$data/audit.key.new"
    mv -f "$data/audit.key.new" "$data/audit.key"
  fi
fi

exec sandgate "$@"
