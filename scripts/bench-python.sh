#!/usr/bin/env bash
# The Python package beside fsspec's local filesystem on the same bytes,
# in the same run (docs/benchmarks.md, issue 37): the 512 MiB file read
# through fsspec.open, pd.read_parquet of a ~100 MiB Parquet file,
# fs.find over the 20,000 small files, small-file reads on 1 and 8
# threads, and a transaction of 1,000 files beside `detafs commit --from`.
#   scripts/bench-python.sh [RUNS]   (default 3; BENCH_DIR default /var/tmp/detafs-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. scripts/release-build.sh
VENV=$ROOT/py-venv
if ! "$VENV/bin/python3" -c 'import pandas, pyarrow, fsspec' 2>/dev/null || [ ! -x "$VENV/bin/maturin" ]; then
  rm -rf "$VENV" && python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "pandas==3.1.1" "pyarrow==26.0.1" "fsspec==2026.9.0" "maturin==1.16.0"
fi
# The wheel from the release build's artifacts.
rm -rf "$ROOT/py-wheels"
"$VENV/bin/maturin" build --quiet --release -m python/Cargo.toml --out "$ROOT/py-wheels"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$ROOT"/py-wheels/detafs-*.whl
if [ ! -d "$ROOT/data" ]; then
  rm -rf "$ROOT/data.tmp" && python3 scripts/gen-dataset.py "$ROOT/data.tmp" && mv "$ROOT/data.tmp" "$ROOT/data"
fi
exec "$VENV/bin/python3" scripts/bench_python.py "$BIN" "$ROOT" "$RUNS"
