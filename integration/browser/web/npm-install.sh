#!/usr/bin/env bash
# Installs the npm packages the browser tests load (noVNC and xterm.js, as
# pinned by package-lock.json beside this script) with `npm ci` into a
# cache folder keyed by the lock file: a second run is instant and nothing
# lands in the repository. Prints the node_modules folder on stdout.
#
# CADDY_PROXMOX_WEB_CACHE overrides the cache folder. Concurrent runs
# (parallel test packages) wait for each other instead of installing twice.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=$(sha256sum "$here/package-lock.json" | cut -c1-16)
out=${CADDY_PROXMOX_WEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caddy-proxmox/npm/$key}
have() { [ -f "$out/node_modules/.installed" ]; }
if ! have; then
	mkdir -p "$out"
	exec 9>"$out/.install.lock"
	flock 9
	if ! have; then
		echo "installing noVNC and xterm.js from the npm registry into $out" >&2
		cp "$here/package.json" "$here/package-lock.json" "$out/"
		(cd "$out" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
		touch "$out/node_modules/.installed"
	fi
fi
echo "$out/node_modules"
