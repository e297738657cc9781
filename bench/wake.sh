#!/usr/bin/env bash
# Benchmarks proxmox_wake through a real Caddy against the pvesim
# simulator and prints one table: throughput next to plain reverse_proxy
# (alternating and side by side), time from guest readiness to first
# proxied byte on a cold start, and PVE API calls per minute with 100 idle
# guests.
#
#   bench/wake.sh                         D=3s: 8*D per side in alternating
#                                         quarter-second rounds, 2*D side by side
#   WAKE_BENCH_DURATION=10s bench/wake.sh longer, steadier (BENCHTIME is the same)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${BENCHTIME:-}" ] && [ -z "${WAKE_BENCH_DURATION:-}" ]; then export WAKE_BENCH_DURATION="$BENCHTIME"; fi
go test ./integration/wake/ -run '^$' -bench '^BenchmarkWakeTable$' -benchtime 1x -count 1 2>/dev/null \
	| grep -v '^{"level"'
