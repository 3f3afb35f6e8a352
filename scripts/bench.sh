#!/usr/bin/env bash
# Store and commit benchmark (docs/benchmarks.md). Medians of RUNS runs, each
# beside `openssl dgst -sha256` over the same bytes in the same run.
#   scripts/bench.sh [RUNS]        (default 3; BENCH_DIR default /var/tmp/detafs-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
ROOT=${BENCH_DIR:-/var/tmp/detafs-bench}
cargo build --release -q
BIN=$PWD/${CARGO_TARGET_DIR:-target}/release/detafs
mkdir -p "$ROOT"
if [ ! -d "$ROOT/data" ]; then
  echo "generating the dataset in $ROOT/data" >&2
  rm -rf "$ROOT/data.tmp" && python3 scripts/gen-dataset.py "$ROOT/data.tmp" && mv "$ROOT/data.tmp" "$ROOT/data"
fi
export DETAFS_STORE=$ROOT/store DETAFS_CACHE=$ROOT/cache
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
results=$ROOT/results.txt; : > "$results"

for run in $(seq "$RUNS"); do
  rm -rf "$ROOT/work" "$ROOT/store" "$ROOT/cache" "$ROOT/export" "$ROOT/cp"
  cp -a "$ROOT/data" "$ROOT/work"; sync
  # ext4 allocates inodes slowly for a while after mass deletes: let that pass
  # so the export and `cp -a` figures compare like with like.
  sleep "${BENCH_SETTLE:-40}"
  bytes=$(du -sb --apparent-size "$ROOT/work" | cut -f1)
  t=$(now); find "$ROOT/work" -type f -print0 | xargs -0 cat | openssl dgst -sha256 >/dev/null; sha=$(since "$t")
  "$BIN" init >/dev/null; "$BIN" dataset create bench >/dev/null
  t=$(now)
  /usr/bin/time -f "%M" -o "$ROOT/rss" "$BIN" commit bench --from "$ROOT/work" -m v1 >/dev/null
  v1=$(since "$t"); rss=$(cat "$ROOT/rss")
  objects=$(find "$ROOT/store/packs" -type f | wc -l)
  t=$(now); "$BIN" commit bench --from "$ROOT/work" -m same >/dev/null 2>&1 || true; same=$(since "$t")
  changed=$(python3 scripts/gen-dataset.py --edit "$ROOT/work"); sync
  t=$(now)
  /usr/bin/time -f "%M" -o "$ROOT/rss2" "$BIN" commit bench --from "$ROOT/work" -m v2 >/dev/null
  v2=$(since "$t"); rss2=$(cat "$ROOT/rss2")
  t=$(now); cp -a "$ROOT/work" "$ROOT/cp"; sync; cp_s=$(since "$t")
  t=$(now)
  /usr/bin/time -f "%M" -o "$ROOT/rss3" "$BIN" export bench v1 "$ROOT/export" 2>/dev/null; sync
  export_s=$(since "$t"); rss3=$(cat "$ROOT/rss3")
  /usr/bin/time -f "%M" -o "$ROOT/rss4" "$BIN" cat bench v1 big.bin | sha256sum >/dev/null
  rss4=$(cat "$ROOT/rss4")
  delta=$("$BIN" log bench --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[1]["delta_size"])')
  echo "$run $bytes $sha $v1 $rss $objects $same $changed $v2 $delta $rss2 $export_s $rss3 $rss4 $cp_s" | tee -a "$results" >&2
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
mib = 1 << 20
n, sha, v1, rss, objs, same, changed, v2, delta, rss2, exp, rss3, rss4, cp = (med(i) for i in range(1, 15))
print(f"| runs | {len(rows)} (medians) |")
print("|---|---|")
print(f"| dataset | {n / mib:.0f} MiB, {int(objs)} pack objects after v1 |")
print(f"| sha256 reference (`openssl dgst -sha256`) | {sha:.2f} s, {n / mib / sha:.0f} MiB/s |")
print(f"| commit v1 | {v1:.2f} s, {n / mib / v1:.0f} MiB/s = {sha / v1 * 100:.0f}% of sha256 |")
print(f"| commit v1 peak RSS | {rss / 1024:.0f} MiB |")
print(f"| no-change commit | {same:.2f} s |")
print(f"| small edit: bytes changed | {changed / mib:.2f} MiB |")
print(f"| commit v2 | {v2:.2f} s, peak RSS {rss2 / 1024:.0f} MiB |")
print(f"| export v1 (then sync) | {exp:.2f} s, peak RSS {rss3 / 1024:.0f} MiB; `cp -a` of the same tree (then sync): {cp:.2f} s |")
print(f"| cat of the 512 MiB file | peak RSS {rss4 / 1024:.0f} MiB |")
print(f"| v2 bytes added to the store | {delta / mib:.2f} MiB = {delta / changed:.2f}x the bytes changed |")
PY
