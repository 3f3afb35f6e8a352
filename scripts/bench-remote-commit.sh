# A commit through a writable mount through the gateway beside the same
# commit through a mount of the store itself, in the same run (sourced by
# scripts/bench.sh; uses its ROOT, RUNS, BIN, now, since): v1 is the
# benchmark dataset, then 2 MiB of its 512 MiB file are rewritten in
# staging and committed, through each mount in turn (the write, and the
# copy-up it makes, untimed). Bytes over the loopback during the remote
# commit count both directions' TLS records, so they bound what was sent.
bench_remote_commit() {
  local r=$ROOT/rcommit res=$ROOT/rcommit-results.txt; : > "$res"
  change() { python3 -c "import os,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2]) << 20); f.write(os.urandom(2 << 20)); f.close()" "$1" "$2"; }
  lo() { cat /sys/class/net/lo/statistics/tx_bytes; }
  for run in $(seq "$RUNS"); do
    for m in "$r/local" "$r/remote"; do mountpoint -q "$m" && "$BIN" umount "$m"; done
    rm -rf "$r"; mkdir -p "$r/local" "$r/remote"
    export DETAFS_STORE=$r/store DETAFS_CACHE=$r/cache DETAFS_STAGING=$r/staging
    "$BIN" init >/dev/null 2>&1; "$BIN" dataset create bench >/dev/null
    "$BIN" commit bench --from "$ROOT/data" -m v1 >/dev/null
    local key; key=$("$BIN" apikey create bench --scopes read,commit 2>/dev/null)
    echo "$key" > "$r/key"
    "$BIN" serve --listen 127.0.0.1:18601 2>"$r/serve.log" & local gpid=$!
    until curl -sk https://127.0.0.1:18601/health >/dev/null; do sleep 0.2; done
    local ca; ca=$(ls "$r"/cache/*/gateway-cert.pem)
    through() { "$BIN" --store https://127.0.0.1:18601 --api-key-file "$r/key" --ca-cert "$ca" --cache-dir "$r/host-cache" "$@"; }
    "$BIN" mount bench "$r/local" --daemon >/dev/null
    change "$r/local/staging/big.bin" 256; sync
    local t local_s remote_s lo0 sent
    t=$(now); "$BIN" commit bench -m local >/dev/null; local_s=$(since "$t")
    "$BIN" umount "$r/local"
    through mount bench "$r/remote" --daemon >/dev/null 2>&1
    change "$r/remote/staging/big.bin" 300; sync
    lo0=$(lo); t=$(now)
    through commit bench -m remote >/dev/null 2>&1
    remote_s=$(since "$t"); sent=$(( $(lo) - lo0 ))
    "$BIN" umount "$r/remote"
    kill "$gpid"; wait "$gpid" 2>/dev/null || true
    echo "$run $local_s $remote_s $sent" | tee -a "$res" >&2
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print("| commit of 2 MiB rewritten in the 512 MiB file (761 MiB dataset) | through a local mount | through the gateway | ratio |")
print("|---|---|---|---|")
print(f"| time (`detafs commit`, through the mount) | {med(1):.2f} s ({sp(1)}) | {med(2):.2f} s ({sp(2)}) | {med(2) / med(1):.2f}× |")
print(f"| bytes over the loopback during the commit (both ways, TLS) | | {med(3) / (1 << 20):.2f} MiB | {med(3) / (2 << 20):.2f}× the bytes changed |")
PY
}
