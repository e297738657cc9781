#!/usr/bin/env bash
# Counts the leaf tests of a run.sh run from its logs and compares them with
# known-failures.txt. Called by run.sh; can be run again on a kept folder:
#
#   testenv/bpg/summarize.sh OUT [HERE [SECONDS [KNOWN]]]
#
# KNOWN is the known failures' list (default HERE/known-failures.txt; the
# real backend's is known-failures-real.txt).
#
# A leaf is a test no other test that ran is below. Its result is its
# "--- PASS/FAIL/SKIP" line; a leaf still running when its process hit
# -test.timeout (the "running tests:" list of Go's timeout panic) hung; one
# still waiting to start then did not run; a leaf with neither (its process
# died) failed. Exits 1 when a test failed, hung or skipped itself and is not
# in known-failures.txt, or is listed there and passed.
set -euo pipefail
out=$1
here=${2:-$(cd "$(dirname "$0")" && pwd)}
secs=${3:-}
known=${4:-$here/known-failures.txt}

for log in "$out"/log/*.log; do
	[ -e "$log" ] || continue
	pkg=$(basename "$log" .log)
	pkg=${pkg%.*}
	awk -v pkg="${pkg//_//}" '
		/^=== RUN / { started[$3] = 1 }
		match($0, /^ *--- (PASS|FAIL|SKIP): [^ ]+ /) {
			split(substr($0, RSTART, RLENGTH), f, " ")
			res[f[3]] = tolower(substr(f[2], 1, 4))
		}
		/^panic: test timed out after/ { timeout = 1 }
		timeout && /^\t+Test[^ ]* \(/ { n = $1; sub(/^\t+/, "", n); hung[n] = 1 }
		END {
			for (t in started) {
				leaf = 1
				for (u in started) if (index(u, t "/") == 1) { leaf = 0; break }
				if (!leaf) continue
				r = (t in res) ? res[t] : ((t in hung) ? "hung" : (timeout ? "notrun" : "fail"))
				if (r == "fail" && (t in hung)) r = "hung"
				print pkg " " t " " r
			}
		}' "$log"
done | sort >"$out/results.txt"

read -r passed failed hung notrun skipped <<<"$(awk '
	$3 == "pass" {p++} $3 == "fail" {f++} $3 == "hung" {h++} $3 == "notrun" {n++} $3 == "skip" {s++}
	END {print p + 0, f + 0, h + 0, n + 0, s + 0}' "$out/results.txt")"
na=$(awk '!/^#/ && NF' "$here/not-applicable.txt" | wc -l)

# An entry of known-failures.txt covers the leaf it names and, when it
# names a parent, every leaf below it (a subtest that panics ends its
# siblings' process too).
verdicts=$(awk '
	FILENAME == ARGV[1] {
		if (!/^#/ && NF) { n++; kp[n] = $1; kt[n] = $2; kc[n] = $3 }
		next
	}
	{
		hit = 0
		for (i = 1; i <= n; i++)
			if ($1 == kp[i] && ($2 == kt[i] || index($2, kt[i] "/") == 1)) { hit = i; break }
		if (hit) { covered[hit]++; if ($3 != "pass") { failing[hit]++; cause[kc[hit]]++ } }
		else if ($3 != "pass") print "unexpected", $1, $2, $3
	}
	END {
		for (i = 1; i <= n; i++) if (covered[i] && !failing[i]) print "fixed", kp[i], kt[i]
		for (c in cause) print "cause", cause[c], c
	}' "$known" "$out/results.txt")
bad=0
if grep -q '^unexpected ' <<<"$verdicts"; then
	echo "bpg: not passing and not in $(basename "$known") (fix, or list with the root cause):"
	grep '^unexpected ' <<<"$verdicts" | cut -d' ' -f2- | sed 's/^/  /'
	bad=1
fi
if grep -q '^fixed ' <<<"$verdicts"; then
	echo "bpg: passing but listed in $(basename "$known") (take them off the list):"
	grep '^fixed ' <<<"$verdicts" | cut -d' ' -f2- | sed 's/^/  /'
	bad=1
fi
if grep -q '^cause ' <<<"$verdicts"; then
	echo "bpg: known failures by root cause:"
	grep '^cause ' <<<"$verdicts" | cut -d' ' -f2- | sort -rn | sed 's/^/  /'
fi
echo "bpg: results per leaf test in $out/results.txt${secs:+, ${secs}s in all}"
echo "bpg: $passed passed, $failed failed, $hung hung, $notrun not run (their process timed out), $skipped skipped themselves, $na not applicable (not-applicable.txt)"
exit $bad
