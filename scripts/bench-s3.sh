# S3 benchmarks (sourced by scripts/bench.sh; uses its ROOT, RUNS, BIN, now,
# since, timed, drop_caches). The store is LocalStack on 127.0.0.1:4566;
# requests are counted from LocalStack's own request log, so every PUT and
# GET that reached the server is counted, retries included.

s3_setup() {
  ./scripts/localstack.sh
  export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_ACCESS_KEY_ID=test \
    AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  S3LOG=/var/tmp/localstack-s3/localstack.log
}
new_bucket() { local b="b$(date +%s%N)"; curl -fsS -X PUT "$AWS_ENDPOINT_URL/$b" >/dev/null; echo "$b"; }
mark() { wc -l < "$S3LOG"; }
# Requests of one kind (PutObject, GetObject, ListObjectsV2, ...) since a mark.
count() { sleep 1; tail -n +"$(( $2 + 1 ))" "$S3LOG" | grep -c "AWS s3\.$1 " || true; }

# The generated dataset on S3: commits, then reads on new hosts.
bench_s3() {
  s3_setup
  local res=$ROOT/s3-results.txt mnt=$ROOT/s3mnt; : > "$res"; mkdir -p "$mnt"
  local nsmall; nsmall=$(find "$ROOT/data/small" -type f | wc -l)
  for run in $(seq "$RUNS"); do
    mountpoint -q "$mnt" && "$BIN" umount "$mnt"
    rm -rf "$ROOT/s3work" "$ROOT"/s3cache-*; cp -a "$ROOT/data" "$ROOT/s3work"; sync
    local bytes; bytes=$(du -sb --apparent-size "$ROOT/s3work" | cut -f1)
    local bucket; bucket=$(new_bucket)
    export DETAFS_STORE=s3://$bucket/bench DETAFS_CACHE=$ROOT/s3cache-a DETAFS_STAGING=$ROOT/s3staging
    "$BIN" init >/dev/null; "$BIN" dataset create bench >/dev/null
    local t m v1 puts1 v2 puts2 delta1 delta2
    m=$(mark); t=$(now); "$BIN" commit bench --from "$ROOT/s3work" -m v1 >/dev/null; v1=$(since "$t")
    puts1=$(count PutObject "$m")
    python3 scripts/gen-dataset.py --edit "$ROOT/s3work" >/dev/null; sync
    m=$(mark); t=$(now); "$BIN" commit bench --from "$ROOT/s3work" -m v2 >/dev/null; v2=$(since "$t")
    puts2=$(count PutObject "$m")
    read -r delta1 delta2 < <("$BIN" log bench --json | python3 -c 'import json,sys; d={e["version"]: e["delta_size"] for e in json.load(sys.stdin)}; print(d[1], d[2])')
    # Only the 20,000 small files, as the first commit to a store of their own.
    local small; small=s3://$(new_bucket)/small
    small_host() { DETAFS_STORE=$small DETAFS_CACHE=$ROOT/s3cache-s "$BIN" "$@" >/dev/null; }
    small_host init; small_host dataset create small
    m=$(mark); small_host commit small --from "$ROOT/s3work/small" -m small
    local puts_small; puts_small=$(count PutObject "$m")

    # A new host (empty cache) mounts v1 and reads.
    export DETAFS_CACHE=$ROOT/s3cache-b
    local src=$ROOT/data v=$mnt/versions/v1
    m=$(mark); t=$(now); "$BIN" mount bench "$mnt" --daemon --read-only >/dev/null; ls "$v" >/dev/null
    local mount_s; mount_s=$(since "$t")
    drop_caches; local big_n; big_n=$(timed cat "$src/big.bin")
    drop_caches; m=$(mark); local big_m; big_m=$(timed cat "$v/big.bin"); local big_gets; big_gets=$(count GetObject "$m")
    # The reference: a plain client reading as many bytes of the same
    # store's packs from the same server, 8 ranged GETs of 8 MiB in flight.
    local ref_bytes ref_s
    read -r ref_bytes ref_s < <(python3 scripts/s3-ranged-get.py "$bucket" bench/packs/ $((512 << 20)))
    drop_caches; local small_n; small_n=$(timed sh -c "find '$src/small' -type f -print0 | xargs -0 cat")
    drop_caches; m=$(mark)
    local small_m; small_m=$(timed sh -c "find '$v/small' -type f -print0 | xargs -0 cat")
    local small_gets; small_gets=$(count GetObject "$m")
    "$BIN" umount "$mnt"
    # One small file on yet another new host: everything it costs, trees included.
    export DETAFS_CACHE=$ROOT/s3cache-c
    "$BIN" mount bench "$mnt" --daemon --read-only >/dev/null
    local one; one=$(find "$src/small" -type f -print -quit); one=${one#"$src/"}
    m=$(mark); cat "$v/$one" >/dev/null; local one_gets; one_gets=$(count GetObject "$m")
    # ... and a second file of another directory, now that the version is open.
    local two; two=$(find "$src/small" -type f | tail -1); two=${two#"$src/"}
    m=$(mark); cat "$v/$two" >/dev/null; local two_gets; two_gets=$(count GetObject "$m")
    "$BIN" umount "$mnt"
    echo "$run $bytes $v1 $puts1 $delta1 $v2 $puts2 $delta2 $puts_small $mount_s $big_n $big_m $big_gets $small_n $small_m $small_gets $nsmall $one_gets $two_gets $ref_bytes $ref_s" | tee -a "$res" >&2
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
mib = 1 << 20
(n, v1, puts1, d1, v2, puts2, d2, puts_small, mount, big_n, big_m, big_gets,
 small_n, small_m, small_gets, nsmall, one, two) = (med(i) for i in range(1, 19))
ref = statistics.median(r[19] / r[20] / mib for r in rows)
print(f"| S3 (LocalStack), runs: {len(rows)}, medians | |")
print("|---|---|")
print(f"| commit v1 ({n / mib:.0f} MiB) | {v1:.2f} s ({n / mib / v1:.0f} MiB/s), {puts1:.0f} PUTs, {d1 / mib:.0f} MiB |")
print(f"| commit v2 (small edit) | {v2:.2f} s, {puts2:.0f} PUTs, {d2 / mib:.2f} MiB |")
print(f"| commit of the {nsmall:.0f} small files alone | {puts_small:.0f} PUTs |")
print(f"| new host: mount + first `ls` of v1 | {mount:.2f} s |")
print(f"| new host: read the 512 MiB file, cold | {big_m:.2f} s ({512 / big_m:.0f} MiB/s) vs {big_n:.2f} s from local disk; {big_gets:.0f} GETs |")
print(f"| a plain client, 8 ranged GETs of 8 MiB in flight, as many bytes of the same packs | {ref:.0f} MiB/s: detafs reads at {512 / big_m / ref * 100:.0f}% of it |")
print(f"| new host: read all {nsmall:.0f} small files, cold | {small_m:.2f} s vs {small_n:.2f} s from local disk; {small_gets:.0f} GETs = {small_gets / nsmall:.3f} per file |")
print(f"| new host: one small file, everything included | {one:.0f} GETs (records, trees on its path, the file) |")
print(f"| same host: a small file in another directory | {two:.0f} GETs |")
PY
}

# History length and directory size: 1,000 versions, a 100,000-entry folder.
bench_scale() {
  s3_setup
  local mnt=$ROOT/s3mnt res=$ROOT/scale-results.txt; mkdir -p "$mnt"; : > "$res"
  mountpoint -q "$mnt" && "$BIN" umount "$mnt"
  rm -rf "$ROOT"/scache-* "$ROOT/sversions"; mkdir -p "$ROOT/sversions"
  export DETAFS_STORE=s3://$(new_bucket)/scale DETAFS_CACHE=$ROOT/scache-a DETAFS_STAGING=$ROOT/sstaging
  "$BIN" init >/dev/null; "$BIN" dataset create hist >/dev/null
  local t; t=$(now)
  for i in $(seq 1000); do
    echo "$i" > "$ROOT/sversions/counter.txt"
    "$BIN" commit hist --from "$ROOT/sversions" -m "v$i" >/dev/null
  done
  echo "1000 commits: $(since "$t") s" >&2
  for run in $(seq "$RUNS"); do
    local warm new n
    export DETAFS_CACHE=$ROOT/scache-a
    t=$(now); "$BIN" mount hist "$mnt" --daemon --read-only >/dev/null; n=$(ls "$mnt/versions" | wc -l); warm=$(since "$t")
    "$BIN" umount "$mnt"
    rm -rf "$ROOT/scache-new"; export DETAFS_CACHE=$ROOT/scache-new
    t=$(now); "$BIN" mount hist "$mnt" --daemon --read-only >/dev/null; ls "$mnt/versions" >/dev/null; new=$(since "$t")
    "$BIN" umount "$mnt"
    echo "versions $run $n $warm $new" | tee -a "$res" >&2
  done
  # A folder of 100,000 entries in one version.
  rm -rf "$ROOT/wide"; mkdir -p "$ROOT/wide/dir"
  python3 -c "
import os, sys
d = sys.argv[1]
for i in range(100000):
    with open(os.path.join(d, f'entry-{i:06d}.txt'), 'w') as f: f.write(str(i))
" "$ROOT/wide/dir"
  "$BIN" dataset create wide >/dev/null
  export DETAFS_CACHE=$ROOT/scache-a
  t=$(now); "$BIN" commit wide --from "$ROOT/wide" -m wide >/dev/null; local wcommit; wcommit=$(since "$t")
  for run in $(seq "$RUNS"); do
    rm -rf "$ROOT/scache-w"; export DETAFS_CACHE=$ROOT/scache-w
    local pid; pid=$("$BIN" mount wide "$mnt" --daemon --read-only | sed -n "s/.*(pid \([0-9]*\),.*/\1/p")
    local lsf lsl nn; t=$(now); nn=$(ls -f "$mnt/versions/v1/dir" | wc -l); lsf=$(since "$t")
    lsl=$(timed ls -l "$mnt/versions/v1/dir")
    local lsn; lsn=$(timed ls -l "$ROOT/wide/dir")
    local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    "$BIN" umount "$mnt"
    echo "wide $run $nn $lsf $lsl $lsn $rss $wcommit" | tee -a "$res" >&2
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
v = [list(map(float, r[2:])) for r in rows if r[0] == "versions"]
w = [list(map(float, r[2:])) for r in rows if r[0] == "wide"]
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"| scale (S3, LocalStack), runs: {len(v)}, medians | |")
print("|---|---|")
print(f"| 1,000 versions: mount + `ls versions/`, warm host | {med(v, 1):.2f} s ({med(v, 0):.0f} entries) |")
print(f"| 1,000 versions: mount + `ls versions/`, new host (empty cache) | {med(v, 2):.2f} s |")
print(f"| 100,000-entry folder: commit | {med(w, 5):.2f} s |")
print(f"| 100,000-entry folder: `ls -f` on a new host | {med(w, 1):.2f} s ({med(w, 0) - 2:.0f} entries) |")
print(f"| 100,000-entry folder: `ls -l` through the mount vs local disk | {med(w, 2):.2f} s vs {med(w, 3):.2f} s |")
print(f"| daemon peak RSS after listing it | {med(w, 4) / 1024:.0f} MiB |")
PY
}
