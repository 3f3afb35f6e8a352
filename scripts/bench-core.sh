# Mount-core benchmarks (sourced by scripts/bench.sh; uses its ROOT, RUNS,
# BIN, now, since, timed, drop_caches, median): what users of a shared mount
# wait for while a commit runs, status of a large staging area, and the
# daemon's memory while a version of 1,000,000 files is walked.

# Latency of `ls -l MOUNT` and of a read of a cached version file while a
# 2 GiB file is committed from staging.
bench_core() {
  local res=$ROOT/core-results.txt mnt=$ROOT/cmnt; : > "$res"; mkdir -p "$mnt"
  mountpoint -q "$mnt" && "$BIN" umount "$mnt"
  rm -rf "$ROOT/cstore" "$ROOT/ccache" "$ROOT/cstaging" "$ROOT/cwork"
  export DETAFS_STORE=$ROOT/cstore DETAFS_CACHE=$ROOT/ccache DETAFS_STAGING=$ROOT/cstaging
  "$BIN" init >/dev/null; "$BIN" dataset create core >/dev/null
  mkdir -p "$ROOT/cwork"; cp -a "$ROOT/data/small" "$ROOT/cwork/"
  "$BIN" commit core --from "$ROOT/cwork" -m v1 >/dev/null
  local pid; pid=$("$BIN" mount core "$mnt" --daemon | sed -n "s/.*(pid \([0-9]*\),.*/\1/p")
  local sample; sample=$(cd "$mnt/versions/v1" && find small -type f -print -quit)
  cat "$mnt/versions/v1/$sample" >/dev/null
  for run in $(seq "$RUNS"); do
    head -c 2G /dev/urandom > "$mnt/staging/big-$run.bin"
    python3 - "$mnt" "$sample" "$run" "$ROOT/cwork" >> "$res" <<'PY'
import os, subprocess, sys, time
mnt, sample, run, native = sys.argv[1:]
commit = subprocess.Popen(["sh", "-c", f"echo 'big {run}' > {mnt}/.detafs/commit"])
# Each through the mount, then the same on local disk, under the same load.
ls, read, ls_n, read_n = [], [], [], []
def timed(out, f):
    t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
def cat(path):
    with open(path, "rb") as f: f.read()
while commit.poll() is None:
    timed(ls, lambda: subprocess.run(["ls", "-l", mnt], stdout=subprocess.DEVNULL, check=True))
    timed(ls_n, lambda: subprocess.run(["ls", "-l", native], stdout=subprocess.DEVNULL, check=True))
    timed(read, lambda: cat(f"{mnt}/versions/v1/{sample}"))
    timed(read_n, lambda: cat(f"{native}/{sample}"))
    time.sleep(0.02)
assert commit.wait() == 0, "the commit failed"
# `ls` is a process start; measure one beside it, idle, to subtract nothing
# but to show what part is the mount's.
idle = []
for _ in range(20):
    t = time.perf_counter(); subprocess.run(["ls", "-l", "/"], stdout=subprocess.DEVNULL, check=True)
    idle.append(time.perf_counter() - t)
print("ls", run, *ls); print("read", run, *read); print("idle", run, *idle)
print("ls_n", run, *ls_n); print("read_n", run, *read_n)
PY
    rm "$mnt/staging/big-$run.bin"; echo "drop big $run" > "$mnt/.detafs/commit"
  done
  # `.detafs/status` with 100,000 new files in one staging folder.
  mkdir "$mnt/staging/wide"
  python3 -c "
import os, sys
d = sys.argv[1]
for i in range(100000):
    with open(os.path.join(d, f'entry-{i:06d}.txt'), 'w') as f: f.write(str(i))
" "$mnt/staging/wide"
  local st=()
  for run in $(seq "$RUNS"); do st+=("$(timed cat "$mnt/.detafs/status")"); done
  echo "status ${st[*]}" >> "$res"
  local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  echo "rss $rss" >> "$res"
  "$BIN" umount "$mnt"
  python3 - "$res" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    k, *v = l.split()
    rows.setdefault(k, []).extend(float(x) for x in (v[1:] if k in ("ls", "read", "idle", "ls_n", "read_n") else v))
def dist(xs):
    xs = sorted(xs); q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]
    return f"{len(xs)} samples: median {statistics.median(xs) * 1e3:.1f} ms, p90 {q(0.9) * 1e3:.1f} ms, p99 {q(0.99) * 1e3:.1f} ms, max {xs[-1] * 1e3:.1f} ms"
print("| while a 2 GiB file is committed from staging | |")
print("|---|---|")
print(f"| `ls -l` of the mount root (a process each) | {dist(rows['ls'])} |")
print(f"| `ls -l` of a local folder, same loop (the load's share) | {dist(rows['ls_n'])} |")
print(f"| `ls -l /` beside it, idle (the cost of starting `ls`) | {dist(rows['idle'])} |")
print(f"| read of a cached file under `versions/` | {dist(rows['read'])} |")
print(f"| read of the same file on local disk, same loop | {dist(rows['read_n'])} |")
print(f"| `.detafs/status` with 100,000 staged files in one folder | median {statistics.median(rows['status']):.2f} s ({len(rows['status'])} runs) |")
print(f"| daemon peak RSS over all of this | {rows['rss'][0] / 1024:.0f} MiB |")
PY
}

# The scale runs' tree: 1,000 folders of 1,000 files of 100 B, made once.
million_tree() {
  local src=$1
  if [ ! -d "$src" ]; then
    python3 -c "
import os, sys
root = sys.argv[1]
for d in range(1000):
    p = os.path.join(root, f'd{d:03d}'); os.makedirs(p)
    for i in range(1000):
        with open(os.path.join(p, f'f{i:03d}'), 'w') as f: f.write('x' * 100)
" "$src.tmp" && mv "$src.tmp" "$src"
  fi
}

# The daemon's peak RSS while `find` walks two versions of 1,000,000 files
# (1,000 folders of 1,000) and `ls -lR` one, beside the same walks natively,
# and what `.detafs/health` says the memory budget holds after them.
bench_million() {
  local mnt=$ROOT/mmnt src=$ROOT/million; mkdir -p "$mnt"
  mountpoint -q "$mnt" && "$BIN" umount "$mnt"
  million_tree "$src"
  local res=$ROOT/million-results.txt; : > "$res"
  for run in $(seq "$RUNS"); do
    rm -rf "$ROOT/mlstore" "$ROOT/mlcache" "$ROOT/mlstaging"
    export DETAFS_STORE=$ROOT/mlstore DETAFS_CACHE=$ROOT/mlcache DETAFS_STAGING=$ROOT/mlstaging
    "$BIN" init >/dev/null; "$BIN" dataset create million >/dev/null
    local t; t=$(now)
    /usr/bin/time -f "%M" -o "$ROOT/mlrss" "$BIN" commit million --from "$src" -m v1 >/dev/null
    local commit_s; commit_s=$(since "$t"); local commit_rss; commit_rss=$(cat "$ROOT/mlrss")
    # One file of the million changed (files changed in the last 2 s are not
    # stat-cached, so the change is made, then the cache given time to trust v1's).
    sleep 3; echo "changed $(date +%s%N)" > "$src/d500/f500"
    t=$(now)
    /usr/bin/time -f "%M" -o "$ROOT/mlrss" "$BIN" commit million --from "$src" -m v2 >/dev/null
    local one_s; one_s=$(since "$t"); local one_rss; one_rss=$(cat "$ROOT/mlrss")
    # Read-only (one connection), then the default mount (read-write:
    # versions/ on a connection of its own), each beside a cold native run.
    local walks=""
    for mode in --read-only ""; do
      local pid; pid=$("$BIN" mount million "$mnt" --daemon $mode | sed -n "s/.*(pid \([0-9]*\),.*/\1/p")
      drop_caches; local find_n find_m ls_n ls_m
      # Each `ls -lR` right after its own `find` (the native one was timed
      # after the caches were dropped for the mount's: cold beside warm).
      # Each `find` with its own system time (the kernel's share), and the
      # daemon's CPU during the mount's.
      local find_nk find_k find_d c0
      /usr/bin/time -f "%e %S" -o "$ROOT/mlfind" find "$src" >/dev/null
      read -r find_n find_nk < "$ROOT/mlfind"
      ls_n=$(timed ls -lR "$src")
      drop_caches; c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      /usr/bin/time -f "%e %S" -o "$ROOT/mlfind" find "$mnt/versions/v1" >/dev/null
      read -r find_m find_k < "$ROOT/mlfind"
      find_d=$(awk -v c0="$c0" '{print ($14 + $15 - c0) / 100}' "/proc/$pid/stat")
      local rss_find; rss_find=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
      ls_m=$(timed ls -lR "$mnt/versions/v1")
      local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
      # The second version walked too (no caches dropped: the kernel keeps
      # both versions' inodes, the daemon's worst case).
      local find2_m; find2_m=$(timed find "$mnt/versions/v2")
      local rss2; rss2=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
      local held; held=$(python3 -c 'import json,sys; m = json.load(open(sys.argv[1]))["memory"]; print(" ".join(str(m[k] // 1024) for k in ("budget", "inodes", "trees", "listings")))' "$mnt/.detafs/health")
      # One change committed through the mount (read-write mount only).
      local commit_m=0
      if [ -z "$mode" ]; then
        echo "changed $(date +%s%N)" > "$mnt/staging/d700/f700"
        commit_m=$(timed "$BIN" commit million -m "one change $run")
      fi
      "$BIN" umount "$mnt"; while [ -e "/proc/$pid" ]; do sleep 0.1; done
      walks="$walks $find_n $find_m $rss_find $ls_n $ls_m $rss $find2_m $rss2 $held $commit_m $find_nk $find_k $find_d"
    done
    echo "$run $commit_s $commit_rss $one_s $one_rss$walks" | tee -a "$res" >&2
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
mib = lambda i: f"{med(i) / 1024:.0f} MiB ({min(r[i] for r in rows) / 1024:.0f}–{max(r[i] for r in rows) / 1024:.0f})"
print(f"| 1,000,000 files (1,000 folders; runs: {len(rows)}, medians, spread) | native | detafs `versions/v1` |")
print("|---|---|---|")
print(f"| commit --from | | {med(1):.1f} s ({sp(1)}), peak RSS {mib(2)} |")
print(f"| commit --from after 1 file changed | | {med(3):.2f} s ({sp(3)}), peak RSS {mib(4)} |")
for mode, i in (("--read-only mount", 5), ("default mount", 21)):
    print(f"| `find` (cold), {mode} | {med(i):.2f} s ({sp(i)}), its system time {med(i + 13):.2f} s | {med(i + 1):.2f} s ({sp(i + 1)}) = {med(i + 1) / med(i):.2f}x, daemon peak RSS {mib(i + 2)} |")
    print(f"| where the mount's cold `find` spends, {mode} | | the kernel (`find`'s system time) {med(i + 14):.2f} s ({sp(i + 14)}), the daemon's CPU {med(i + 15):.2f} s ({sp(i + 15)}) |")
    print(f"| `ls -lR` (after find), {mode} | {med(i + 3):.2f} s ({sp(i + 3)}) | {med(i + 4):.2f} s ({sp(i + 4)}) = {med(i + 4) / med(i + 3):.2f}x, daemon peak RSS {mib(i + 5)} |")
    print(f"| then `find` of v2: two versions walked, {mode} | | {med(i + 6):.2f} s ({sp(i + 6)}), daemon peak RSS {mib(i + 7)} (goal ≤ 256 MiB) |")
    print(f"| the memory budget after (`.detafs/health`), {mode} | | budget {mib(i + 8)}: version inodes {mib(i + 9)}, trees {mib(i + 10)}, listings {mib(i + 11)} |")
print(f"| commit of one change through the mount (`detafs commit`) | | {med(33):.2f} s ({sp(33)}) (goal ≤ 0.5 s) |")
PY
}

# One file of the million changed, then `commit --from` and `status` with
# the page cache dropped, beside a cold `find` (names only) and a cold
# `find -printf` that stats every file as the commit must, in the same run.
bench_million_change() {
  local src=$ROOT/million mnt=$ROOT/mmnt; mkdir -p "$mnt"
  million_tree "$src"
  export DETAFS_STORE=$ROOT/mcstore DETAFS_CACHE=$ROOT/mccache DETAFS_STAGING=$ROOT/mcstaging
  rm -rf "$DETAFS_STORE" "$DETAFS_CACHE" "$DETAFS_STAGING"
  "$BIN" init >/dev/null 2>&1; "$BIN" dataset create million >/dev/null
  "$BIN" commit million --from "$src" -m v1 >/dev/null
  local res=$ROOT/million-change.txt; : > "$res"
  for run in $(seq "$RUNS"); do
    # Changed files younger than 2 s are read again whatever their stat.
    sleep 3; echo "changed $(date +%s%N)" > "$src/d$((500 + run))/f500"
    drop_caches; local commit_c; commit_c=$(timed "$BIN" commit million --from "$src" -m "change $run")
    sleep 3; echo "changed $(date +%s%N)" > "$src/d$((600 + run))/f500"
    local commit_w; commit_w=$(timed "$BIN" commit million --from "$src" -m "warm $run")
    "$BIN" mount million "$mnt" --daemon >/dev/null
    echo "staged $run" > "$mnt/staging/d700/f$run"
    "$BIN" umount "$mnt"
    drop_caches; local status_c; status_c=$(timed "$BIN" status million)
    drop_caches; local find_c; find_c=$(timed find "$src")
    drop_caches; local stat_c; stat_c=$(timed find "$src" -printf '%s %T@ %C@ %i\n')
    echo "$run $commit_c $commit_w $status_c $find_c $stat_c" | tee -a "$res" >&2
  done
  "$BIN" restore million
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print(f"| one file of 1,000,000 changed (runs: {len(rows)}, medians, spread) | detafs | beside, same run |")
print("|---|---|---|")
print(f"| `commit --from`, page cache dropped | {med(1):.2f} s ({sp(1)}) | `find` {med(4):.2f} s ({sp(4)}); `find -printf` (a stat per file) {med(5):.2f} s ({sp(5)}) |")
print(f"| `commit --from`, warm | {med(2):.2f} s ({sp(2)}) | |")
print(f"| `status` (one staged change), page cache dropped | {med(3):.2f} s ({sp(3)}) | |")
PY
}
