#!/usr/bin/env bash
# Prints the benchmark table: proxmox_api next to Caddy's respond serving
# the same body at 10, 1,000 and 10,000 VMs (loaded alternately, so that
# the ratios hold on a busy machine), and next to file_server sending it
# from a file (respond re-scans big bodies for placeholders),
# status/current's latency by size, the cache memory per VM, and the task
# worker with many running tasks.
#
#   ./bench/run.sh                  2 s of load per side and endpoint
#   BENCH_SIDE=5s ./bench/run.sh    longer, steadier (BENCHTIME is the same)
#   BENCH=CacheMemory ./bench/run.sh  one part only (a -bench pattern)
#
# The real-apiserver scale run is bench/scale.sh (minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BENCHTIME:-}" ] && [ -z "${BENCH_SIDE:-}" ]; then export BENCH_SIDE="$BENCHTIME"; fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$({
	go test ./bench/ -run '^$' -bench "${BENCH:-.}" -benchtime 1x -count 1 -timeout 60m 2>&1
	go test ./kube/ -run '^$' -bench "${BENCH:-TaskWorker}" -benchtime 1x -count 1 -timeout 20m 2>&1
} | grep -E '^Benchmark|^ok|FAIL|panic' || true)
if echo "$out" | grep -qE 'FAIL|panic'; then echo "$out"; exit 1; fi
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$out" | awk '
function metric(name,   i) { for (i = 2; i < NF; i++) if ($(i+1) == name) return $i; return "" }
/^BenchmarkAPI\// {
	split($1, p, "/"); vms = p[2]; sub(/^vms=/, "", vms); ep = p[3]; sub(/-[0-9]+$/, "", ep)
	k = vms SUBSEP ep; if (!(k in ratio)) order[++n] = k
	api[k] = metric("api-req/s"); resp[k] = metric("respond-req/s"); ratio[k] = metric("ratio"); body[k] = metric("body-B")
	file[k] = metric("file-req/s"); fratio[k] = metric("file-ratio")
	if (metric("api-µs") != "") { lat[vms] = metric("api-µs"); rlat[vms] = metric("respond-µs") }
}
/^BenchmarkCacheMemoryPerVM\// {
	split($1, p, "/"); vms = p[2]; sub(/^vms=/, "", vms); sub(/-[0-9]+$/, "", vms)
	mem[vms] = metric("B/VM"); memvm[vms] = metric("B/VM+VMI"); cm[++m] = vms
}
/^BenchmarkTaskWorker\// {
	split($1, p, "/"); t = p[2]; sub(/-[0-9]+$/, "", t); tw[++w] = t; twv[t] = metric("µs/event"); twe[t] = metric("evaluations/event")
}
END {
	if (n) {
		printf "\n%-7s %-26s %10s %12s %13s %7s %7s %4s %11s %8s\n", "VMs", "endpoint", "body B", "api req/s", "respond req/s", "ratio", "target", "ok", "file req/s", "vs file"
		for (i = 1; i <= n; i++) {
			split(order[i], q, SUBSEP); goal = (q[2] == "status-current") ? 0.9 : ((q[1] + 0 >= 1000) ? 0.8 : 0)
			printf "%-7s %-26s %10d %12.0f %13.0f %7.2f %7s %4s %11.0f %8.2f\n", q[1], q[2], body[order[i]], api[order[i]], resp[order[i]], ratio[order[i]], goal ? ">=" goal : "", goal ? (ratio[order[i]] >= goal ? "yes" : "NO") : "", file[order[i]], fratio[order[i]]
		}
		print "(ratio: api/respond, the issue'"'"'s target; vs file: api/file_server sending the same bytes, the stricter baseline for big bodies)"
	}
	if (10 in lat) {
		printf "\nstatus/current, one request alone (median)\n%-7s %10s %12s %14s %18s\n", "VMs", "api µs", "respond µs", "api vs 10 VMs", "respond vs 10 VMs"
		split("10 1000 10000", sz, " ")
		for (i = 1; i <= 3; i++) if (sz[i] in lat) printf "%-7s %10.0f %12.0f %14.2f %18.2f\n", sz[i], lat[sz[i]], rlat[sz[i]], lat[sz[i]] / lat[10], rlat[sz[i]] / rlat[10]
		if (10000 in lat) printf "(target: 10,000 VMs <= 1.10x 10 VMs: %s; respond, in the same process, %.2fx: what the process pays at that size, not the API)\n", (lat[10000] / lat[10] <= 1.10) ? "yes" : "NO", rlat[10000] / rlat[10]
	}
	if (m) {
		printf "\n%-7s %22s %22s\n", "VMs", "cache B/VM (all)", "of which VM+instance"
		for (i = 1; i <= m; i++) printf "%-7s %22.0f %22.0f %4s\n", cm[i], mem[cm[i]], memvm[cm[i]], (mem[cm[i]] <= 2048) ? "yes" : "NO"
		print "(all: the VM, its DataVolume and claim, and for every other VM its instance; target <= 2048 B)"
		if ((1000 in mem) && (10000 in mem)) {
			per = (mem[10000] * 10000 - mem[1000] * 1000) / 9000
			printf "each VM from 1,000 to 10,000: %.0f B (%s); fixed: %.0f KB (client-go'"'"'s buffers, the dictionaries, the seed lab), the rest at 10 and 1,000 VMs\n", per, (per <= 2048) ? "yes" : "NO", (mem[1000] - per) * 1000 / 1024
		}
	}
	if (w) {
		printf "\n%-28s %12s %20s\n", "task worker", "µs/event", "evaluations/event"
		for (i = 1; i <= w; i++) printf "%-28s %12.1f %20.1f\n", tw[i], twv[tw[i]], twe[tw[i]]
		if (w > 1) printf "(flat: %s vs %s, evaluations/event %.1f vs %.1f)\n", tw[w], tw[1], twe[tw[w]], twe[tw[1]]
	}
}'
