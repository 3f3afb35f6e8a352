#!/usr/bin/env bash
# Fuzzes every decoder of store objects and staging's row codec with
# libFuzzer (cargo-fuzz), each for SECONDS (default 45). The stable
# toolchain builds the targets with RUSTC_BOOTSTRAP (cargo-fuzz passes
# options that are nightly-only by name); no sanitizer, so it stays fast.
# A crash fails the run and leaves its input in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-45}"
targets=(marker record tree pack staging_row)
command -v cargo-fuzz >/dev/null || cargo install --quiet --locked cargo-fuzz@0.13.2
export RUSTC_BOOTSTRAP=1
cd fuzz
cargo fuzz build --sanitizer none -O
passed=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  log=$(mktemp)
  if ! cargo fuzz run --sanitizer none -O "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz target $t failed; input in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  echo "fuzz $t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log")"
  rm -f "$log"
  passed=$((passed + 1))
done
echo "$passed passed, 0 failed: fuzz targets"
