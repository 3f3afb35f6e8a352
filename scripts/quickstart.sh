#!/usr/bin/env bash
# Installs what is missing, builds detafs, and records a demo dataset with two
# versions in the embedded default store; then shows its history.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -q
BIN=$PWD/${CARGO_TARGET_DIR:-target}/release/detafs
demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/tables"
printf 'id,city,temp\n1,Oslo,3.5\n2,Lima,19.0\n' > "$demo/tables/weather.csv"
printf '# Demo dataset\nWeather readings.\n' > "$demo/README.md"

"$BIN" dataset list | grep -qx demo || "$BIN" dataset create demo
"$BIN" commit demo --from "$demo" -m "first readings" || true
printf '3,Nairobi,24.1\n' >> "$demo/tables/weather.csv"
"$BIN" commit demo --from "$demo" -m "add Nairobi" || true
echo "--- detafs log demo"
"$BIN" log demo
echo "--- detafs diff demo v1 latest --stat"
"$BIN" diff demo v1 latest --stat
echo "--- detafs cat demo latest tables/weather.csv"
"$BIN" cat demo latest tables/weather.csv
echo
echo "The binary is $BIN; try: $BIN --help"
