#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit, property and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
