#!/usr/bin/env bash
# A dataset's lifecycle at scale (issue 50): 1,000 versions of a dataset
# that holds one file in all of them; `forget --keep-last 100` (900
# versions expire) beside a `gc` over the same store in the same run, and
# `erase` of the file from all 1,000 versions (with --store-timeout 5s:
# an erasure first waits as gc does, the timeout plus 5 s, for commits in
# flight on other hosts; the work is shown apart).
#   scripts/bench-lifecycle.sh [RUNS]   (default 3; BENCH_DIR default /var/tmp/detafs-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. scripts/release-build.sh
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
BASE=$ROOT/lc-base
if [ ! -e "$BASE/done" ]; then
  rm -rf "$BASE" && mkdir -p "$BASE/src/people"
  export DETAFS_STORE=$BASE/store DETAFS_CACHE=$BASE/cache DETAFS_STAGING=$BASE/staging
  "$BIN" init --plaintext >/dev/null 2>&1
  "$BIN" dataset create lc >/dev/null
  head -c 65536 /dev/urandom > "$BASE/src/people/jane.csv"
  for i in $(seq 1000); do
    echo "$i" > "$BASE/src/counter.txt"
    "$BIN" commit lc --from "$BASE/src" -m "v$i" >/dev/null
  done
  touch "$BASE/done"
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
fi
res=$ROOT/lifecycle-results.txt; : > "$res"
for run in $(seq "$RUNS"); do
  W=$ROOT/lc-work; rm -rf "$W"; cp -a "$BASE" "$W"
  export DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
  "$BIN" retention set lc --keep-last 100 >/dev/null
  t=$(now); "$BIN" forget lc >/dev/null 2>&1; forget=$(since "$t")
  t=$(now); "$BIN" gc --grace 13h >/dev/null 2>&1; gc=$(since "$t")
  n=$("$BIN" log lc --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
  [ "$n" = 100 ] || { echo "$n versions left, not 100" >&2; exit 1; }
  # The erasure on a fresh copy: the file in all 1,000 versions.
  rm -rf "$W"; cp -a "$BASE" "$W"
  t=$(now); "$BIN" --store-timeout 5s erase lc people/jane.csv --reason bench >/dev/null; erase=$(since "$t")
  echo "$run $forget $gc $erase" | tee -a "$res" >&2
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
done
python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
rng = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print(f"| 1,000 versions (runs: {len(rows)}, medians, spread) | time | reference |")
print("|---|---|---|")
print(f"| `forget --keep-last 100` (900 versions expire) | {med(0):.2f} s ({rng(0)}) | `gc` of the same store: {med(1):.2f} s ({rng(1)}), {med(0)/med(1):.2f}x |")
print(f"| `erase` of a file in all 1,000 versions (`--store-timeout 5s`) | {med(2):.2f} s ({rng(2)}) | of which the wait for commits in flight: 10 s; the work: {med(2)-10:.2f} s |")
PY
