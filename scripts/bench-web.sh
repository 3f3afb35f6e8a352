#!/usr/bin/env bash
# The web page, measured in headless Chromium (issue 51): the first page
# of a dataset's log of 1,000 versions and a folder of 20,000 files,
# each from navigation to the load event (Navigation Timing); the preview
# of the first 100 rows of a 1 GiB Parquet file (and how many bytes of it
# were read); the page's assets, gzip-compressed. Gateway on 127.0.0.1,
# release build, medians of RUNS navigations each.
#   scripts/bench-web.sh [RUNS]   (default 7; BENCH_DIR default /var/tmp/detafs-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
. scripts/release-build.sh
source scripts/test-setup.sh >/dev/null
W=$ROOT/web
if [ ! -e "$W/done" ]; then
  rm -rf "$W" && mkdir -p "$W/src/many" "$W/src/tables"
  # The 1,000 versions of bench-lifecycle.sh's dataset, made here alike.
  export DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
  "$BIN" init --plaintext >/dev/null 2>&1
  "$BIN" dataset create big >/dev/null
  python3 - "$W/src" <<'PY'
import os, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
src = sys.argv[1]
for i in range(20000):
    open(os.path.join(src, "many", f"f{i:05}"), "w").close()
rng = np.random.default_rng(1)
rows = 1 << 25  # 4 float64 columns: 1 GiB
writer = None
for part in range(32):
    n = rows // 32
    t = pa.table({c: rng.random(n) for c in "abcd"})
    writer = writer or pq.ParquetWriter(os.path.join(src, "tables", "big.parquet"), t.schema, compression="none")
    writer.write_table(t)
writer.close()
PY
  for i in $(seq 1000); do
    echo "$i" > "$W/src/counter.txt"
    "$BIN" commit big --from "$W/src" -m "v$i" >/dev/null
  done
  "$BIN" apikey create bench --scopes read > "$W/key" 2>/dev/null
  touch "$W/done"
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
fi
export DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
"$BIN" serve --listen 127.0.0.1:0 2> "$W/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
until grep -q '^serving ' "$W/serve.log"; do sleep 0.2; done
url=$(sed -n 's/^serving \(https:[^ ]*\)\/$/\1/p' "$W/serve.log")
python3 scripts/bench_web.py "$url" "$(tail -1 "$W/key")" "$RUNS"
assets=$(cat src/gateway/web/assets/* | gzip -9 | wc -c)
echo "assets, gzip -9: $assets bytes"
