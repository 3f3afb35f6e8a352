#!/usr/bin/env bash
# Installs what detafs needs on a fresh Debian/Ubuntu machine, if missing.
# Sourced by quickstart.sh and test.sh.
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
command -v cc >/dev/null || missing+=(build-essential)
command -v openssl >/dev/null || missing+=(openssl)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v python3 >/dev/null || missing+=(python3)
command -v bc >/dev/null || missing+=(bc)
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v rsync >/dev/null || missing+=(rsync)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
command -v curl >/dev/null || missing+=(curl)
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The mount tests read versions with pandas, pyarrow and DuckDB; the
# gateway's tests call it with requests.
if ! python3 -c 'import pandas, pyarrow, duckdb, requests' 2>/dev/null; then
  echo "installing Python packages: pandas pyarrow duckdb requests" >&2
  python3 -m pip install --quiet --disable-pip-version-check \
    "pandas==3.1.1" "pyarrow==26.0.1" "duckdb==2.0.1" "requests==2.34.2"
fi
if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || {
  echo "cargo not found: install Rust from https://rustup.rs, then re-run" >&2
  exit 1
}
