#!/usr/bin/env bash
# Builds ./caddy: Caddy v2.11.9 with caddy-proxmox from this working tree.
# With caddy-l4 (its layer4 app and proxy handler, for the TCP/UDP
# proxmox_wake), at the version our go.mod requires.
# Installs xcaddy first when it is missing. xcaddy does not read our go.mod's
# replace directives, so they are passed again here. The module is not
# published: a pinned zero pseudo-version makes `go get` use the
# replacement instead of asking the module proxy for it.
set -euo pipefail
cd "$(dirname "$0")"
CADDY_VERSION=${CADDY_VERSION:-v2.11.9}
export PATH="$(go env GOPATH)/bin:$PATH"
if ! command -v xcaddy >/dev/null 2>&1; then
	echo "installing xcaddy" >&2
	go install github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
fi
replaces=()
while read -r old arrow new ver; do
	[ "$arrow" = "=>" ] || continue
	replaces+=(--replace "$old=$new@$ver")
done < <(sed -n '/^replace (/,/^)/p' go.mod | grep '=>')
L4_VERSION=$(awk '$1 == "github.com/mholt/caddy-l4" { print $2 }' go.mod)
XCADDY_SKIP_CLEANUP=${XCADDY_SKIP_CLEANUP:-0} xcaddy build "$CADDY_VERSION" \
	--output ./caddy \
	--with "github.com/caddy-proxmox/caddy-proxmox@v0.0.0-00010101000000-000000000000=." \
	--with "github.com/mholt/caddy-l4@${L4_VERSION}" \
	"${replaces[@]}"
./caddy version
# Read the list once: grep -q would stop reading early, and pipefail would
# then count list-modules' broken pipe as a failure.
modules=$(./caddy list-modules)
grep -E 'proxmox' <<<"$modules" || { echo "proxmox modules missing from ./caddy" >&2; exit 1; }
grep -qx 'layer4.handlers.proxy' <<<"$modules" || { echo "caddy-l4's proxy missing from ./caddy" >&2; exit 1; }
