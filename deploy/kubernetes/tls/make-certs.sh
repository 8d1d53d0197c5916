#!/usr/bin/env bash
# The certificates of certificates.yaml made with openssl instead of cert-manager, as Secrets:
#   deploy/kubernetes/tls/make-certs.sh DIR [CLUSTER_IP]     (CLUSTER_IP default 10.96.100.100)
# writes into DIR: fleetmind-ca.{crt,key}, fleetmind.{crt,key} (server: the Service's names and
# CLUSTER_IP), scheduler-ca.{crt,key}, kube-scheduler.{crt,key} (client), then prints the kubectl
# commands that load them as the Secrets fleetmind-tls and fleetmind-scheduler-ca. Keep the CA keys
# offline; the scheduler CA must sign nothing but kube-scheduler's certificate.
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR [CLUSTER_IP]}
ip=${2:-10.96.100.100}
mkdir -p "$dir"
cd "$dir"
umask 077
ca() {  # name
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=$1" -keyout "$1.key" -out "$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # name ca subject extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$3" \
    -keyout "$1.key" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}
ca fleetmind-ca
ca scheduler-ca
leaf fleetmind fleetmind-ca fleetmind.fleetmind.svc \
  "basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth
subjectAltName=DNS:fleetmind,DNS:fleetmind.fleetmind.svc,DNS:fleetmind.fleetmind.svc.cluster.local,IP:$ip"
leaf kube-scheduler scheduler-ca kube-scheduler \
  "basicConstraints=CA:FALSE
extendedKeyUsage=clientAuth"
cat <<MSG
kubectl -n fleetmind create secret generic fleetmind-tls --from-file=tls.crt=$dir/fleetmind.crt \\
  --from-file=tls.key=$dir/fleetmind.key --from-file=ca.crt=$dir/fleetmind-ca.crt
kubectl -n fleetmind create secret generic fleetmind-scheduler-ca --from-file=ca.crt=$dir/scheduler-ca.crt
# on each control-plane node, for deploy/kube-scheduler-config.yaml's tlsConfig:
#   /etc/kubernetes/fleetmind/client.crt  <- $dir/kube-scheduler.crt
#   /etc/kubernetes/fleetmind/client.key  <- $dir/kube-scheduler.key
#   /etc/kubernetes/fleetmind/ca.crt      <- $dir/fleetmind-ca.crt
MSG
