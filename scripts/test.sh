#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit, property and end-to-end
# tests, first on a local folder store, then the end-to-end suites again on
# S3 (LocalStack on 127.0.0.1:4566, started here).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
./scripts/localstack.sh
./scripts/s3rver.sh
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
DETAFS_TEST_STORE=s3 cargo test --test cli --test crash --test race --test mount
