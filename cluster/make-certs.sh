#!/usr/bin/env bash
# Make a private certificate authority and one node certificate for TLS between the scheduler, the workers and
# the clients of a dppca_dask cluster. Run `make-certs.sh --help` for usage.
set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR

usage() {
    cat <<EOF
Usage: $PROG [--days N] [--san NAME]... [--force] DIR

Make a private certificate authority (CA) and one node certificate in DIR for TLS between the Dask scheduler,
the workers and the clients (Dask always uses mutual TLS: every party presents a certificate signed by the CA).
Keys are ECDSA P-256, signatures SHA-256.

Files written in DIR:
  ca.pem          CA certificate (give it to every party as the trusted CA); every file is mode 600, DIR 700
  ca-key.pem      CA private key, mode 600 (keep it to sign more certificates; no party needs it)
  node.pem        node certificate, for the scheduler, the workers and the clients
                  (subjectAltName IP:127.0.0.1, DNS:localhost and any --san; extendedKeyUsage serverAuth, clientAuth)
  node-key.pem    node private key, mode 600
  dask-tls.yaml   Dask configuration with these paths filled in ($SCRIPT_DIR/tls.yaml rendered for DIR):
                  DASK_CONFIG=DIR/dask-tls.yaml makes clients and servers use TLS with these files

Idempotent: when DIR already holds a CA and a node certificate signed by it, valid for at least 30 more days and
with the same names, nothing is changed. A missing or stale node certificate is re-issued from the existing CA.

Options:
  --days N     validity of the node certificate in days (default 825; the CA gets 10 years)
  --san NAME   extra subjectAltName of the node certificate, e.g. --san DNS:scheduler --san IP:10.0.0.5
               (a bare host name means DNS:NAME); repeatable
  --force      make a new CA and node certificate even if valid ones exist
  -h, --help   show this help
EOF
}

die() {
    printf '%s: error: %s\n' "$PROG" "$*" >&2
    exit 1
}

usage_error() {
    printf '%s: error: %s\nTry %s --help.\n' "$PROG" "$*" "$PROG" >&2
    exit 2
}

note() { printf '%s: %s\n' "$PROG" "$*" >&2; }

days=825
force=0
dir=""
sans=("IP:127.0.0.1" "DNS:localhost")

while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --days) (($# >= 2)) || usage_error "--days needs a value"; days=$2; shift 2 ;;
        --days=*) days=${1#*=}; shift ;;
        --san) (($# >= 2)) || usage_error "--san needs a value"; sans+=("$2"); shift 2 ;;
        --san=*) sans+=("${1#*=}"); shift ;;
        --force) force=1; shift ;;
        --) shift; (($# == 1)) || usage_error "expected one directory after --"; dir=$1; shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *) [[ -z $dir ]] || usage_error "expected one directory; got '$dir' and '$1'"; dir=$1; shift ;;
    esac
done

[[ -n $dir ]] || usage_error "missing DIR"
[[ $days =~ ^[1-9][0-9]*$ ]] || usage_error "--days must be a positive integer; got '$days'"
command -v openssl >/dev/null 2>&1 || die "openssl not found on PATH; install OpenSSL (1.1.1 or newer)"

# Normalise the subjectAltNames: a bare name means DNS:name; drop duplicates, keep order.
san_list=()
for san in "${sans[@]}"; do
    [[ $san == *:* ]] || san="DNS:$san"
    [[ $san =~ ^(DNS|IP):[^,[:space:]]+$ ]] || usage_error "--san must look like DNS:host or IP:address; got '$san'"
    dup=0
    for seen in "${san_list[@]+"${san_list[@]}"}"; do [[ $seen == "$san" ]] && dup=1; done
    ((dup)) || san_list+=("$san")
done
san_csv=$(IFS=,; printf '%s' "${san_list[*]}")

umask 077
mkdir -p -- "$dir"
dir=$(cd -- "$dir" && pwd)

ca=$dir/ca.pem
ca_key=$dir/ca-key.pem
node=$dir/node.pem
node_key=$dir/node-key.pem
node_san=$dir/node.san
min_valid=$((30 * 24 * 3600))

ca_ok() {
    [[ -s $ca && -s $ca_key ]] &&
        openssl x509 -in "$ca" -noout -checkend "$min_valid" >/dev/null 2>&1
}

node_ok() {
    [[ -s $node && -s $node_key && -s $node_san ]] &&
        [[ $(<"$node_san") == "$san_csv" ]] &&
        openssl x509 -in "$node" -noout -checkend "$min_valid" >/dev/null 2>&1 &&
        openssl verify -CAfile "$ca" "$node" >/dev/null 2>&1
}

render_config() {
    # The Dask configuration of tls.yaml with ${DPPCA_TLS_DIR} replaced by this directory.
    local template=$SCRIPT_DIR/tls.yaml text
    [[ -f $template ]] || return 0
    text=$(<"$template")
    printf '%s\n' "${text//'${DPPCA_TLS_DIR}'/"$dir"}" >"$dir/dask-tls.yaml.tmp"
    chmod 600 "$dir/dask-tls.yaml.tmp"
    mv -f "$dir/dask-tls.yaml.tmp" "$dir/dask-tls.yaml"
}

tmp=$(mktemp -d "$dir/.make-certs.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

made_ca=0
if ((force)) || ! ca_ok; then
    note "making a new certificate authority in $dir"
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 3650 \
        -keyout "$tmp/ca-key.pem" -out "$tmp/ca.pem" \
        -subj "/O=dppca_dask/CN=dppca_dask private CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash" 2>"$tmp/openssl.log" ||
        die "openssl could not make the CA: $(<"$tmp/openssl.log")"
    chmod 600 "$tmp/ca-key.pem"
    chmod 600 "$tmp/ca.pem"
    mv -f "$tmp/ca-key.pem" "$ca_key"
    mv -f "$tmp/ca.pem" "$ca"
    made_ca=1
fi

if ((made_ca)) || ! node_ok; then
    note "issuing the node certificate ($san_csv) in $dir"
    cat >"$tmp/node.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san_csv
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
        -keyout "$tmp/node-key.pem" -out "$tmp/node.csr" \
        -subj "/O=dppca_dask/CN=dppca_dask node" 2>"$tmp/openssl.log" ||
        die "openssl could not make the node key: $(<"$tmp/openssl.log")"
    openssl x509 -req -in "$tmp/node.csr" -CA "$ca" -CAkey "$ca_key" -CAcreateserial \
        -CAserial "$tmp/ca.srl" -sha256 -days "$days" -extfile "$tmp/node.ext" \
        -out "$tmp/node.pem" 2>"$tmp/openssl.log" ||
        die "openssl could not sign the node certificate: $(<"$tmp/openssl.log")"
    openssl verify -CAfile "$ca" "$tmp/node.pem" >/dev/null 2>"$tmp/openssl.log" ||
        die "the new node certificate does not verify against $ca: $(<"$tmp/openssl.log")"
    chmod 600 "$tmp/node-key.pem"
    chmod 600 "$tmp/node.pem"
    mv -f "$tmp/node-key.pem" "$node_key"
    mv -f "$tmp/node.pem" "$node"
    printf '%s' "$san_csv" >"$node_san"
    chmod 600 "$node_san"
else
    note "certificates in $dir are valid; nothing to do"
fi

# Everything stays owner-only even when it existed before with looser modes (a cluster's certificates are for its
# own processes and clients; copy ca.pem and a client certificate to other users deliberately).
chmod 700 "$dir"
chmod 600 "$ca_key" "$node_key"
chmod 600 -- "$ca" "$node" "$node_san" 2>/dev/null || true
render_config
[[ ! -e $dir/dask-tls.yaml ]] || chmod 600 "$dir/dask-tls.yaml"
