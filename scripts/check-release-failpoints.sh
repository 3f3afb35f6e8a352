#!/usr/bin/env bash
# A build without the `failpoints` feature has no failure injection: a
# FAILPOINTS variable that would make a test build panic before its commit
# point changes nothing, and the commit lands.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Same target folder (only detafs and `fail` rebuild); the binary is copied
# aside before the tests' build replaces it again.
cargo build --quiet --bin detafs
bin="$tmp/detafs"
cp "${CARGO_TARGET_DIR:-target}/debug/detafs" "$bin"
export DETAFS_STORE="$tmp/store" DETAFS_CACHE="$tmp/cache" DETAFS_STAGING="$tmp/staging"
# `init` writes a key file under the user's config folder: a scratch one.
export HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config"
mkdir "$tmp/src"; echo data > "$tmp/src/f"
"$bin" init >/dev/null
"$bin" dataset create ds >/dev/null
FAILPOINTS="before-record=panic;pack-uploaded=panic" "$bin" commit ds --from "$tmp/src" -m one >/dev/null
[ "$("$bin" cat ds v1 f)" = data ] || { echo "FAILPOINTS changed a plain build" >&2; exit 1; }
echo "1 passed, 0 failed: a plain build ignores FAILPOINTS"
