#!/usr/bin/env bash
# Runs the bpg Terraform provider's own acceptance tests (github.com/bpg/
# terraform-provider-proxmox, the version pinned in testenv/tools/bpg/go.mod,
# taken from the Go module proxy) against ./caddy, and prints how many leaf
# tests passed, failed, hung or do not apply. ./caddy runs on the embedded
# simulated cluster (BPG_BACKEND=sim, the default) or on the real control
# plane (BPG_BACKEND=real: kube-apiserver and etcd, KubeVirt's virt-api and
# virt-controller, CDI, kube-scheduler and kube-controller-manager, with
# kubevirtsim's node stand-ins and stand-in cdi-uploadproxy, seeded like the
# simulated cluster; see internal/realcluster and cluster/main.go), as
# `kubeconfig` and `cdi_upload_proxy` name it.
#
#   testenv/bpg/run.sh                   the tests listed in tests.txt
#   testenv/bpg/run.sh 'TestAccResourceVM$'   only top-level tests matching
#   BPG_BACKEND=real testenv/bpg/run.sh  the same on the real control plane
#
# What runs is tests.txt (packages and the top-level tests of each that
# belong to the surface we serve); what cannot apply to a KubeVirt-backed
# cluster is not-applicable.txt, by name with the reason, handed to the test
# binaries' -test.skip. known-failures.txt (known-failures-real.txt on the
# real control plane) lists the leaf tests that fail today with their root
# cause: the run fails when any other test fails,
# hangs or skips itself, and when a listed one passes (take it off the list).
#
# The Terraform-protocol CLI is terraform when it is on PATH (or
# TF_ACC_TERRAFORM_PATH), else OpenTofu built from the Go module proxy
# (testenv/tools/tofu) and cached under ~/.cache/caddy-proxmox. The provider
# itself is served in-process by the test binaries (protocol 6 factories).
#
# Everything runs in a network namespace of its own (unshare -n): ./caddy
# on 127.0.0.1:8006, the real control plane's processes on loopback ports, and the download servers on 198.18.0.1 (RFC 2544's
# benchmarking range, an address of this namespace's loopback only), which
# the plugin may fetch from because it is not a loopback address. Nothing
# leaves the namespace.
#
# Environment: CADDY_PROXMOX_CADDY (default ./caddy), BPG_BACKEND (sim or
# real), CADDY_PROXMOX_TESTBIN (real: the control plane's binaries, default
# what testenv/build-binaries.sh prints), BPG_TEST_TIMEOUT (per
# top-level test process, default 10m), BPG_JOBS (test processes at once,
# default 2), BPG_PARALLEL (parallel subtests per process, default 4),
# BPG_OUT (folder for the logs, kept; default a new temporary one, removed
# when the run went as expected).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tools=$repo/testenv/tools
cache=${XDG_CACHE_HOME:-$HOME/.cache}/caddy-proxmox
filter=${1:-.}
backend=${BPG_BACKEND:-sim}
case $backend in
sim) known=$here/known-failures.txt ;;
real) known=$here/known-failures-real.txt ;;
*) echo "bpg: BPG_BACKEND is sim or real, not $backend" >&2; exit 2 ;;
esac

# Inside the namespace: the second half, below.
if [ -z "${BPG_IN_NETNS:-}" ]; then
	start=$(date +%s)
	out=${BPG_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/caddy-proxmox-bpg.XXXXXX")}
	mkdir -p "$out/bin"

	# The Terraform-protocol CLI.
	tf=${TF_ACC_TERRAFORM_PATH:-}
	[ -n "$tf" ] || tf=$(command -v terraform || true)
	if [ -z "$tf" ]; then
		tofu=$(sed -n 's/^require github.com\/opentofu\/opentofu \(v[^ ]*\)$/\1/p' "$tools/tofu/go.mod")
		dir=$cache/tofu-$tofu
		tf=$dir/tofu
		if [ ! -x "$tf" ]; then
			mkdir -p "$dir"
			exec 9>"$dir/.build.lock"
			flock 9
			if [ ! -x "$tf" ]; then
				echo "building OpenTofu $tofu (cold: ~10 min)" >&2
				(cd "$tools/tofu" && GOFLAGS=-mod=mod go build -trimpath -o "$tf.tmp" github.com/opentofu/opentofu/cmd/tofu)
				mv "$tf.tmp" "$tf"
			fi
			exec 9>&-
		fi
	fi
	# An empty CLI configuration: nothing of the machine's ~/.terraformrc
	# leaks in (and the CLI does not warn about a missing one).
	: >"$out/terraformrc"
	export TF_CLI_CONFIG_FILE=$out/terraformrc
	version=$("$tf" version | sed -n 1p) # not head: pipefail and SIGPIPE
	case $version in
	OpenTofu*) export TF_ACC_PROVIDER_HOST=registry.opentofu.org ;;
	esac
	echo "bpg: CLI $tf ($version)"

	# The test binaries, one per package, cached by what makes them.
	pkgs=$(awk '!/^#/ && NF {print "github.com/bpg/terraform-provider-proxmox/" $1}' "$here/tests.txt")
	key=$( (go env GOVERSION; cat "$tools/bpg/go.mod" "$tools/bpg/go.sum"; echo $pkgs) | sha256sum | cut -c1-16)
	bins=$cache/bpg-tests/$key
	if [ ! -d "$bins" ]; then
		rm -rf "$bins.tmp.$$"
		(cd "$tools/bpg" && go test -c -tags acceptance -o "$bins.tmp.$$/" $pkgs)
		mv -T "$bins.tmp.$$" "$bins" 2>/dev/null || rm -rf "$bins.tmp.$$"
		# Binaries of other versions are ~1 GB each: keep only these.
		find "$cache/bpg-tests" -mindepth 1 -maxdepth 1 ! -name "$key*" -exec rm -rf {} +
		echo "bpg: test binaries built in $(($(date +%s) - start))s"
	fi
	rmdir "$out/bin" && ln -s "$bins" "$out/bin"

	caddy=${CADDY_PROXMOX_CADDY:-$repo/caddy}
	[ -x "$caddy" ] || { echo "bpg: no $caddy; run ./xcaddy.sh" >&2; exit 1; }
	if [ "$backend" = real ]; then
		CADDY_PROXMOX_TESTBIN=${CADDY_PROXMOX_TESTBIN:-$("$repo/testenv/build-binaries.sh")}
		export CADDY_PROXMOX_TESTBIN
		(cd "$repo" && go build -o "$out/cluster" ./testenv/bpg/cluster)
	fi
	ns=(unshare --net)
	[ "$(id -u)" -eq 0 ] || ns=(unshare --net --map-root-user)
	BPG_KEEP=${BPG_OUT:+1} BPG_IN_NETNS=1 BPG_OUT=$out BPG_START=$start TF_ACC_TERRAFORM_PATH=$tf CADDY_PROXMOX_CADDY=$caddy \
		exec "${ns[@]}" "$0" "$@"
fi

out=$BPG_OUT
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

ip link set lo up
ip addr add 198.18.0.1/32 dev lo

cluster=simulate
if [ "$backend" = real ]; then
	# The real control plane, started while the download server's files
	# are written; ./caddy gets its kubeconfig once it serves.
	# With kubevirtsim's stand-in cdi-uploadproxy (the real one is a pod no
	# node stand-in runs) for uploads and the downloads the plugin converts.
	"$out/cluster" -kubeconfig "$out/kubeconfig" \
		-upload-proxy 127.0.0.1:18443 -upload-proxy-ca "$out/uploadproxy.pem" >"$out/cluster.log" 2>&1 &
	pids+=($!)
	cluster_pid=$!
	cluster="kubeconfig $out/kubeconfig
		cdi_upload_proxy https://127.0.0.1:18443 {
			ca_file $out/uploadproxy.pem
		}"
fi

# A tiny stand-in for cloud-images.ubuntu.com and download.proxmox.com:
# the simulated CDI does not read what it imports.
www=$out/www
mkdir -p "$www/minimal/releases/noble/release" "$www/images/system"
head -c 1048576 /dev/zero >"$www/minimal/releases/noble/release/ubuntu-24.04-minimal-cloudimg-amd64.img"
head -c 1048576 /dev/zero >"$www/images/system/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"

if [ "$backend" = real ]; then
	for _ in $(seq 1500); do
		{ [ -e "$out/kubeconfig" ] || ! kill -0 "$cluster_pid" 2>/dev/null; } && break
		sleep 0.2
	done
	[ -e "$out/kubeconfig" ] || { echo "bpg: the real control plane did not come up:" >&2; tail -30 "$out/cluster.log" >&2; exit 1; }
	echo "bpg: real control plane up after $(($(date +%s) - BPG_START))s"
fi

token=5f0c1a2e-3b4d-4c5e-8f90-a1b2c3d4e5f6
password=changeme
cat >"$out/Caddyfile" <<EOF
{
	admin off
	skip_install_trust
	storage file_system $out/caddy-data
	auto_https disable_redirects
	servers {
		protocols h1
	}
	default_sni localhost
}

https://127.0.0.1:8006, https://localhost:8006 {
	bind 127.0.0.1
	tls internal
	log {
		output file $out/access.log
	}
	proxmox_api {
		$cluster
		token root@pam!ci $token
		user root@pam $password
	}
}

http://198.18.0.1:8080 {
	bind 198.18.0.1
	root * $www
	file_server
}
EOF
XDG_DATA_HOME=$out/xdg XDG_CONFIG_HOME=$out/xdg "$CADDY_PROXMOX_CADDY" run --config "$out/Caddyfile" >"$out/caddy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	code=$(curl -sk -o /dev/null -w '%{http_code}' https://127.0.0.1:8006/api2/json/version || true)
	[ "$code" = 401 ] && break
	sleep 0.2
done
[ "$code" = 401 ] || { echo "bpg: caddy did not come up (last status $code):" >&2; tail -20 "$out/caddy.log" >&2; exit 1; }

export TF_ACC=1 CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
export PROXMOX_VE_ENDPOINT=https://127.0.0.1:8006/
export PROXMOX_VE_INSECURE=true
export PROXMOX_VE_API_TOKEN="root@pam!ci=$token"
export PROXMOX_VE_USERNAME=root@pam PROXMOX_VE_PASSWORD=$password
export PROXMOX_VE_ACC_NODE_NAME=kv-node-1-lab-internal
export PROXMOX_VE_ACC_NODE_SSH_ADDRESS=127.0.0.1
export PROXMOX_VE_ACC_TEST_FILE_SERVER_IP=198.18.0.1
export PROXMOX_VE_ACC_CLOUD_IMAGES_SERVER=http://198.18.0.1:8080
export PROXMOX_VE_ACC_CONTAINER_IMAGES_SERVER=http://198.18.0.1:8080
export TF_ACC_TEMP_DIR=$out/tf
mkdir -p "$TF_ACC_TEMP_DIR" "$out/cwd"

# skip_for PKG TEST: the -test.skip pattern of one top-level test from
# not-applicable.txt ("" when nothing of it is listed).
skip_for() {
	local subs
	subs=$(awk -v p="$1" -v t="$2" '!/^#/ && $1 == p && index($2, t "/") == 1 {print substr($2, length(t) + 2)}' "$here/not-applicable.txt" |
		sed 's/[][\\.^$*+?(){}|]/\\&/g' | paste -sd '|')
	[ -z "$subs" ] || printf '^%s$/^(%s)$' "$2" "$subs"
}

# run_one PKG TEST: one top-level test in its own process, so that a hang
# ends at BPG_TEST_TIMEOUT and takes only that test with it. It runs in an
# empty folder of its own: terraform-plugin-testing links every folder of
# the working directory into each test's new working directory, and in
# TF_ACC_TEMP_DIR those are the other tests' directories, which vanish as
# they end ("unable to symlink directory ...: no such file or directory").
run_one() {
	local pkg=$1 test=$2 bin log skip
	bin=$out/bin/$(basename "$pkg").test
	log=$out/log/${pkg//\//_}.$test.log
	skip=$(skip_for "$pkg" "$test")
	(cd "$out/cwd" && "$bin" -test.v -test.count=1 -test.run "^$test\$" ${skip:+-test.skip "$skip"} \
		-test.timeout "${BPG_TEST_TIMEOUT:-10m}" -test.parallel "${BPG_PARALLEL:-4}") >"$log" 2>&1 || true
}

mkdir -p "$out/log"
jobs=()
while read -r pkg pattern; do
	bin=$out/bin/$(basename "$pkg").test
	for test in $("$bin" -test.list "$pattern" | grep '^Test' | grep -E -- "$filter" || true); do
		if awk -v p="$pkg" -v t="$test" '!/^#/ && $1 == p && $2 == t {f = 1} END {exit !f}' "$here/not-applicable.txt"; then
			continue
		fi
		jobs+=("$pkg $test")
	done
done < <(awk '!/^#/ && NF' "$here/tests.txt")

echo "bpg: ${#jobs[@]} top-level tests, ${BPG_JOBS:-2} at a time; logs in $out/log"
export -f run_one skip_for
export out here
printf '%s\n' "${jobs[@]}" | xargs -r -P "${BPG_JOBS:-2}" -L1 bash -c 'run_one "$@"' _

status=0
"$here/summarize.sh" "$out" "$here" "$(($(date +%s) - BPG_START))" "$known" || status=$?
cleanup
trap - EXIT
# The logs of a run that went as expected are not kept, unless asked for.
if [ "$status" -eq 0 ] && [ -z "${BPG_KEEP:-}" ]; then
	rm -rf "$out"
else
	echo "bpg: logs in $out"
fi
exit "$status"
