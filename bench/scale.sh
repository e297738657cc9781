#!/usr/bin/env bash
# The scale run of issue 14 on a real kube-apiserver + etcd (testenv): the
# plugin built as ./caddy over SCALE_VMS VMs (default 10,000; half
# running), printing how soon it serves, its RSS, what a watch expiry and
# a kube-apiserver restart cost, and the /cluster/resources and
# status/current ratios to respond. It takes minutes; ./test.sh only
# compiles it (go vet).
#
#   bench/scale.sh                      10,000 VMs
#   SCALE_VMS=2000 BENCH_SIDE=2s bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BENCHTIME:-}" ] && [ -z "${BENCH_SIDE:-}" ]; then export BENCH_SIDE="$BENCHTIME"; fi
: "${CADDY_PROXMOX_TESTBIN:=$(testenv/build-binaries.sh)}"
export CADDY_PROXMOX_TESTBIN
if [ -z "${CADDY_PROXMOX_CADDY:-}" ]; then
	./xcaddy.sh >/dev/null
	export CADDY_PROXMOX_CADDY="$PWD/caddy"
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
go test ./bench/scale/ -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -count 1 -timeout 90m 2>&1 | grep -v '^{"level"'
