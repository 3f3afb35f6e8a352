#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit, property and end-to-end
# tests (the Python package's too), first on a local folder store (format 2, sealed), then the
# end-to-end suites again on S3 (LocalStack on 127.0.0.1:4566, started here)
# with plaintext stores (format 1) and on Azure Blob Storage (Azurite on
# 127.0.0.1:10000, started here) with sealed ones, so each format and each
# backend runs them; then each fuzz target for
# a bounded time, and a check that a build without the test feature ignores
# FAILPOINTS.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
source scripts/test-setup.sh
# tests/posix.rs runs pjdfstest (the Rust one) against staging.
if ! command -v pjdfstest >/dev/null; then
  dpkg -s libacl1-dev >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libacl1-dev >/dev/null
  }
  cargo install --quiet --locked pjdfstest@0.2.2
fi
./scripts/localstack.sh
./scripts/s3rver.sh
./scripts/azurite.sh
cargo fmt --all -- --check
# Every suite (`all-tests`: FUSE, S3 and Azure servers, network namespaces,
# failure injection; Cargo.toml says which suite needs what). Releases
# cannot inject failures.
cargo clippy --all-targets --features all-tests -- -D warnings
cargo clippy -p detafs-python -- -D warnings
cargo test --all-targets --features all-tests
cargo test --doc --features all-tests
# The Python package (python/): a wheel from the same build's dependencies,
# installed in the test environment, tested against a local store and S3
# on LocalStack by pytest (its summary line ends the output).
rm -rf target/wheels
maturin build --quiet -m python/Cargo.toml --out target/wheels
pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/detafs-*.whl
DETAFS_BIN="$PWD/target/debug/detafs" python3 -m pytest -q -p no:cacheprovider python/tests
DETAFS_TEST_STORE=s3 DETAFS_TEST_PLAINTEXT=1 cargo test --features all-tests --test cli --test crash --test race --test mount --test workflow --test compliance
DETAFS_TEST_STORE=azure cargo test --features all-tests --test cli --test crash --test race --test mount --test workflow
# The mount's end-to-end suites again with every mount (and staging's
# commands) through a gateway on 127.0.0.1, with and without a policy
# that hides a version and a folder (tests/common: `Remote`).
DETAFS_TEST_MOUNT=gateway cargo test --features all-tests --test mount --test staged_work --test workflow --test compliance
DETAFS_TEST_MOUNT=gateway DETAFS_TEST_POLICY=hides cargo test --features all-tests --test mount --test staged_work
./scripts/fuzz.sh "${DETAFS_FUZZ_SECONDS:-45}"
./scripts/check-release-failpoints.sh
# README's first command on fresh Debian 12 and 13 roots (root only).
if [ "$(id -u)" = 0 ]; then ./scripts/check-quickstart.sh; fi
