#!/usr/bin/env bash
# Two builds side by side, run alternately in the same session so the
# machine's noise falls on both (docs/benchmarks.md, "before and after"):
# commit --from of the 20,000 small files and a 256 MiB file (v1), an edit
# of 50 small files and 1 MiB of the big one (v2), a warm `tar` of the
# small files of v1 through a read-write mount, `cp -a` of 10,000 small
# files into staging/. Prints each step's median (lowest-highest).
#   scripts/bench-ab.sh OLD_BIN NEW_BIN [RUNS]   (default 6 runs each)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 RUNS=${3:-6}
ROOT=${BENCH_DIR:-/var/tmp/detafs-bench}
[ -d "$ROOT/data/small" ] || { echo "run scripts/bench.sh first (it makes $ROOT/data)" >&2; exit 1; }
W=$ROOT/ab
# A run cut short leaves its mount: never delete through one.
unmount() { mountpoint -q "$W/run/mnt" 2>/dev/null && { umount "$W/run/mnt" || umount -l "$W/run/mnt"; }; true; }
unmount; trap unmount EXIT
rm -rf "$W"; mkdir -p "$W/src"
cp -a "$ROOT/data/small" "$W/src/"
head -c 256M "$ROOT/data/big.bin" > "$W/src/big.bin"
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
res=$W/results.txt; : > "$res"
one() {
  local label=$1 bin=$2 d=$W/run
  rm -rf "$d"; mkdir -p "$d/mnt"; cp -a "$W/src" "$d/work"; sync
  export HOME=$d/home DETAFS_STORE=$d/store DETAFS_CACHE=$d/cache DETAFS_STAGING=$d/staging
  "$bin" init >/dev/null 2>&1; "$bin" dataset create ab >/dev/null
  local t v1 v2 tar cp
  t=$(now); "$bin" commit ab --from "$d/work" -m v1 >/dev/null; v1=$(since "$t")
  python3 - "$d/work" <<'PY'
import os, sys
w = sys.argv[1]
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(f"{w}/small") for f in fs)[:50]
for f in files:
    open(f, "a").write("edited\n")
with open(f"{w}/big.bin", "r+b") as b:
    b.seek(100 << 20); b.write(os.urandom(1 << 20))
PY
  t=$(now); "$bin" commit ab --from "$d/work" -m v2 >/dev/null; v2=$(since "$t")
  "$bin" mount ab "$d/mnt" --daemon >/dev/null
  tar -C "$d/mnt/versions/v1" -cf - small | cat >/dev/null
  t=$(now); tar -C "$d/mnt/versions/v1" -cf - small | cat >/dev/null; tar=$(since "$t")
  # 100 folders of 100 files.
  local dirs=("$d/work/small"/dir*)
  mkdir -p "$d/half"; cp -a "${dirs[@]:0:100}" "$d/half/"
  t=$(now); cp -a "$d/half" "$d/mnt/staging/"; sync; cp=$(since "$t")
  "$bin" umount "$d/mnt"
  echo "$label $v1 $v2 $tar $cp" | tee -a "$res" >&2
}
for run in $(seq "$RUNS"); do
  one old "$OLD"
  one new "$NEW"
done
python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
steps = ["commit v1", "commit v2", "warm `tar` piped to `cat`, 20,000 files, read-write mount", "cp -a 10,000 files into staging"]
print("| step | old | new |\n|---|---|---|")
for i, step in enumerate(steps, 1):
    cells = []
    for label in ("old", "new"):
        v = [float(r[i]) for r in rows if r[0] == label]
        cells.append(f"{statistics.median(v):.2f} s ({min(v):.2f}–{max(v):.2f})")
    print(f"| {step} | {cells[0]} | {cells[1]} |")
PY
