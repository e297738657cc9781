#!/usr/bin/env bash
# Builds what the integration tests run, from the Go module proxy, into a
# cache keyed by version, and prints the folder that holds all of it:
#
#   kube-apiserver, etcd      the test cluster (tools/apiserver, tools/etcd)
#   kube-scheduler,           scheduling, and the garbage collector,
#   kube-controller-manager   PersistentVolume binder and namespace
#                             controller (tools/apiserver)
#   virt-api, virt-controller KubeVirt's own (tools/kubevirt)
#   cdi-controller,           CDI's controllers and API server (webhooks,
#   cdi-apiserver             upload tokens), wired as cmd/cdi-controller
#                             and cmd/cdi-apiserver wire them but with
#                             flags for their container paths and ports
#                             (tools/cdi/controller, tools/cdi/apiserver)
#   kubevirt.yaml             what virt-operator installs for virt-api,
#                             printed by tools/kubevirt/manifests from
#                             KubeVirt's own install strategy
#   cdi.yaml                  what CDI's operator installs (CRDs, RBAC,
#                             webhooks, APIService), printed by
#                             tools/cdi/manifests from CDI's operator code,
#                             and the external snapshotter's CRDs (from
#                             its client module, the version CDI uses)
#
# kube-apiserver and etcd are cached under k8s-<v>-etcd-<v>/, KubeVirt's
# and CDI's under kubevirt-<v>-<hash of tools/kubevirt and tools/cdi>/ (so that worktrees
# with different generators sharing the cache do not clash); the printed
# folder links both. A second run is instant.
#
#   build-binaries.sh           build what is missing, print the folder
#   build-binaries.sh --check   only print the folder if everything is
#                               there; exit 1 (building nothing) otherwise
#
# CADDY_PROXMOX_TESTBIN overrides the folder (everything is built straight
# into it). Concurrent runs (parallel test packages) wait for each other
# instead of building twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s=v1.37.2
etcd=v3.7.0
kubevirt=v1.8.0
cdi=v1.64.0
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caddy-proxmox/testbin
kvtools=$here/tools/kubevirt
cditools=$here/tools/cdi
k8sbins="kube-apiserver kube-scheduler kube-controller-manager"
kvbins="virt-api virt-controller cdi-controller cdi-apiserver"
kvhash=$(cd "$here/tools" && cat kubevirt/go.mod kubevirt/go.sum cdi/go.mod cdi/go.sum \
	$(find kubevirt cdi -name '*.go' | LC_ALL=C sort) | sha256sum | cut -c1-12)
if [ -n "${CADDY_PROXMOX_TESTBIN:-}" ]; then
	out=$CADDY_PROXMOX_TESTBIN
	k8sdir=$out
	kvdir=$out
else
	k8sdir=$cache/k8s-$k8s-etcd-$etcd
	kvdir=$cache/kubevirt-$kubevirt-cdi-$cdi-$kvhash
	out=$cache/set-k8s-$k8s-etcd-$etcd-kubevirt-$kubevirt-cdi-$cdi-$kvhash
fi
have() {
	local f
	for f in $k8sbins etcd $kvbins; do [ -x "$out/$f" ] || return 1; done
	[ -s "$out/kubevirt.yaml" ] && [ -s "$out/cdi.yaml" ]
}
if [ "${1:-}" = "--check" ]; then
	if have; then echo "$out"; exit 0; fi
	echo "test binaries not built in $out; run $0" >&2
	exit 1
fi
# The folders' times say when a run last used them (see the clean-up below).
have && { touch "$out" "$kvdir" 2>/dev/null || true; echo "$out"; exit 0; }
mkdir -p "$k8sdir" "$kvdir" "$out"
# lock DIR FD: holds DIR/.build.lock on file descriptor FD until the script exits.
lock() {
	command -v flock >/dev/null || return 0
	eval "exec $2>\"\$1/.build.lock\""
	flock "$2"
}
# timed NAME CMD...: runs CMD and logs how long it took to stderr.
timed() {
	local name=$1 t0=$SECONDS
	shift
	"$@"
	echo "built $name in $((SECONDS - t0)) s" >&2
}
lock "$k8sdir" 9
for f in $k8sbins; do
	[ -x "$k8sdir/$f" ] && continue
	echo "building $f $k8s (cold: kube-apiserver ~10 min, then ~5 min each)" >&2
	timed "$f" bash -c "cd '$here/tools/apiserver' && GOFLAGS=-mod=mod go build -trimpath -o '$k8sdir/$f.tmp' k8s.io/kubernetes/cmd/$f"
	mv "$k8sdir/$f.tmp" "$k8sdir/$f"
done
if [ ! -x "$k8sdir/etcd" ]; then
	echo "building etcd $etcd" >&2
	timed etcd bash -c "cd '$here/tools/etcd' && GOFLAGS=-mod=mod go build -trimpath -o '$k8sdir/etcd.tmp' ."
	mv "$k8sdir/etcd.tmp" "$k8sdir/etcd"
fi
[ "$kvdir" = "$k8sdir" ] || lock "$kvdir" 8
if [ ! -x "$kvdir/virt-api" ] || [ ! -x "$kvdir/virt-controller" ] || [ ! -x "$kvdir/manifests" ]; then
	echo "building virt-api, virt-controller $kubevirt (cold: ~15 min)" >&2
	# Pure Go (virt-handler and virt-launcher are the cgo parts). The
	# checksum database has no entry for two of KubeVirt's dependencies
	# (it answers 404); the module proxy serves them, and go.sum pins them.
	tmp=$(mktemp -d "$kvdir/.build.XXXXXX")
	timed "virt-api, virt-controller, manifests" bash -c "cd '$kvtools' && \
		CGO_ENABLED=0 GOFLAGS=-mod=mod \
		GONOSUMDB=kubevirt.io/containerized-data-importer,github.com/rhobs/operator-observability-toolkit \
		go build -trimpath -o '$tmp/' kubevirt.io/kubevirt/cmd/virt-api kubevirt.io/kubevirt/cmd/virt-controller ./manifests"
	mv "$tmp/virt-api" "$tmp/virt-controller" "$tmp/manifests" "$kvdir/"
	rmdir "$tmp"
fi
if [ ! -s "$kvdir/kubevirt.yaml" ]; then
	# virt-operator's strategy code logs warnings about monitoring and
	# image settings that do not matter here; shown only on failure.
	"$kvdir/manifests" >"$kvdir/kubevirt.yaml.tmp" 2>"$kvdir/manifests.log" || { cat "$kvdir/manifests.log" >&2; exit 1; }
	mv "$kvdir/kubevirt.yaml.tmp" "$kvdir/kubevirt.yaml"
fi
if [ ! -x "$kvdir/cdi-controller" ] || [ ! -x "$kvdir/cdi-apiserver" ] || [ ! -x "$kvdir/cdi-manifests" ]; then
	echo "building cdi-controller, cdi-apiserver $cdi (cold: ~15 min)" >&2
	# CDI builds against k8s.io v0.31 (its own replace block, repeated in
	# tools/cdi/go.mod). The checksum database has no entry for CDI's main
	# module and for the openshift/library-go version it pins (404).
	tmp=$(mktemp -d "$kvdir/.build.XXXXXX")
	timed "cdi-controller, cdi-apiserver, cdi manifests" bash -c "cd '$cditools' && CGO_ENABLED=0 GOFLAGS=-mod=mod \
		GONOSUMDB=kubevirt.io/containerized-data-importer,github.com/openshift/library-go \
		go build -trimpath -o '$tmp/' ./controller ./apiserver ./manifests"
	mv "$tmp/controller" "$kvdir/cdi-controller"
	mv "$tmp/apiserver" "$kvdir/cdi-apiserver"
	mv "$tmp/manifests" "$kvdir/cdi-manifests"
	rmdir "$tmp"
fi
if [ ! -s "$kvdir/cdi.yaml" ]; then
	# The external snapshotter's CRDs (VolumeSnapshot, -Content, -Class)
	# come with its client module, the version CDI builds against.
	snapdir=$(cd "$cditools" && GOFLAGS=-mod=mod GONOSUMDB=kubevirt.io/containerized-data-importer,github.com/openshift/library-go \
		go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v6)
	{
		"$kvdir/cdi-manifests"
		for f in "$snapdir"/config/crd/snapshot.storage.k8s.io_*.yaml; do echo "---"; cat "$f"; done
	} >"$kvdir/cdi.yaml.tmp"
	mv "$kvdir/cdi.yaml.tmp" "$kvdir/cdi.yaml"
fi
if [ "$out" != "$kvdir" ]; then
	# Each change of tools/ gets its own folder (~200 MB); drop the ones no
	# run has used for two weeks.
	find "$cache" -mindepth 1 -maxdepth 1 \( -name 'kubevirt-*' -o -name 'set-*' \) -mtime +14 \
		! -path "$kvdir" ! -path "$out" -exec rm -rf {} + 2>/dev/null || true
	touch "$kvdir" "$out"
	for f in $k8sbins etcd; do ln -sfn "$k8sdir/$f" "$out/$f"; done
	for f in $kvbins kubevirt.yaml cdi.yaml; do ln -sfn "$kvdir/$f" "$out/$f"; done
fi
have || { echo "build-binaries.sh: $out is incomplete" >&2; exit 1; }
echo "$out"
