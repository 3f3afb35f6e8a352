# Sourced by the benchmark scripts: the release build they measure (BIN)
# and where their data lives (ROOT, BENCH_DIR or /var/tmp/detafs-bench).
ROOT=${BENCH_DIR:-/var/tmp/detafs-bench}
cargo build --release -q
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/detafs
