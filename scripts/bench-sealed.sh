# Sealed (format 2) against plaintext (format 1) stores (sourced by
# scripts/bench.sh; uses its ROOT, RUNS, BIN, now, since, drop_caches,
# median): commit of v1, a cold read of the 512 MiB file through a mount,
# and the bytes each stores, in the same run. The order alternates from run
# to run (the disk's writeback of one run must not weigh on the other kind
# only).
bench_sealed() {
  local res=$ROOT/sealed-results.txt mnt=$ROOT/smnt; : > "$res"; mkdir -p "$mnt"
  mountpoint -q "$mnt" && "$BIN" umount "$mnt"
  for run in $(seq "$RUNS"); do
    local row="$run" order="plaintext sealed" kind
    [ $((run % 2)) = 0 ] && order="sealed plaintext"
    declare -A got
    for kind in $order; do
      rm -rf "$ROOT/s-$kind" "$ROOT/s-$kind-cache" "$ROOT/s-$kind-staging"
      export DETAFS_STORE=$ROOT/s-$kind DETAFS_CACHE=$ROOT/s-$kind-cache DETAFS_STAGING=$ROOT/s-$kind-staging
      if [ $kind = plaintext ]; then "$BIN" init --plaintext >/dev/null; else "$BIN" init >/dev/null 2>&1; fi
      "$BIN" dataset create bench >/dev/null
      # Both commits read the source from disk (the first run's would
      # otherwise find it in the page cache).
      drop_caches; sleep 5
      local t; t=$(now)
      "$BIN" commit bench --from "$ROOT/data" -m v1 >/dev/null
      local commit; commit=$(since "$t")
      local stored; stored=$(du -sb "$ROOT/s-$kind/packs" | cut -f1)
      rm -rf "$DETAFS_CACHE"
      "$BIN" mount bench "$mnt" --daemon --read-only >/dev/null
      drop_caches
      t=$(now); cat "$mnt/versions/v1/big.bin" >/dev/null; local read; read=$(since "$t")
      "$BIN" umount "$mnt"
      got[$kind]="$commit $stored $read"
    done
    row="$row ${got[plaintext]} ${got[sealed]}"
    echo "$row" | tee -a "$res" >&2
  done
  # restic's figure for the same data, when it is installed (the target).
  local restic=0
  if command -v restic >/dev/null; then
    rm -rf "$ROOT/restic-repo"
    RESTIC_PASSWORD=bench restic init -q -r "$ROOT/restic-repo" >/dev/null
    RESTIC_PASSWORD=bench restic backup -q -r "$ROOT/restic-repo" "$ROOT/data" >/dev/null
    restic=$(du -sb "$ROOT/restic-repo/data" | cut -f1)
    rm -rf "$ROOT/restic-repo"
  fi
  python3 - "$res" "$(du -sb --apparent-size "$ROOT/data" | cut -f1)" "$restic" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
data = float(sys.argv[2])
restic = float(sys.argv[3])
med = lambda i: statistics.median(r[i] for r in rows)
mb, mib = 1e6, 1 << 20
pc, ps, pr, sc, ss, sr = (med(i) for i in range(1, 7))
print(f"| runs | {len(rows)} (medians) | dataset {data / mib:.0f} MiB |")
print("|---|---|---|")
print("| | plaintext (format 1) | sealed (format 2) |")
print(f"| commit v1 | {pc:.2f} s | {sc:.2f} s = {sc / pc * 100:.0f}% of plaintext |")
print(f"| cold read of big.bin through a mount | {pr:.2f} s | {sr:.2f} s = {sr / pr * 100:.0f}% of plaintext |")
print(f"| bytes stored (packs) | {ps / mb:.0f} MB | {ss / mb:.0f} MB |")
if restic:
    print(f"| restic, same data (its data/ folder) | | {restic / mb:.0f} MB (sealed: {ss / restic * 100:.0f}% of it) |")
PY
}
