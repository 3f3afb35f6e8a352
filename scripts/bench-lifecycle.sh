#!/usr/bin/env bash
# A dataset's lifecycle at scale (issue 50): 1,000 versions of a dataset
# that holds one file in all of them; `forget --keep-last 100` (900
# versions expire) beside a `gc` over the same store in the same run, and
# `erase` of the file from all 1,000 versions (an erasure first waits as
# gc does, the store's deadline plus 5 s, for commits in flight on other
# hosts; the work is shown apart); `tier` of a version
# holding a 256 MiB file to a colder folder beside a plain `cp -a` of the
# same packs made as durable (`sync`), and reading the file from the colder tier beside reading it
# from the store (page cache dropped before each).
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
  t=$(now); "$BIN" erase lc people/jane.csv --reason bench >/dev/null; erase=$(since "$t")
  echo "$run $forget $gc $erase" | tee -a "$res" >&2
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
done
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
T=$ROOT/tier-base
if [ ! -e "$T/done" ]; then
  rm -rf "$T" && mkdir -p "$T/src"
  export DETAFS_STORE=$T/store DETAFS_CACHE=$T/cache DETAFS_STAGING=$T/staging
  "$BIN" init --plaintext >/dev/null 2>&1
  "$BIN" dataset create t >/dev/null
  head -c $((256 << 20)) /dev/urandom > "$T/src/big.bin"
  "$BIN" commit t --from "$T/src" -m v1 >/dev/null
  rm "$T/src/big.bin"; echo small > "$T/src/small.txt"
  "$BIN" commit t --from "$T/src" -m v2 >/dev/null
  touch "$T/done"
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
fi
tres=$ROOT/tier-results.txt; : > "$tres"
for run in $(seq "$RUNS"); do
  W=$ROOT/tier-work; rm -rf "$W" "$ROOT/tier-copy"; cp -a "$T" "$W"
  export DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
  rm -rf "$W/cache"
  drop_caches; t=$(now); "$BIN" cat t v1 big.bin > /dev/null; hot=$(since "$t")
  # The packs v1 alone reaches, as the tier will move them: copied plainly.
  # (the big file's: every pack over 1 MB; v1's tree and v2's are small)
  keys=$(find "$W/store/packs" -type f -size +1M)
  # The best the machine does (a plain copy), then as durable as the
  # tier's move is (it syncs each pack before deleting it).
  drop_caches; t=$(now); mkdir -p "$ROOT/tier-copy"; cp -a $keys "$ROOT/tier-copy/"; plain=$(since "$t")
  sync "$ROOT"/tier-copy/*; cp=$(since "$t")
  bytes=$(du -cb $keys | tail -1 | cut -f1)
  drop_caches; t=$(now); "$BIN" tier t --older-than 0s --cold-store "$W/cold" >/dev/null; tier=$(since "$t")
  rm -rf "$W/cache"
  drop_caches; t=$(now); "$BIN" cat t v1 big.bin > /dev/null; cold=$(since "$t")
  echo "$run $hot $cold $cp $tier $bytes $plain" | tee -a "$tres" >&2
  unset DETAFS_STORE DETAFS_CACHE DETAFS_STAGING
done
python3 - "$tres" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
rng = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
mb = med(4) / 1e6
print(f"| colder tier, 256 MiB (runs: {len(rows)}, medians, spread) | detafs | reference | ratio |")
print("|---|---|---|---|")
print(f"| `tier` of v1 ({mb:.0f} MB of packs) | {med(3):.2f} s ({rng(3)}) | plain `cp -a` of the same packs: {med(5):.2f} s ({rng(5)}), {med(5)/med(3):.2f} of its speed; with a `sync` after: {med(2):.2f} s ({rng(2)}), {med(2)/med(3):.2f} |")
print(f"| `detafs cat` of the file, page cache dropped | from the colder tier: {med(1):.2f} s ({rng(1)}) | from the store: {med(0):.2f} s ({rng(0)}) | {med(0)/med(1):.2f} of the store's speed |")
PY
python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
rng = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print(f"| 1,000 versions (runs: {len(rows)}, medians, spread) | time | reference |")
print("|---|---|---|")
print(f"| `forget --keep-last 100` (900 versions expire) | {med(0):.2f} s ({rng(0)}) | `gc` of the same store: {med(1):.2f} s ({rng(1)}), {med(0)/med(1):.2f}x |")
print(f"| `erase` of a file in all 1,000 versions | {med(2):.2f} s ({rng(2)}) | of which the wait for commits in flight on other hosts (gc's: the store's deadline + 5 s; a local store's deadline is 0): 5 s; the work: {med(2)-5:.2f} s |")
PY
