#!/usr/bin/env bash
# Prints the benchmark table: proxmox_api next to Caddy's respond serving
# the same body, at 10, 1,000 and 10,000 VMs, and cache memory per VM.
# Ratios are what to compare: the machines are shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(go test ./bench/ -run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-2s}" -count 1 -timeout 30m 2>&1 | grep -E '^Benchmark|^ok|FAIL|panic' )
echo "$out" | grep -E 'FAIL|panic' && { echo "$out"; exit 1; }
echo "$out" | awk '
/^BenchmarkAPI\// {
	split($1, p, "/"); vms=p[2]; ep=p[3]; kind=p[4]; sub(/-[0-9]+$/, "", kind)
	for (i = 2; i <= NF; i++) if ($(i+1) == "req/s") rps[vms, ep, kind] = $i
	keys[vms, ep] = 1; order[++n] = vms SUBSEP ep
}
/^BenchmarkCacheMemoryPerVM\// {
	split($1, p, "/"); vms=p[2]; sub(/-[0-9]+$/, "", vms)
	for (i = 2; i <= NF; i++) if ($(i+1) == "B/VM") mem[vms] = $i
}
END {
	printf "%-10s %-18s %12s %12s %8s\n", "VMs", "endpoint", "api req/s", "respond req/s", "ratio"
	for (i = 1; i <= n; i++) {
		k = order[i]; if (seen[k]++) continue
		split(k, q, SUBSEP)
		a = rps[q[1], q[2], "api"]; r = rps[q[1], q[2], "respond"]
		printf "%-10s %-18s %12.0f %12.0f %8.2f\n", q[1], q[2], a, r, (r > 0 ? a / r : 0)
	}
	printf "\n%-10s %12s\n", "VMs", "cache B/VM"
	for (v in mem) printf "%-10s %12.0f\n", v, mem[v]
}'
