# The HTTPS gateway under load (sourced by scripts/bench.sh; uses its ROOT,
# RUNS, BIN, median): GETs of 4 KiB files of a version with 64 concurrent
# TLS connections (oha), beside nginx serving the same files over TLS from
# local disk with the same certificate, in the same run; then commits per
# second with 16 concurrent committers of small files; the gateway's peak RSS.
bench_gateway() {
  command -v oha >/dev/null || cargo install --locked --quiet oha
  command -v nginx >/dev/null || { apt-get install -y -qq nginx >/dev/null; }
  local g=$ROOT/gw res=$ROOT/gateway-results.txt; : > "$res"
  rm -rf "$g"; mkdir -p "$g/files"
  for i in $(seq -w 0 999); do head -c 4096 /dev/urandom > "$g/files/f$i.bin"; done
  export DETAFS_STORE=$g/store DETAFS_CACHE=$g/cache DETAFS_STAGING=$g/staging
  "$BIN" init >/dev/null 2>&1; "$BIN" dataset create bench >/dev/null
  "$BIN" commit bench --from "$g/files" -m v1 >/dev/null
  local key; key=$("$BIN" apikey create bench --scopes read,commit 2>/dev/null)
  "$BIN" serve --listen 127.0.0.1:18500 2>"$g/serve.log" & local gpid=$!
  sleep 2
  local cert key_pem
  cert=$(ls "$g"/cache/*/gateway-cert.pem); key_pem=$(ls "$g"/cache/*/gateway-key.pem)
  cat > "$g/nginx.conf" <<NGINX
worker_processes 2;
pid $g/nginx.pid;
error_log $g/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 127.0.0.1:18501 ssl;
    ssl_certificate $cert;
    ssl_certificate_key $key_pem;
    root $g/files;
  }
}
NGINX
  nginx -c "$g/nginx.conf"
  # Regexes: every '.' is a literal one.
  local gw_url="https://127[.]0[.]0[.]1:18500/datasets/bench/versions/v1/files/f[0-9]{3}[.]bin"
  local ng_url="https://127[.]0[.]0[.]1:18501/f[0-9]{3}[.]bin"
  for run in $(seq "$RUNS"); do
    oha -z 10s -c 64 --insecure --no-tui --output-format json --rand-regex-url "$ng_url" > "$g/ng.json"
    oha -z 10s -c 64 --insecure --no-tui --output-format json -H "Authorization: Bearer $key" --rand-regex-url "$gw_url" > "$g/gw.json"
    python3 - "$g/ng.json" "$g/gw.json" >> "$res" <<'PY'
import json, sys
row = []
for f in sys.argv[1:]:
    d = json.load(open(f))
    s = d["summary"]; p = d["latencyPercentiles"]
    codes = d.get("statusCodeDistribution", {})
    assert set(codes) <= {"200"}, codes
    row += [s["requestsPerSec"], p["p50"] * 1000, p["p99"] * 1000]
print(" ".join(f"{x:.3f}" for x in row))
PY
    tail -1 "$res" >&2
  done
  # Commits per second: 16 committers, each its own files, for 10 s.
  local commits
  commits=$(python3 - "$key" <<'PY'
import base64, concurrent.futures, json, sys, time, urllib3, requests
urllib3.disable_warnings()
key = sys.argv[1]
url = "https://127.0.0.1:18500/datasets/bench/commit"
stop = time.time() + 10
def worker(w):
    s = requests.Session(); n = 0
    while time.time() < stop:
        body = {"commit_message": f"w{w} {n}", "files": {f"w{w}/{n}.txt": base64.b64encode(b"x").decode()}}
        r = s.post(url, json=body, headers={"Authorization": "Bearer " + key}, verify=False)
        assert r.status_code == 201, r.text
        n += 1
    return n
with concurrent.futures.ThreadPoolExecutor(16) as ex:
    total = sum(ex.map(worker, range(16)))
print(f"{total / 10:.1f}")
PY
)
  local rss; rss=$(awk '/VmHWM/ {print $2}' "/proc/$gpid/status")
  kill "$gpid"; kill "$(cat "$g/nginx.pid")"
  python3 - "$res" "$commits" "$rss" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
print(f"| 4 KiB GETs, 64 TLS connections (runs: {len(rows)}, medians) | nginx (local disk) | detafs gateway | gateway vs nginx |")
print("|---|---|---|---|")
print(f"| requests/s | {med(0):.0f} | {med(3):.0f} | {med(3) / med(0) * 100:.0f}% |")
print(f"| p50 | {med(1):.2f} ms | {med(4):.2f} ms | |")
print(f"| p99 | {med(2):.2f} ms | {med(5):.2f} ms | |")
print(f"| commits/s, 16 committers of one small file each | | {float(sys.argv[2]):.1f} | |")
print(f"| gateway peak RSS | | {int(sys.argv[3]) / 1024:.0f} MiB | |")
PY
}
