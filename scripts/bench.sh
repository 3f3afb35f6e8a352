#!/usr/bin/env bash
# Store and commit benchmark (docs/benchmarks.md). Medians of RUNS runs, each
# beside `openssl dgst -sha256` over the same bytes in the same run.
#   scripts/bench.sh [RUNS] [store|mount|core|million|change|s3|scale|sealed|policy|gateway|remote|all]
#   (default 3 runs, all; BENCH_DIR default /var/tmp/detafs-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
WHAT=${2:-all}
ROOT=${BENCH_DIR:-/var/tmp/detafs-bench}
cargo build --release -q
TARGET=${CARGO_TARGET_DIR:-target}
[[ $TARGET = /* ]] || TARGET=$PWD/$TARGET
BIN=$TARGET/release/detafs
mkdir -p "$ROOT"
if [ ! -d "$ROOT/data" ]; then
  echo "generating the dataset in $ROOT/data" >&2
  rm -rf "$ROOT/data.tmp" && python3 scripts/gen-dataset.py "$ROOT/data.tmp" && mv "$ROOT/data.tmp" "$ROOT/data"
fi
export DETAFS_STORE=$ROOT/store DETAFS_CACHE=$ROOT/cache
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
timed() { local t; t=$(now); "$@" >/dev/null; since "$t"; }
results=$ROOT/results.txt; : > "$results"
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

bench_store() {
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
  delta=$("$BIN" log bench --json | python3 -c 'import json,sys; print({e["version"]: e["delta_size"] for e in json.load(sys.stdin)}[2])')
  echo "$run $bytes $sha $v1 $rss $objects $same $changed $v2 $delta $rss2 $export_s $rss3 $rss4 $cp_s" | tee -a "$results" >&2
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
# The spread of a figure over the runs: its lowest and highest.
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
mib = 1 << 20
n, sha, v1, rss, objs, same, changed, v2, delta, rss2, exp, rss3, rss4, cp = (med(i) for i in range(1, 15))
print(f"| runs | {len(rows)} (medians, spread lowest–highest) |")
print("|---|---|")
print(f"| dataset | {n / mib:.0f} MiB, {int(objs)} pack objects after v1 |")
print(f"| sha256 reference (`openssl dgst -sha256`) | {sha:.2f} s ({sp(2)}), {n / mib / sha:.0f} MiB/s |")
print(f"| commit v1 | {v1:.2f} s ({sp(3)}), {n / mib / v1:.0f} MiB/s = {sha / v1 * 100:.0f}% of sha256 |")
print(f"| commit v1 peak RSS | {rss / 1024:.0f} MiB |")
print(f"| no-change commit | {same:.2f} s ({sp(6)}) |")
print(f"| small edit: bytes changed | {changed / mib:.2f} MiB |")
print(f"| commit v2 | {v2:.2f} s ({sp(8)}), peak RSS {rss2 / 1024:.0f} MiB |")
print(f"| export v1 (then sync) | {exp:.2f} s ({sp(11)}), peak RSS {rss3 / 1024:.0f} MiB; `cp -a` of the same tree (then sync): {cp:.2f} s ({sp(14)}) = {exp / cp:.2f}x |")
print(f"| cat of the 512 MiB file | peak RSS {rss4 / 1024:.0f} MiB |")
print(f"| v2 bytes added to the store | {delta / mib:.2f} MiB = {delta / changed:.2f}x the bytes changed |")
PY
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Reads through a mount of v1 beside the same operation on the source folder.
bench_mount() {
  local mres=$ROOT/mount-results.txt; : > "$mres"
  rm -rf "$ROOT/mstore" "$ROOT/mcache" "$ROOT/mstaging" "$ROOT/mwork" "$ROOT/mcopy"
  cp -a "$ROOT/data" "$ROOT/mwork"
  # A committed file large enough that copying it up to staging takes a while.
  head -c 1500M /dev/urandom > "$ROOT/mwork/huge.bin"; sync
  export DETAFS_STORE=$ROOT/mstore DETAFS_CACHE=$ROOT/mcache DETAFS_STAGING=$ROOT/mstaging
  "$BIN" init >/dev/null; "$BIN" dataset create bench >/dev/null
  "$BIN" commit bench --from "$ROOT/mwork" -m v1 >/dev/null
  local mnt=$ROOT/mnt src=$ROOT/mwork; mkdir -p "$mnt"
  for run in $(seq "$RUNS"); do
    mountpoint -q "$mnt" && "$BIN" umount "$mnt"
    rm -rf "$ROOT/mcopy" "$ROOT/mstaging"; sync; sleep "${BENCH_SETTLE:-40}"
    local pid ready; ready=$(now); pid=$("$BIN" mount bench "$mnt" --daemon | sed -n "s/.*(pid \([0-9]*\),.*/\1/p")
    ls "$mnt/versions" >/dev/null; ready=$(since "$ready")
    local v=$mnt/versions/v1
    drop_caches; local cold_n; cold_n=$(timed cat "$src/big.bin")
    drop_caches; local cold_m; cold_m=$(timed cat "$v/big.bin")
    # Warm: five reads each, so the figure is not a few milliseconds.
    local warm_n warm_m; cat "$src/big.bin" "$v/big.bin" >/dev/null
    warm_n=$(timed sh -c "for i in 1 2 3 4 5; do cat '$src/big.bin'; done")
    warm_m=$(timed sh -c "for i in 1 2 3 4 5; do cat '$v/big.bin'; done")
    # How the page cache holds each: the share of pages in large folios
    # (FUSE files get order-0 pages on kernels before large folio support).
    local folio_n folio_m
    folio_n=$(python3 scripts/folios.py "$src/big.bin" | awk '{print $2 / ($1 ? $1 : 1) * 100}')
    folio_m=$(python3 scripts/folios.py "$v/big.bin" | awk '{print $2 / ($1 ? $1 : 1) * 100}')
    drop_caches; local find_n find_m; find_n=$(timed find "$src/small"); find_m=$(timed find "$v/small")
    local ls_n ls_m; ls_n=$(timed ls -lR "$src/small"); ls_m=$(timed ls -lR "$v/small")
    drop_caches
    local small_n small_m
    small_n=$(timed sh -c "find '$src/small' -type f -print0 | xargs -0 cat")
    small_m=$(timed sh -c "find '$v/small' -type f -print0 | xargs -0 cat")
    # Warm (page cache full after the read above): tar, piped (tar skips
    # reading files it writes to /dev/null), through this read-write mount
    # and through a read-only one, where the kernel opens files itself.
    local tar_n tar_m tar_ro ro=$ROOT/mnt-ro; mkdir -p "$ro"
    tar_n=$(timed sh -c "tar cf - -C '$src' small | cat")
    tar_m=$(timed sh -c "tar cf - -C '$v' small | cat")
    "$BIN" mount bench "$ro" --daemon --read-only >/dev/null
    tar cf - -C "$ro/versions/v1" small | cat >/dev/null
    tar_ro=$(timed sh -c "tar cf - -C '$ro/versions/v1' small | cat")
    # `find` there, where directories are not opened either: cold, then
    # warm (listings kept) beside a warm native one.
    local find_ro find_wn find_wro
    drop_caches; find_ro=$(timed find "$ro/versions/v1/small")
    find "$src/small" >/dev/null
    find_wn=$(timed find "$src/small"); find_wro=$(timed find "$ro/versions/v1/small")
    "$BIN" umount "$ro"
    local cp_n cp_m commit_m req0 per_file
    requests() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests"]["total"])' "$mnt/.detafs/health"; }
    cp_n=$(timed cp -a "$src/small" "$ROOT/mcopy")
    req0=$(requests)
    local c0; c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    cp_m=$(timed cp -a "$src/small" "$mnt/staging/small-copy")
    local req1 us_req; req1=$(requests)
    # The daemon's CPU per request it answered during the copy.
    us_req=$(awk -v c0="$c0" -v n="$((req1 - req0))" '{print ($14 + $15 - c0) / 100 / n * 1e6}' "/proc/$pid/stat")
    per_file=$(echo "($req1 - $req0) / $(find "$src/small" | wc -l)" | bc -l)
    local t; t=$(now); echo "copy of the small files" > "$mnt/.detafs/commit"; commit_m=$(since "$t")
    # A 1 GiB file written into staging and read back cold. Written to the
    # page cache, each after a sync, in turns: this host's disk takes a
    # second GiB in a row several times slower than the first, whatever
    # writes it (seen: 0.7 s, then 15 s for a plain file).
    local w_n w_m r_n r_m
    if [ $((run % 2)) = 1 ]; then
      sync; w_n=$(timed dd if=/dev/zero of="$ROOT/m1g" bs=1M count=1024 status=none)
      sync; w_m=$(timed dd if=/dev/zero of="$mnt/staging/m1g" bs=1M count=1024 status=none)
    else
      sync; w_m=$(timed dd if=/dev/zero of="$mnt/staging/m1g" bs=1M count=1024 status=none)
      sync; w_n=$(timed dd if=/dev/zero of="$ROOT/m1g" bs=1M count=1024 status=none)
    fi
    drop_caches; r_n=$(timed cat "$ROOT/m1g")
    drop_caches; r_m=$(timed cat "$mnt/staging/m1g")
    rm -f "$ROOT/m1g" "$mnt/staging/m1g"
    local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    # stat and small reads elsewhere in the mount (versions/ and staging/)
    # while a 1.5 GB committed file is copied up (an open for writing
    # copies it), then while a 2 GiB commit runs.
    local probes lat_cu lat_cm
    probes=$(ls "$v"/small/dir00[0-1]/file00*.txt "$mnt"/staging/small-copy/dir00[0-1]/file00*.txt | tr '\n' ' ')
    python3 -c "open('$mnt/staging/huge.bin', 'r+b').close()" & local cu=$!
    # shellcheck disable=SC2086
    lat_cu=$(python3 scripts/latency.py "$cu" $probes); wait "$cu"
    head -c 2048M /dev/urandom > "$mnt/staging/new2g.bin"
    (echo "a 2 GiB file" > "$mnt/.detafs/commit") & local cm=$!
    # shellcheck disable=SC2086
    lat_cm=$(python3 scripts/latency.py "$cm" $probes); wait "$cm"
    local rss2; rss2=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    "$BIN" umount "$mnt"
    # Put staging back to v1 for the next run.
    "$BIN" commit bench --from "$src" -m "reset $run" >/dev/null 2>&1 || true
    echo "$run $cold_n $cold_m $warm_n $warm_m $find_n $find_m $ls_n $ls_m $small_n $small_m $cp_n $cp_m $commit_m $rss $ready $folio_n $folio_m $tar_n $tar_m $tar_ro $find_ro $find_wn $find_wro $per_file $w_n $w_m $r_n $r_m $lat_cu $lat_cm $rss2 $us_req" | tee -a "$mres" >&2
  done
  python3 - "$mres" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
# The spread of a figure over the runs: its lowest and highest.
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
mib = 512
def row(name, i, mb=None):
    n, m = med(i), med(i + 1)
    speed = f" ({mb / n:.0f} vs {mb / m:.0f} MiB/s)" if mb else ""
    print(f"| {name} | {n:.2f} s ({sp(i)}) | {m:.2f} s ({sp(i + 1)}) | {n / m * 100:.0f}% of native{speed} |")
print(f"| through the mount (runs: {len(rows)}, medians, spread lowest–highest) | native (source folder) | detafs `versions/v1` | mount vs native |")
print("|---|---|---|---|")
row("read 512 MiB file, cold (after drop_caches)", 1, mib)
row("read 512 MiB file, warm (5 times)", 3, 5 * mib)
row("`find` over 20,000 files (cold)", 5)
row("`ls -lR` over 20,000 files (after find)", 7)
row("read all 20,000 small files (cold)", 9)
row("`tar` of the 20,000 files, warm", 18)
t = med(20)
print(f"| `tar` of the 20,000 files, warm, read-only mount (no OPEN round trips) | | {t:.2f} s ({sp(20)}) | {med(18) / t * 100:.0f}% of native ({t / med(18):.2f}x) |")
t = med(21)
print(f"| `find` over 20,000 files (cold), read-only mount (no OPENDIR round trips) | | {t:.2f} s ({sp(21)}) | {med(5) / t * 100:.0f}% of native ({t / med(5):.2f}x) |")
print(f"| `find` over 20,000 files, warm, read-only mount (listings kept by the kernel) | {med(22):.3f} s ({sp(22)}) | {med(23):.3f} s ({sp(23)}) | {med(22) / med(23) * 100:.0f}% of native |")
n, m = med(11), med(12)
print(f"| `cp -a` of the 20,000 files into a directory | {n:.2f} s | {m:.2f} s (into `staging/`) | {n / m * 100:.0f}% of native |")
print(f"| commit of those files from `staging/` | | {med(13):.2f} s | |")
print(f"| daemon peak RSS | | {med(14) / 1024:.0f} MiB ({min(r[14] for r in rows) / 1024:.0f}–{max(r[14] for r in rows) / 1024:.0f}) | |")
print(f"| mount ready (`detafs mount --daemon` to the first `ls` of `versions/`) | | {med(15):.3f} s | |")
print(f"| the 512 MiB file's cached pages in large folios (`scripts/folios.py`) | {med(16):.0f}% | {med(17):.0f}% | kernel {__import__('os').uname().release} |")
print(f"| FUSE requests per file of that `cp -a` (`.detafs/health`), the daemon's CPU per request | | {med(24):.1f} ({sp(24)}), {med(38):.0f} µs ({min(r[38] for r in rows):.0f}–{max(r[38] for r in rows):.0f}) | |")
row("write a 1 GiB file into `staging/` (dd, to the page cache)", 25, 1024)
row("read it back, cold", 27, 1024)
print(f"| `stat` + 4 KiB read elsewhere while a 1.5 GB file is copied up: p50 / p99 / max | | {med(30):.2f} / {med(31):.2f} ({sp(31)}) / {med(32):.1f} ms | {med(29):.0f} operations |")
print(f"| the same while a 2 GiB commit runs: p50 / p99 / max | | {med(34):.2f} / {med(35):.2f} ({sp(35)}) / {med(36):.1f} ms | {med(33):.0f} operations |")
print(f"| daemon peak RSS after the 2 GiB commit | | {med(37) / 1024:.0f} MiB ({min(r[37] for r in rows) / 1024:.0f}–{max(r[37] for r in rows) / 1024:.0f}) | |")
PY
}

# The machine's own limits, printed before the figures they bound: one
# core's SHA-256 and AES-256-GCM (`openssl speed`, 16 KiB blocks), the page
# cache's copy rate and the disk's read rate (the 512 MiB file, warm and
# with the page cache dropped).
bench_limits() {
  local sha aes warm cold
  sha=$(openssl speed -evp sha256 -bytes 16384 -seconds 1 2>/dev/null | awk '/^sha256/ {print $2}')
  aes=$(openssl speed -evp aes-256-gcm -bytes 16384 -seconds 1 2>/dev/null | awk '/^AES-256-GCM/ {print $2}')
  cat "$ROOT/data/big.bin" >/dev/null
  warm=$(timed dd if="$ROOT/data/big.bin" of=/dev/null bs=1M status=none)
  drop_caches; cold=$(timed dd if="$ROOT/data/big.bin" of=/dev/null bs=1M status=none)
  python3 - "$sha" "$aes" "$warm" "$cold" "$(stat -c %s "$ROOT/data/big.bin")" <<'PY'
import sys
kb = lambda v: float(v.rstrip("k")) * 1000 / 1e9
sha, aes, warm, cold = kb(sys.argv[1]), kb(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
size = int(sys.argv[5]) / 1e9
print("| this machine's limits | |")
print("|---|---|")
print(f"| SHA-256, one core | {sha:.2f} GB/s |")
print(f"| AES-256-GCM, one core | {aes:.2f} GB/s |")
print(f"| the page cache's copy rate (512 MiB file, warm) | {size / warm:.2f} GB/s |")
print(f"| the disk's read rate (the same, page cache dropped) | {size / cold:.2f} GB/s |")
PY
}

source scripts/bench-s3.sh
source scripts/bench-core.sh
source scripts/bench-sealed.sh
source scripts/bench-policy.sh
source scripts/bench-gateway.sh
source scripts/bench-remote.sh
source scripts/bench-remote-commit.sh
bench_limits
case "$WHAT" in
  store) bench_store ;;
  mount) bench_mount ;;
  core) bench_core ;;
  million) bench_million ;;
  change) bench_million_change ;;
  s3) bench_s3 ;;
  scale) bench_scale ;;
  sealed) bench_sealed ;;
  policy) bench_policy ;;
  gateway) bench_gateway ;;
  remote) bench_remote ;;
  remote-commit) bench_remote_commit ;;
  *) bench_store; bench_mount; bench_core; bench_million; bench_million_change; bench_s3; bench_scale; bench_sealed; bench_policy; bench_gateway; bench_remote; bench_remote_commit ;;
esac
