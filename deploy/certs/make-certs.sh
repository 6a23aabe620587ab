#!/usr/bin/env bash
# Issues the certificates of an Arbiter cluster (docs/deployment.md, "Certificates"):
#
#   deploy/certs/make-certs.sh DIR MEMBER...     e.g. make-certs.sh pki coordinator node-1 node-2
#
# Makes DIR/ca.pem and DIR/ca.key (the cluster's own CA, made once: an existing one is reused)
# and, for each MEMBER, DIR/MEMBER.pem and DIR/MEMBER.key signed by it. EC P-256 keys, valid
# for $DAYS days (default 365). Every process of the cluster gets ca.pem and its own pair;
# ca.key stays with whoever issues certificates, never on the machines.
#
# CAF's OpenSSL module checks that the peer's certificate chains to ca.pem and nothing else
# (no host names), so any certificate this CA signs is a member: use a CA for this cluster
# only. To add a node, run the script again with its name; to shut one out, issue a new CA
# and new certificates for the members that stay.
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 DIR MEMBER..." >&2
  exit 2
fi
dir="$1"
shift
days="${DAYS:-365}"
mkdir -p "$dir"
umask 077

if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=arbiter cluster CA" \
    2>/dev/null
  echo "made $dir/ca.pem (keep $dir/ca.key off the cluster machines)"
fi
for member in "$@"; do
  case "$member" in
    */* | "" | ca) echo "bad member name '$member'" >&2; exit 2 ;;
  esac
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/$member.key" -out "$dir/$member.csr" -subj "/CN=$member" 2>/dev/null
  openssl x509 -req -in "$dir/$member.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$member.pem" -days "$days" 2>/dev/null
  rm -f "$dir/$member.csr"
  echo "made $dir/$member.pem and $dir/$member.key"
done
chmod 0644 "$dir/ca.pem" "$dir"/*.pem
