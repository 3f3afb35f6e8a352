# A mount through the gateway beside a mount of the store itself and the
# source folder, in the same run (sourced by scripts/bench.sh; uses its
# ROOT, RUNS, BIN, now, since, timed, drop_caches): cold `find` and warm
# `tar` of the 20,000 small files, a cold read of the 512 MiB file (the
# host's cache emptied, the gateway's store files out of the page cache),
# a mount of a dataset of 1,000 versions ready, and the requests one idle
# poll costs. Gateway on 127.0.0.1; both mounts read-only.
bench_remote() {
  local r=$ROOT/remote res=$ROOT/remote-results.txt; : > "$res"
  rm -rf "$r"; mkdir -p "$r/local" "$r/remote" "$r/many-mnt" "$r/many"
  export DETAFS_STORE=$r/store DETAFS_CACHE=$r/cache DETAFS_STAGING=$r/staging
  "$BIN" init >/dev/null 2>&1; "$BIN" dataset create bench >/dev/null
  "$BIN" commit bench --from "$ROOT/data" -m v1 >/dev/null
  "$BIN" dataset create many >/dev/null
  for i in $(seq 1000); do
    echo "$i" > "$r/many/n.txt"
    "$BIN" commit many --from "$r/many" -m "v$i" >/dev/null
  done
  local key; key=$("$BIN" apikey create bench --scopes read 2>/dev/null)
  echo "$key" > "$r/key"
  "$BIN" serve --listen 127.0.0.1:18600 2>"$r/serve.log" & local gpid=$!
  until curl -sk https://127.0.0.1:18600/health >/dev/null; do sleep 0.2; done
  local ca; ca=$(ls "$r"/cache/*/gateway-cert.pem)
  local log; log=$(ls "$r"/cache/*/gateway-18600.jsonl)
  through() { "$BIN" --store https://127.0.0.1:18600 --api-key-file "$r/key" --ca-cert "$ca" --cache-dir "$r/host-cache" "$@"; }
  local src=$ROOT/data
  for run in $(seq "$RUNS"); do
    for m in "$r/local" "$r/remote" "$r/many-mnt"; do mountpoint -q "$m" && "$BIN" umount "$m"; done
    rm -rf "$r/host-cache"
    "$BIN" mount bench "$r/local" --daemon --read-only >/dev/null
    through mount bench "$r/remote" --daemon --read-only >/dev/null 2>&1
    local lv=$r/local/versions/v1 rv=$r/remote/versions/v1
    # Cold: each mount fresh (nothing listed yet), the page cache dropped.
    drop_caches; local find_n find_l find_r
    find_n=$(timed find "$src/small"); find_l=$(timed find "$lv/small"); find_r=$(timed find "$rv/small")
    # Warm: every file read once before.
    local tar_n tar_l tar_r
    for d in "$src" "$lv" "$rv"; do tar cf - -C "$d" small | cat >/dev/null; done
    tar_n=$(timed sh -c "tar cf - -C '$src' small | cat")
    tar_l=$(timed sh -c "tar cf - -C '$lv' small | cat")
    tar_r=$(timed sh -c "tar cf - -C '$rv' small | cat")
    drop_caches; local big_l big_r
    big_l=$(timed cat "$lv/big.bin"); drop_caches; big_r=$(timed cat "$rv/big.bin")
    # 1,000 versions: from the mount command to the first listing.
    local ready; ready=$(now)
    through mount many "$r/many-mnt" --daemon --read-only --poll-interval 1s >/dev/null 2>&1
    ls "$r/many-mnt/versions" >/dev/null; ready=$(since "$ready")
    # Idle polls: requests in 10 s at one poll a second (this mount alone).
    local before after; before=$(grep -c 'GET /datasets/many/' "$log" || true)
    sleep 10
    after=$(grep -c 'GET /datasets/many/' "$log" || true)
    echo "$run $find_n $find_l $find_r $tar_n $tar_l $tar_r $big_l $big_r $ready $((after - before))" | tee -a "$res" >&2
  done
  for m in "$r/local" "$r/remote" "$r/many-mnt"; do mountpoint -q "$m" && "$BIN" umount "$m"; done
  # 16 hosts (a mount and a cache each) reading at once through the one
  # gateway, cold: the 20,000 small files and five 1 MiB CSVs each.
  local lines0 t16 i; lines0=$(wc -l < "$log")
  for i in $(seq 16); do
    mkdir -p "$r/m$i"; rm -rf "$r/hc$i"
    "$BIN" --store https://127.0.0.1:18600 --api-key-file "$r/key" --ca-cert "$ca" --cache-dir "$r/hc$i" \
      mount bench "$r/m$i" --daemon --read-only >/dev/null 2>&1
  done
  drop_caches; t16=$(now)
  for i in $(seq 16); do
    sh -c "tar cf - -C '$r/m$i/versions/v1' small | cat >/dev/null; cat '$r/m$i'/versions/v1/csv/table00[0-4].csv >/dev/null" &
  done
  wait $(jobs -p | grep -v "^$gpid\$") 2>/dev/null || true
  t16=$(since "$t16")
  local rss16; rss16=$(awk '/VmHWM/ {print $2}' "/proc/$gpid/status")
  for i in $(seq 16); do "$BIN" umount "$r/m$i"; done
  tail -n +"$((lines0 + 1))" "$log" | python3 -c "
import json, statistics, sys
ms = sorted(json.loads(l)['ms'] for l in sys.stdin if '\"ms\"' in l)
p99 = ms[int(len(ms) * 0.99) - 1]
print(f'| 16 mounts through one gateway, each reading the 20,000 small files and five 1 MiB CSVs, cold, at once | $t16 s | gateway peak RSS {int($rss16) // 1024} MiB | {len(ms)} requests: p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.0f} ms (to the answer\'s start) |')
" > "$ROOT/remote-16.txt"
  kill "$gpid"; wait "$gpid" 2>/dev/null || true
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print("| figure | native | local mount | through the gateway | ratio |")
print("|---|---|---|---|---|")
print(f"| `find` of the 20,000 files, cold | {med(1):.2f} s | {med(2):.2f} s | {med(3):.2f} s ({sp(3)}) | {med(3) / med(2):.2f}× the local mount |")
print(f"| `tar` of the 20,000 files, warm | {med(4):.2f} s | {med(5):.2f} s | {med(6):.2f} s ({sp(6)}) | {med(6) / med(4):.2f}× native |")
print(f"| read of the 512 MiB file, cold | | {med(7):.2f} s | {med(8):.2f} s ({sp(8)}) | {med(7) / med(8) * 100:.0f}% of the local mount's speed |")
print(f"| mount of 1,000 versions ready (command to first `ls versions/`) | | | {med(9):.2f} s ({sp(9)}) | |")
print(f"| requests to the gateway in 10 idle s at one poll a second | | | {med(10):.0f} | |")
PY
  cat "$ROOT/remote-16.txt"
}
