#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the integration tests run,
# from the Go module proxy, into a cache folder keyed by version. A second
# run is instant. Prints the folder on stdout.
#
#   build-binaries.sh           build if missing, print the folder
#   build-binaries.sh --check   only print the folder if both binaries are
#                               there; exit 1 (building nothing) otherwise
#
# CADDY_PROXMOX_TESTBIN overrides the folder. Concurrent runs (parallel
# test packages) wait for each other instead of building twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s=v1.37.2
etcd=v3.7.0
out=${CADDY_PROXMOX_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/caddy-proxmox/testbin/k8s-$k8s-etcd-$etcd}
have() { [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; }
if [ "${1:-}" = "--check" ]; then
	if have; then echo "$out"; exit 0; fi
	echo "kube-apiserver/etcd not built in $out; run $0" >&2
	exit 1
fi
mkdir -p "$out"
if ! have && command -v flock >/dev/null; then
	exec 9>"$out/.build.lock"
	flock 9
fi
if [ ! -x "$out/kube-apiserver" ]; then
	echo "building kube-apiserver $k8s (cold: ~10 min)" >&2
	(cd "$here/tools/apiserver" && GOFLAGS=-mod=mod go build -trimpath -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
fi
if [ ! -x "$out/etcd" ]; then
	echo "building etcd $etcd" >&2
	(cd "$here/tools/etcd" && GOFLAGS=-mod=mod go build -trimpath -o "$out/etcd.tmp" .)
	mv "$out/etcd.tmp" "$out/etcd"
fi
echo "$out"
