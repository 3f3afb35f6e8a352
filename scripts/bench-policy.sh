# Access policy at the mount (sourced by scripts/bench.sh; uses its ROOT,
# RUNS, BIN, now, since, drop_caches): `find` and `ls -lR` over the 20,000
# small files as another user (uid 2001, group 3001), through a mount of a
# store with a 50-statement policy beside one of a store without, in the
# same run; the order alternates from run to run.
bench_policy() {
  local res=$ROOT/policy-results.txt; : > "$res"
  local policy=$ROOT/policy.yaml
  {
    echo "policies:"
    echo "  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}"
    echo "  - {name: readers, effect: allow, principals: [\"group:3001\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/bench/versions/*\"]}"
    for i in $(seq 1 24); do
      echo "  - {name: team$i, effect: allow, principals: [\"group:team$i\", \"user:member$i\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/other$i/versions/*\"]}"
      echo "  - {name: private$i, effect: deny, principals: [\"group:3001\", \"group:team$i\"], actions: [\"dataset:read\"], resources: [\"datasets/bench/versions/*/files/private$i/*\"]}"
    done
  } > "$policy"
  local kind
  for kind in plain policy; do
    rm -rf "$ROOT/p-$kind" "$ROOT/p-$kind-cache" "$ROOT/p-$kind-staging"
    mkdir -p "$ROOT/p-$kind-src" "$ROOT/p-$kind-mnt"
    [ -e "$ROOT/p-$kind-src/small" ] || cp -a "$ROOT/data/small" "$ROOT/p-$kind-src/"
    DETAFS_STORE=$ROOT/p-$kind DETAFS_CACHE=$ROOT/p-$kind-cache "$BIN" init >/dev/null 2>&1
    DETAFS_STORE=$ROOT/p-$kind DETAFS_CACHE=$ROOT/p-$kind-cache "$BIN" dataset create bench >/dev/null
    DETAFS_STORE=$ROOT/p-$kind DETAFS_CACHE=$ROOT/p-$kind-cache "$BIN" commit bench --from "$ROOT/p-$kind-src" -m v1 >/dev/null
  done
  DETAFS_STORE=$ROOT/p-policy DETAFS_CACHE=$ROOT/p-policy-cache "$BIN" policy set "$policy" >/dev/null
  chmod 755 "$ROOT"
  as_user() { setpriv --reuid=2001 --regid=2001 --groups=3001 "$@"; }
  for run in $(seq "$RUNS"); do
    local order="plain policy" row="$run"
    [ $((run % 2)) = 0 ] && order="policy plain"
    declare -A got
    for kind in $order; do
      local mnt=$ROOT/p-$kind-mnt
      mountpoint -q "$mnt" && "$BIN" umount "$mnt"
      DETAFS_STORE=$ROOT/p-$kind DETAFS_CACHE=$ROOT/p-$kind-cache DETAFS_STAGING=$ROOT/p-$kind-staging \
        "$BIN" mount bench "$mnt" --daemon --read-only --allow-other >/dev/null
      local v=$mnt/versions/v1/small
      drop_caches
      local t; t=$(now); as_user find "$v" >/dev/null; got[$kind-find]=$(since "$t")
      t=$(now); as_user ls -lR "$v" >/dev/null; got[$kind-ls]=$(since "$t")
      local n; n=$(as_user find "$v" -type f | wc -l)
      [ "$n" = 20000 ] || { echo "the user saw $n files, not 20000" >&2; return 1; }
      "$BIN" umount "$mnt"
    done
    echo "$run ${got[plain-find]} ${got[policy-find]} ${got[plain-ls]} ${got[policy-ls]}" | tee -a "$res" >&2
  done
  python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
sp = lambda i: f"{min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f}"
print(f"| as uid 2001 (runs: {len(rows)}, medians, spread lowest–highest) | no policy | 50-statement policy | policy vs none |")
print("|---|---|---|---|")
for name, i in [("`find` over 20,000 files (cold)", 1), ("`ls -lR` over 20,000 files (after find)", 3)]:
    n, p = med(i), med(i + 1)
    print(f"| {name} | {n:.2f} s ({sp(i)}) | {p:.2f} s ({sp(i + 1)}) | {p / n * 100:.0f}% |")
PY
}
