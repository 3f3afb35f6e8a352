#!/usr/bin/env bash
# Spark reads and writes versions through the S3 endpoint, by hand
# (issue 40; docs/benchmarks.md): a hive-partitioned Parquet folder
# committed as v1 is read through s3a:// (path-style, the gateway's
# certificate in a Java truststore, an S3 key of the store) and its sums
# checked against pyarrow's reading of the same files on disk; then Spark
# writes a year of it, partitioned, under staging/ (its committer's
# renames are CopyObject and DeleteObjects), a PUT of
# staging/.detafs-commit makes it v2, and Spark reads v2 back.
#
#   scripts/spark-s3a.sh [ROWS]
#
# Needs: a JRE (apt-get install openjdk-17-jre-headless), pyspark from
# PyPI, and the two jars s3a needs, hadoop-aws and the AWS SDK bundle.
# Maven Central is where they live; where it is unreachable, PyPI's
# sagemaker_pyspark carries both (hadoop-aws 3.3.1, SDK 1.11.901), which
# this script takes from there. pyarrow makes the data (the test venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-2000000}
. scripts/release-build.sh
VENV=$ROOT/spark-venv JARS=$ROOT/spark-jars
if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import pyspark' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q pyspark==3.5.3
fi
if ! [ -f "$JARS/hadoop-aws-3.3.1.jar" ]; then
  mkdir -p "$JARS" "$ROOT/spark-dl"
  pip download -q --no-deps -d "$ROOT/spark-dl" sagemaker_pyspark==1.4.5
  tar xzf "$ROOT"/spark-dl/sagemaker_pyspark-1.4.5.tar.gz -C "$ROOT/spark-dl"
  cp "$ROOT"/spark-dl/sagemaker_pyspark-1.4.5/deps/jars/{hadoop-aws-3.3.1,aws-java-sdk-bundle-1.11.901}.jar "$JARS/"
fi

W=$ROOT/spark; rm -rf "$W"; mkdir -p "$W"
export HOME=$W/home DETAFS_STORE=$W/store DETAFS_CACHE=$W/cache DETAFS_STAGING=$W/staging
python3 - "$W/src/sales" "$ROWS" <<'PY'
import sys, numpy as np, pyarrow as pa, pyarrow.dataset as ds
out, rows = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
t = pa.table({
    "year": rng.integers(2021, 2025, rows),
    "region": rng.choice(["eu", "us", "apac"], rows),
    "amount": rng.integers(1, 10_000, rows),
})
ds.write_dataset(t, out, format="parquet", partitioning=["year", "region"], partitioning_flavor="hive")
PY
expected=$(python3 - "$W/src/sales" <<'PY'
import sys, pyarrow.dataset as ds
t = ds.dataset(sys.argv[1], partitioning="hive").to_table()
print(t.num_rows, sum(t["amount"].to_pylist()))
PY
)
"$BIN" init >/dev/null 2>&1; "$BIN" dataset create sales >/dev/null
"$BIN" commit sales --from "$W/src" -m v1 >/dev/null
creds=$("$BIN" apikey create spark --scopes read,commit --s3 2>/dev/null)
key=$(sed -n 's/^aws_access_key_id = //p' <<<"$creds"); secret=$(sed -n 's/^aws_secret_access_key = //p' <<<"$creds")
"$BIN" serve --listen 127.0.0.1:0 --s3-listen 127.0.0.1:0 2>"$W/serve.log" &
gw=$!; trap 'kill $gw 2>/dev/null || true' EXIT
until grep -q "S3 endpoint" "$W/serve.log"; do sleep 0.2; done
s3=$(sed -n 's#^S3 endpoint \(.*\)/$#\1#p' "$W/serve.log")
ca=$(find "$DETAFS_CACHE" -name gateway-cert.pem | head -1)
keytool -importcert -noprompt -alias detafs -file "$ca" -keystore "$W/trust.jks" -storepass changeit >/dev/null 2>&1

got=$("$VENV/bin/python" - "$s3" "$key" "$secret" "$W/trust.jks" "$JARS" "$ca" <<'PY'
import glob, subprocess, sys, tempfile, time
from pyspark.sql import SparkSession, functions as F
s3, key, secret, trust, jars, ca = sys.argv[1:]
java = f"-Djavax.net.ssl.trustStore={trust} -Djavax.net.ssl.trustStorePassword=changeit"
spark = (SparkSession.builder.master("local[2]").appName("detafs-s3a")
    .config("spark.jars", ",".join(glob.glob(f"{jars}/*.jar")))
    .config("spark.driver.extraJavaOptions", java)
    .config("spark.hadoop.fs.s3a.endpoint", s3)
    .config("spark.hadoop.fs.s3a.path.style.access", "true")
    .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "true")
    .config("spark.hadoop.fs.s3a.access.key", key)
    .config("spark.hadoop.fs.s3a.secret.key", secret)
    .config("spark.hadoop.fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
t = time.monotonic()
df = spark.read.parquet("s3a://sales/v1/sales/")
rows, total = df.agg(F.count("*"), F.sum("amount")).first()
took = time.monotonic() - t
per = df.where(F.col("year") == 2023).groupBy("region").count().collect()
year = df.where(F.col("year") == 2023)
want = year.agg(F.count("*"), F.sum("amount")).first()
t = time.monotonic()
year.write.partitionBy("region").parquet("s3a://sales/staging/y2023/")
wrote = time.monotonic() - t
with tempfile.NamedTemporaryFile() as message:
    message.write(b"2023, written by Spark"); message.flush()
    subprocess.run(["curl", "-sf", "--cacert", ca, "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{key}:{secret}",
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", message.name, f"{s3}/sales/staging/.detafs-commit"], check=True)
back = spark.read.parquet("s3a://sales/v2/y2023/").agg(F.count("*"), F.sum("amount")).first()
print(rows, total, f"{took:.2f}", len(per), f"{wrote:.2f}", int(tuple(back) == tuple(want)), want[0], file=sys.stdout)
PY
)
read -r rows total took parts wrote same written <<<"$got"
echo "spark $(java -version 2>&1 | head -1 | cut -d'"' -f2), pyspark 3.5.3, s3a (hadoop-aws 3.3.1): read $rows rows, sum $total in $took s through the S3 endpoint (year=2023 by region: $parts groups); pyarrow on disk: $expected"
[ "$rows $total" = "$expected" ] || { echo "MISMATCH: spark $rows $total, pyarrow $expected" >&2; exit 1; }
echo "sums agree"
echo "spark wrote 2023 ($written rows, by region) under staging/ in $wrote s; committed as v2 and read back: $([ "$same" = 1 ] && echo equal || echo DIFFERENT)"
[ "$same" = 1 ] || exit 1
