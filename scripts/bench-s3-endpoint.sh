#!/usr/bin/env bash
# The S3 endpoint (`serve --s3-listen`) beside LocalStack serving the same
# bytes as plain objects, in the same run (docs/benchmarks.md, issue 40):
#  - the 512 MiB file read by scripts/s3-ranged-get.py (8 ranged GETs of
#    8 MiB in flight), from each (LocalStack over HTTP and over TLS), and
#    through a mount (cat, cold); the same ranges by curl, 8 in flight;
#  - ListObjectsV2 of the 20,000 small files (1,000 a page), from each;
#  - 64 clients each reading small objects: requests/s and p99 latency,
#    beside the REST API's; the gateway's peak RSS.
# Medians of RUNS runs.   scripts/bench-s3-endpoint.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. scripts/release-build.sh
[ -d "$ROOT/data" ] || { echo "run scripts/bench.sh first (it makes $ROOT/data)" >&2; exit 1; }
./scripts/localstack.sh
W=$ROOT/s3e; rm -rf "$W"; mkdir -p "$W"
export HOME=$W/home DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
"$BIN" init >/dev/null 2>&1; "$BIN" dataset create bench >/dev/null
"$BIN" commit bench --from "$ROOT/data" -m v1 >/dev/null
creds=$("$BIN" apikey create bench --scopes read --s3 2>/dev/null)
key=$(sed -n 's/^aws_access_key_id = //p' <<<"$creds"); secret=$(sed -n 's/^aws_secret_access_key = //p' <<<"$creds")
rest_key=$("$BIN" apikey create rest --scopes read 2>/dev/null)
"$BIN" serve --listen 127.0.0.1:0 --s3-listen 127.0.0.1:0 2>"$W/serve.log" &
gw=$!; trap 'kill $gw 2>/dev/null || true' EXIT
until grep -q "S3 endpoint" "$W/serve.log"; do sleep 0.2; done
s3=$(sed -n 's#^S3 endpoint \(.*\)/$#\1#p' "$W/serve.log")
rest=$(sed -n 's#^serving \(.*\)/$#\1#p' "$W/serve.log")
ca=$(find "$DETAFS_CACHE" -name gateway-cert.pem | head -1)

# The same bytes as plain objects on LocalStack.
bucket=e$(date +%s)
python3 - "$bucket" "$ROOT/data" <<'PY'
import boto3, concurrent.futures, os, sys
bucket, data = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:4566", aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
s3.create_bucket(Bucket=bucket)
s3.upload_file(f"{data}/big.bin", bucket, "v1/big.bin")
small = [os.path.join(d, f) for d, _, fs in os.walk(f"{data}/small") for f in fs]
def put(p):
    s3.put_object(Bucket=bucket, Key="v1/" + os.path.relpath(p, data), Body=open(p, "rb").read())
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    list(pool.map(put, small))
PY

ls_env() { env AWS_ENDPOINT_URL=http://127.0.0.1:4566 "$@"; }
# LocalStack over TLS too (its own certificate names localhost): the same
# transport as the gateway's.
ls_ca=/var/lib/localstack/cache/server.test.pem.crt
ls_tls_env() { env AWS_ENDPOINT_URL=https://localhost:4566 AWS_CA_BUNDLE=$ls_ca "$@"; }
# The same 64 ranges of 8 MiB, 8 in flight, by curl (a client that is not
# the bottleneck on 2 cores): seconds.
curl8() {
  local t; t=$(date +%s.%N)
  seq 0 63 | xargs -P8 -I{} sh -c 's=$(({} * 8388608)); curl -sf -o /dev/null -H "Range: bytes=$s-$((s + 8388607))" "$@"' _ "$@"
  echo "$(date +%s.%N) - $t" | bc
}
dt_env() { env AWS_ENDPOINT_URL="$s3" AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret" AWS_CA_BUNDLE="$ca" "$@"; }
res=$W/results.txt; : > "$res"
mnt=$W/mnt; mkdir -p "$mnt"
for run in $(seq "$RUNS"); do
  read -r _ get_ls < <(ls_env python3 scripts/s3-ranged-get.py "$bucket" v1/big.bin $((512 << 20)))
  read -r _ get_dt < <(dt_env python3 scripts/s3-ranged-get.py bench v1/big.bin $((512 << 20)))
  # Through a mount, cold: a new daemon, the page cache dropped.
  "$BIN" mount bench "$mnt" --daemon --read-only >/dev/null
  sync; echo 3 > /proc/sys/vm/drop_caches
  t=$(date +%s.%N); cat "$mnt/versions/v1/big.bin" >/dev/null; get_mnt=$(echo "$(date +%s.%N) - $t" | bc)
  "$BIN" umount "$mnt"
  read -r list_ls n_ls < <(ls_env python3 scripts/s3-ranged-get.py --list "$bucket" v1/small/)
  read -r list_dt n_dt < <(dt_env python3 scripts/s3-ranged-get.py --list bench v1/small/)
  [ "$n_ls" = "$n_dt" ] || { echo "listed $n_ls from LocalStack, $n_dt from detafs" >&2; exit 1; }
  read -r _ get_ls_tls < <(ls_tls_env python3 scripts/s3-ranged-get.py "$bucket" v1/big.bin $((512 << 20)))
  curl_ls=$(curl8 "http://127.0.0.1:4566/$bucket/v1/big.bin")
  curl_dt=$(curl8 --cacert "$ca" --aws-sigv4 aws:amz:us-east-1:s3 --user "$key:$secret" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$s3/bench/v1/big.bin")
  echo "$run $get_ls $get_dt $get_mnt $list_ls $list_dt $n_dt $get_ls_tls $curl_ls $curl_dt" | tee -a "$res" >&2
done
# 64 clients, small objects: the S3 endpoint, then the REST API.
python3 - "$s3" "$rest" "$key" "$secret" "$rest_key" "$ca" "$ROOT/data" <<'PY' | tee -a "$res.clients" >&2
import botocore.auth, botocore.awsrequest, botocore.credentials, concurrent.futures, os, requests, statistics, sys, time
s3, rest, key, secret, rest_key, ca, data = sys.argv[1:]
names = sorted(os.path.relpath(os.path.join(d, f), data) for d, _, fs in os.walk(f"{data}/small") for f in fs)[:2000]
auth = botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(key, secret), "s3", "us-east-1")
def s3_get(session, name):
    url = f"{s3}/bench/v1/{name}"
    req = botocore.awsrequest.AWSRequest(method="GET", url=url); auth.add_auth(req)
    return session.get(url, headers=dict(req.headers), verify=ca)
def rest_get(session, name):
    return session.get(f"{rest}/datasets/bench/versions/v1/files/{name}", headers={"Authorization": f"Bearer {rest_key}"}, verify=ca)
for label, get in (("s3", s3_get), ("rest", rest_get)):
    lat = []
    def client(i):
        s = requests.Session()
        for name in names[i::64]:
            t = time.monotonic(); r = get(s, name); lat.append(time.monotonic() - t)
            assert r.status_code == 200, (r.status_code, r.text[:200])
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        list(pool.map(client, range(64)))
    took = time.monotonic() - t
    lat.sort()
    print(label, f"{len(lat) / took:.0f} req/s", f"p50 {lat[len(lat) // 2] * 1000:.1f} ms", f"p99 {lat[int(len(lat) * 0.99)] * 1000:.1f} ms")
PY
echo "gateway peak RSS $(awk '/VmHWM/ {print $2 / 1024 " MiB"}' /proc/$gw/status)" | tee -a "$res.clients" >&2
python3 - "$res" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
mib = 512
print(f"ranged GET of 512 MiB, 8 in flight: LocalStack {med(1):.2f} s ({mib / med(1):.0f} MiB/s), "
      f"detafs S3 {med(2):.2f} s ({mib / med(2):.0f} MiB/s) = {med(1) / med(2) * 100:.0f}% of LocalStack; "
      f"mount (cat, cold) {med(3):.2f} s: S3 = {med(3) / med(2) * 100:.0f}% of the mount")
print(f"the same client against LocalStack over TLS {med(7):.2f} s: S3 = {med(7) / med(2) * 100:.0f}% of it")
print(f"curl, the same 64 ranges 8 in flight: LocalStack {med(8):.2f} s, detafs S3 {med(9):.2f} s = "
      f"{med(8) / med(9) * 100:.0f}% of LocalStack, {med(3) / med(9) * 100:.0f}% of the mount")
print(f"ListObjectsV2 of {int(med(6))} keys: LocalStack {med(4):.2f} s, detafs {med(5):.2f} s = {med(5) / med(4):.2f}x")
PY
