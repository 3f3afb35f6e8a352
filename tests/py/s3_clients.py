"""Used by tests/s3_endpoint.rs: real S3 clients against `detafs serve --s3-listen`.

  s3_clients.py write DIR            writes a partitioned Parquet table into DIR/table
  s3_clients.py check SETUP.json     runs every client's checks, prints "ok N checks"

SETUP.json: endpoint (https://127.0.0.1:PORT), ca (the gateway's certificate),
key/secret (reader), revoked_key/revoked_secret, src (the folder v3 was
committed from), many (files under v3/many/), domain (--s3-domain).
"""
import json
import os
import subprocess
import sys
import urllib.parse

checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def write(where):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for part in ("a", "b"):
        os.makedirs(f"{where}/table/part={part}", exist_ok=True)
        n = 1000 if part == "a" else 500
        t = pa.table({"id": list(range(n)), "value": [i * 2 for i in range(n)]})
        pq.write_table(t, f"{where}/table/part={part}/data.parquet")


def client(s, key=None, secret=None, **config):
    import boto3
    import botocore.config

    return boto3.client(
        "s3",
        endpoint_url=s["endpoint"],
        aws_access_key_id=key or s["key"],
        aws_secret_access_key=secret or s["secret"],
        region_name="us-east-1",
        verify=s["ca"],
        config=botocore.config.Config(s3={"addressing_style": "path"}, **config),
    )


def error_code(f):
    import botocore.exceptions

    try:
        f()
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def boto3_checks(s):
    c = client(s)
    src = s["src"]
    check([b["Name"] for b in c.list_buckets()["Buckets"]] == ["ds"], "buckets")
    c.head_bucket(Bucket="ds")
    check(error_code(lambda: c.head_bucket(Bucket="nope"))[1] == 404, "head of a missing bucket")
    # The versions the reader sees: v1 is hidden, so it is not there.
    root = c.list_objects_v2(Bucket="ds", Delimiter="/")
    prefixes = [p["Prefix"] for p in root["CommonPrefixes"]]
    check(prefixes == ["latest/", "published/", "v2/", "v3/"], f"root {prefixes}")
    check("Contents" not in root or root["Contents"] == [], "no objects at the root")
    # One folder level, with a delimiter.
    top = c.list_objects_v2(Bucket="ds", Prefix="v3/", Delimiter="/")
    check([p["Prefix"] for p in top["CommonPrefixes"]] == ["v3/many/", "v3/pub/", "v3/table/"], f"v3/ {top}")
    check([o["Key"] for o in top.get("Contents", [])] == ["v3/big.bin"], f"v3/ objects {top}")
    # What the policy hides does not exist: not listed, not found.
    listed = [o["Key"] for page in c.get_paginator("list_objects_v2").paginate(Bucket="ds", Prefix="v3/p") for o in page.get("Contents", [])]
    check(listed == ["v3/pub/a.csv"], f"v3/p {listed}")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v3/private/secret.csv"))[0] == "NoSuchKey", "denied path")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v1/pub/a.csv"))[0] == "NoSuchKey", "hidden version")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v3/no/such/file"))[0] == "NoSuchKey", "404")
    check(error_code(lambda: c.get_object(Bucket="nope", Key="v3/pub/a.csv"))[0] == "NoSuchBucket", "no bucket")
    # 20,000 keys, paged 1,000 at a time, in S3's order, and from start-after.
    keys = [o["Key"] for page in c.get_paginator("list_objects_v2").paginate(Bucket="ds", Prefix="v3/many/") for o in page["Contents"]]
    want = sorted(f"v3/many/{n}" for n in s["many"])
    check(keys == want, f"{len(keys)} keys of v3/many/")
    after = c.list_objects_v2(Bucket="ds", Prefix="v3/many/", StartAfter=want[9999], MaxKeys=3)
    check([o["Key"] for o in after["Contents"]] == want[10000:10003] and after["IsTruncated"], "start-after")
    # Whole and ranged reads, byte for byte.
    big = open(f"{src}/big.bin", "rb").read()
    check(c.get_object(Bucket="ds", Key="v3/big.bin")["Body"].read() == big, "whole read")
    part = c.get_object(Bucket="ds", Key="v3/big.bin", Range="bytes=1000000-1999999")
    check(part["Body"].read() == big[1000000:2000000], "ranged read")
    check(part["ContentRange"] == f"bytes 1000000-1999999/{len(big)}", part["ContentRange"])
    tail = c.get_object(Bucket="ds", Key="v3/big.bin", Range="bytes=-10")["Body"].read()
    check(tail == big[-10:], "suffix range")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v3/pub/a.csv", Range=f"bytes={10**9}-"))[0] == "InvalidRange", "bad range")
    # A stable ETag: the same bytes in two versions, asked twice.
    e2 = c.head_object(Bucket="ds", Key="v2/pub/a.csv")["ETag"]
    e3 = c.head_object(Bucket="ds", Key="published/pub/a.csv")["ETag"]
    check(e2 == e3 == c.head_object(Bucket="ds", Key="v2/pub/a.csv")["ETag"], "stable ETag")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v2/pub/a.csv", IfNoneMatch=e2))[1] == 304, "If-None-Match")
    check(error_code(lambda: c.get_object(Bucket="ds", Key="v2/pub/a.csv", IfMatch='"nope"'))[1] == 412, "If-Match")
    check(c.get_object(Bucket="ds", Key="v2/pub/a.csv", IfMatch=e2)["Body"].read() == b"a,b\n1,2\n", "If-Match met")
    # latest~1 is a version name too.
    check(c.get_object(Bucket="ds", Key="latest~1/pub/a.csv")["Body"].read() == b"a,b\n1,2\n", "latest~1")
    # Presigned URLs.
    import requests

    url = c.generate_presigned_url("get_object", Params={"Bucket": "ds", "Key": "v3/pub/a.csv"}, ExpiresIn=300)
    got = requests.get(url, verify=s["ca"])
    check(got.status_code == 200 and got.content == open(f"{src}/pub/a.csv", "rb").read(), "presigned")
    tampered = url.replace("v3%2Fpub", "v2%2Fpub").replace("/v3/pub", "/v2/pub")
    check(requests.get(tampered, verify=s["ca"]).status_code == 403, "a presigned URL for another key")
    # A wrong signature, a revoked key, no signature.
    check(error_code(lambda: client(s, secret="wrong" * 8).list_buckets())[0] == "SignatureDoesNotMatch", "wrong secret")
    revoked = client(s, key=s["revoked_key"], secret=s["revoked_secret"])
    check(error_code(lambda: revoked.list_buckets())[0] == "InvalidAccessKeyId", "revoked key")
    anonymous = requests.get(f"{s['endpoint']}/ds/v3/pub/a.csv", verify=s["ca"])
    check(anonymous.status_code == 403 and b"AccessDenied" in anonymous.content, "unsigned")
    # Versions are read-only; a key without the commit scope writes nothing.
    check(error_code(lambda: c.put_object(Bucket="ds", Key="v3/new.txt", Body=b"x"))[0] == "AccessDenied", "put into a version")
    check(error_code(lambda: c.put_object(Bucket="ds", Key="staging/new.txt", Body=b"x"))[0] == "AccessDenied", "put without commit")


def write_checks(s):
    """Stage through S3 (PutObject, multipart, DeleteObject), then commit."""
    import base64
    import hashlib

    import boto3.s3.transfer

    w = client(s, key=s["writer_key"], secret=s["writer_secret"])
    body = b"written through S3\n"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    put = w.put_object(Bucket="ds", Key="staging/new/a.txt", Body=body, ContentMD5=md5)
    check(put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"', f"PutObject ETag {put['ETag']}")
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    check(error_code(lambda: w.put_object(Bucket="ds", Key="staging/new/b.txt", Body=body, ContentMD5=wrong))[0] == "BadDigest", "Content-MD5 checked")
    sha = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    check(error_code(lambda: w.put_object(Bucket="ds", Key="staging/new/c.txt", Body=body, ChecksumSHA256=sha))[0] == "BadDigest", "x-amz-checksum-sha256 checked")
    # A multipart upload (5 MiB parts) of 12 MiB.
    big = os.urandom(12 << 20)
    path = os.path.join(s["tmp"], "upload.bin")
    open(path, "wb").write(big)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    w.upload_file(path, "ds", "staging/new/big.bin", Config=cfg)
    check(w.head_object(Bucket="ds", Key="v3/big.bin")["ContentLength"] == 5 << 20, "v3 unchanged meanwhile")
    # Signed chunks: taken; one changed after signing: refused, not staged.
    chunked = os.urandom(200_000)
    status, answer = chunked_put(s, "staging/new/chunked.bin", chunked)
    check(status == 200, f"signed chunks {status} {answer[:300]}")
    status, answer = chunked_put(s, "staging/new/tampered.bin", chunked, tamper=True)
    check(status == 403 and b"SignatureDoesNotMatch" in answer, f"a tampered chunk {status} {answer[:300]}")
    # A deletion staged, a staged upload dropped.
    w.delete_object(Bucket="ds", Key="staging/pub/a.csv")
    w.put_object(Bucket="ds", Key="staging/dropped.txt", Body=b"x")
    w.delete_object(Bucket="ds", Key="staging/dropped.txt")
    # Staged objects read back; what is not staged is not found.
    head = w.head_object(Bucket="ds", Key="staging/new/a.txt")
    check(head["ContentLength"] == len(body) and head["ETag"] == put["ETag"], f"HEAD of a staged object {head}")
    check(w.get_object(Bucket="ds", Key="staging/new/a.txt")["Body"].read() == body, "GET of a staged object")
    check(error_code(lambda: w.head_object(Bucket="ds", Key="staging/nothing"))[1] == 404, "HEAD of nothing staged")
    # A folder marker is taken and stages nothing; one with bytes is refused.
    check(w.put_object(Bucket="ds", Key="staging/made/", Body=b"")["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"', "folder marker")
    check(error_code(lambda: w.put_object(Bucket="ds", Key="staging/made2/", Body=b"x"))[0] == "InvalidArgument", "a folder marker with bytes")
    # DeleteObjects: staged keys deleted, a version's key refused by name.
    w.put_object(Bucket="ds", Key="staging/dropped2.txt", Body=b"y")
    marker_keys = [{"Key": "staging/made/"}, {"Key": "staging/"}]
    gone = w.delete_objects(Bucket="ds", Delete={"Objects": [{"Key": "staging/dropped2.txt"}, {"Key": "v3/pub/a.csv"}] + marker_keys})
    check([d["Key"] for d in gone.get("Deleted", [])] == ["staging/dropped2.txt", "staging/made/", "staging/"], f"DeleteObjects {gone}")
    check([(e["Key"], e["Code"]) for e in gone.get("Errors", [])] == [("v3/pub/a.csv", "AccessDenied")], f"DeleteObjects errors {gone}")
    staged = [o["Key"] for o in w.list_objects_v2(Bucket="ds", Prefix="staging/").get("Contents", [])]
    check(staged == ["staging/new/a.txt", "staging/new/big.bin", "staging/new/chunked.bin"], f"staged {staged}")
    done = w.put_object(Bucket="ds", Key="staging/.detafs-commit", Body=b"from S3")
    check(done["VersionId"] == "v4", f"committed {done}")
    check(w.get_object(Bucket="ds", Key="v4/new/a.txt")["Body"].read() == body, "v4 holds the put")
    check(w.get_object(Bucket="ds", Key="v4/new/big.bin")["Body"].read() == big, "v4 holds the multipart upload")
    check(w.get_object(Bucket="ds", Key="v4/new/chunked.bin")["Body"].read() == chunked, "v4 holds the chunked upload")
    check(error_code(lambda: w.head_object(Bucket="ds", Key="v4/pub/a.csv"))[1] == 404, "v4 lost the deleted file")
    check(w.get_object(Bucket="ds", Key="v4/many/f7")["Body"].read() == b"7", "v4 keeps the rest")
    check(w.list_objects_v2(Bucket="ds", Prefix="staging/").get("Contents", []) == [], "nothing staged after the commit")
    check(error_code(lambda: w.put_object(Bucket="ds", Key="staging/.detafs-commit", Body=b"again"))[0] == "InvalidRequest", "nothing to commit")


def chunked_put(s, key, body, tamper=False):
    """A PutObject with signed chunks (STREAMING-AWS4-HMAC-SHA256-PAYLOAD),
    as SDKs send over plain HTTP: each 64 KiB chunk signed after the
    headers' seed signature (AWS's SigV4 streaming rules, done here since
    botocore does not send it). With `tamper`, a byte of a chunk changes
    after signing. Returns (status, body)."""
    import datetime
    import hashlib
    import hmac

    import requests

    def h(b):
        return hashlib.sha256(b).hexdigest()

    def mac(k, m):
        return hmac.new(k, m.encode(), hashlib.sha256).digest()

    now = datetime.datetime.now(datetime.timezone.utc)
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    scope = f"{day}/us-east-1/s3/aws4_request"
    k = mac(mac(mac(mac(("AWS4" + s["writer_secret"]).encode(), day), "us-east-1"), "s3"), "aws4_request")
    host = urllib.parse.urlparse(s["endpoint"]).netloc
    path = "/ds/" + urllib.parse.quote(key)
    headers = {
        "content-encoding": "aws-chunked",
        "host": host,
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "x-amz-date": amz,
        "x-amz-decoded-content-length": str(len(body)),
    }
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", path, ""] + [f"{n}:{headers[n]}" for n in sorted(headers)] + ["", signed, headers["x-amz-content-sha256"]])
    seed = hmac.new(k, f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{h(canonical.encode())}".encode(), hashlib.sha256).hexdigest()
    out, prev = b"", seed
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] + [b""]
    for c in chunks:
        sig = hmac.new(k, f"AWS4-HMAC-SHA256-PAYLOAD\n{amz}\n{scope}\n{prev}\n{h(b'')}\n{h(c)}".encode(), hashlib.sha256).hexdigest()
        if tamper and c:
            c = bytes([c[0] ^ 1]) + c[1:]
        out += f"{len(c):x};chunk-signature={sig}\r\n".encode() + c + b"\r\n"
        prev = sig
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={s['writer_key']}/{scope}, SignedHeaders={signed}, Signature={seed}"
    del headers["host"]
    got = requests.put(s["endpoint"] + path, data=out, headers=headers, verify=s["ca"])
    return got.status_code, got.content


def virtual_host_checks(s):
    """BUCKET.DOMAIN addressing, signed as botocore signs it."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import requests

    port = urllib.parse.urlparse(s["endpoint"]).port
    host = f"ds.{s['domain']}"
    req = botocore.awsrequest.AWSRequest(method="GET", url=f"https://{host}/v3/pub/a.csv")
    creds = botocore.credentials.Credentials(s["key"], s["secret"])
    botocore.auth.S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    headers = dict(req.headers)
    headers["Host"] = host
    got = requests.get(f"https://127.0.0.1:{port}/v3/pub/a.csv", headers=headers, verify=False)
    check(got.status_code == 200 and got.content == open(f"{s['src']}/pub/a.csv", "rb").read(), f"virtual host {got.status_code} {got.content[:200]}")


def aws_cli_checks(s):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=s["key"], AWS_SECRET_ACCESS_KEY=s["secret"], AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    aws = [os.path.join(os.path.dirname(sys.executable), "aws"), "--endpoint-url", s["endpoint"], "--ca-bundle", s["ca"]]
    out = subprocess.run(aws + ["s3", "ls", "s3://ds/v3/"], env=env, capture_output=True, text=True, check=True).stdout
    check("PRE many/" in out and "big.bin" in out and "private" not in out, out)
    out = subprocess.run(aws + ["s3", "cp", "s3://ds/v3/pub/a.csv", "-"], env=env, capture_output=True, check=True).stdout
    check(out == open(f"{s['src']}/pub/a.csv", "rb").read(), "aws s3 cp")


def table_checks(s):
    """pyarrow, polars and s3fs read the partitioned Parquet folder of v3."""
    import pyarrow.dataset as ds
    import pyarrow.fs

    host = urllib.parse.urlparse(s["endpoint"]).netloc
    fs = pyarrow.fs.S3FileSystem(access_key=s["key"], secret_key=s["secret"], endpoint_override=host, scheme="https", region="us-east-1", tls_ca_file_path=s["ca"])
    t = ds.dataset("ds/v3/table", filesystem=fs, format="parquet", partitioning="hive").to_table()
    check(t.num_rows == 1500 and sum(t.column("value").to_pylist()) == 2 * (sum(range(1000)) + sum(range(500))), f"pyarrow {t.num_rows}")
    import polars as pl

    opts = {"aws_access_key_id": s["key"], "aws_secret_access_key": s["secret"], "aws_region": "us-east-1", "aws_endpoint_url": s["endpoint"], "aws_allow_http": "false", "aws_virtual_hosted_style_request": "false"}
    os.environ["SSL_CERT_FILE"] = s["ca"]
    df = pl.scan_parquet("s3://ds/v3/table/part=a/data.parquet", storage_options=opts).select(pl.len(), pl.col("value").sum()).collect()
    check(df.row(0) == (1000, 2 * sum(range(1000))), f"polars {df}")
    import s3fs

    f = s3fs.S3FileSystem(key=s["key"], secret=s["secret"], endpoint_url=s["endpoint"], client_kwargs={"verify": s["ca"], "region_name": "us-east-1"})
    check(sorted(f.ls("ds/v3/table")) == ["ds/v3/table/part=a", "ds/v3/table/part=b"], f"s3fs ls {f.ls('ds/v3/table')}")
    check(f.cat_file("ds/v3/pub/a.csv") == open(f"{s['src']}/pub/a.csv", "rb").read(), "s3fs cat")


if sys.argv[1] == "write":
    write(sys.argv[2])
else:
    setup = json.load(open(sys.argv[2]))
    boto3_checks(setup)
    write_checks(setup)
    virtual_host_checks(setup)
    aws_cli_checks(setup)
    table_checks(setup)
    print(f"ok {checks} checks")
