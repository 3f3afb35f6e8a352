#!/usr/bin/env bash
# Installs what building and mounting detafs needs on a fresh Debian/Ubuntu
# machine, if missing: a C compiler (for the crates that build C) and FUSE.
# Nothing goes into the system Python. Sourced by quickstart.sh and test.sh
# (which adds what the tests need: scripts/test-setup.sh).
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
command -v cc >/dev/null || missing+=(build-essential)
command -v fusermount3 >/dev/null || missing+=(fuse3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || {
  echo "cargo not found: install Rust from https://rustup.rs, then re-run" >&2
  exit 1
}
