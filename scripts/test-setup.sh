#!/usr/bin/env bash
# Installs what the tests need beyond scripts/setup.sh, if missing: the
# tools they drive (second users, TLS, network namespaces, curl, rsync) and
# a virtual environment with the Python packages they call (pandas,
# pyarrow, DuckDB, requests, boto3, fsspec, polars, pytest, the AWS CLI,
# s3fs, Selenium; maturin builds the detafs package's wheel), put first on PATH so
# the tests' `python3`
# is the environment's. The system Python is never changed (PEP 668).
# Sourced by test.sh after setup.sh.
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v python3 >/dev/null || missing+=(python3)
command -v bc >/dev/null || missing+=(bc)
command -v rsync >/dev/null || missing+=(rsync)
command -v sqlite3 >/dev/null || missing+=(sqlite3)
command -v curl >/dev/null || missing+=(curl)
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables >/dev/null || missing+=(iptables)
# tests/web.rs drives a real browser: Debian's Chromium and its driver.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# Debian's python3 makes environments only with python3-venv.
if command -v python3 >/dev/null && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  # A python3 that is not the distribution's (pyenv, a self-built one)
  # without venv: nothing apt can add to it.
  echo "python3 ($(command -v python3)) cannot make virtual environments (no venv/ensurepip)" >&2
  exit 1
fi
TEST_VENV=${DETAFS_TEST_VENV:-$PWD/target/test-venv}
if ! "$TEST_VENV/bin/python3" -c 'import pandas, pyarrow, duckdb, requests, boto3, fsspec, polars, pytest, s3fs, selenium' 2>/dev/null \
  || [ ! -x "$TEST_VENV/bin/maturin" ] || [ ! -x "$TEST_VENV/bin/aws" ]; then
  echo "making $TEST_VENV with pandas pyarrow duckdb requests boto3 fsspec polars pytest maturin awscli s3fs selenium" >&2
  rm -rf "$TEST_VENV"
  python3 -m venv "$TEST_VENV"
  "$TEST_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "pandas==3.1.1" "pyarrow==26.0.1" "duckdb==2.0.1" "requests==2.34.2" "boto3==1.43.11" \
    "fsspec==2026.9.0" "polars==2.1.0" "pytest==9.2.0" "maturin==1.16.0" \
    "awscli==1.46.3" "s3fs==2026.9.0" "selenium==4.51.0"
fi
export PATH="$TEST_VENV/bin:$PATH"
