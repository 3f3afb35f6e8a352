"""What a policy hides answers, through REST, S3 and the CLI through the
gateway, exactly as the same
request does on a store that never held it (tests/gateway.rs gives two
gateways: `hiding`, where the caller's policy hides some paths and a
dataset, and `without`, a store holding only what that caller may see).
Every request of an enumeration (datasets, versions, paths that exist,
are hidden, or are missing; files and folders; reads, heads, listings) is
sent to both, and the answers compared, less what differs between any two
stores (ETags, which name content by a store's keys, times, and a
record's parent hash).

    hidden_model.py SETUP
"""
import itertools
import json
import re
import sys

import boto3
import botocore.config
import requests
from botocore.exceptions import ClientError

s = json.load(open(sys.argv[1]))


def s3(side):
    cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
    return boto3.client("s3", endpoint_url=side["s3"], aws_access_key_id=side["s3_key"], aws_secret_access_key=side["s3_secret"], region_name="us-east-1", verify=side["ca"], config=cfg)


def normal(text):
    text = re.sub(r'"?ETag"?[=:]\s*"?[^",<]*"?', "ETAG", text)
    text = re.sub(r"<ETag>[^<]*</ETag>", "", text)
    text = re.sub(r"<LastModified>[^<]*</LastModified>", "", text)
    text = re.sub(r'"mtime":\s*[0-9.]+', '"mtime": T', text)
    text = re.sub(r'"timestamp":\s*"[^"]*"', '"timestamp": T', text)
    # A record's parent hash names the store's own bytes.
    text = re.sub(r'"parent":\s*"[0-9a-f]*"', '"parent": H', text)
    return text


def rest(side, path):
    r = requests.get(side["rest"] + path, headers={"Authorization": "Bearer " + side["rest_key"]}, verify=side["ca"])
    return (r.status_code, normal(r.text))


def cli(side, *args):
    """The CLI through the side's gateway: (exit code, output, error
    with the gateway's address and the host cache's announcement taken
    out)."""
    import subprocess
    out = subprocess.run([s["detafs"], "--store", side["rest"], "--api-key-file", side["key_file"], "--ca-cert", side["ca"], *args],
                         capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": side["home"]})
    # The first command that reads trees makes the host's cache and says
    # so (its paths are each side's own).
    err = "".join(line for line in out.stderr.decode(errors="replace").splitlines(keepends=True)
                  if not line.startswith(("created this host's cache of ", "key file: ")))
    return (out.returncode, normal(out.stdout.decode(errors="replace")), err.replace(side["rest"], "GW"))


def call(f):
    try:
        out = f()
    except ClientError as e:
        err = e.response["Error"]
        return ("error", err.get("Code"), e.response["ResponseMetadata"]["HTTPStatusCode"], err.get("Message"))
    out.pop("ResponseMetadata", None)
    if "Body" in out:
        out["Body"] = out["Body"].read()
    for k in ["ETag", "LastModified"]:
        out.pop(k, None)
    for c in out.get("Contents", []):
        c.pop("ETag", None)
        c.pop("LastModified", None)
    return ("ok", normal(repr(sorted(out.items()))))


datasets = ["ds", "other", "nosuch"]
versions = ["v1", "v2", "latest", "v9"]
paths = ["top.txt", "pub", "pub/a.csv", "pub/sub/b.csv", "private", "private/s.csv", "private/sub/t.csv",
         "mix", "mix/open.txt", "mix/secret.txt", "nothing.txt", "pub/nothing", "private/nothing"]
a, b = s["hiding"], s["without"]
sa, sb = s3(a), s3(b)
mismatches = []
count = 0


def same(what, x, y):
    global count
    count += 1
    if x != y:
        mismatches.append(f"{what}:\n  hiding  {x}\n  without {y}")


same("CLI dataset list", cli(a, "dataset", "list"), cli(b, "dataset", "list"))
for d in datasets:
    same(f"CLI log {d}", cli(a, "log", d, "--json"), cli(b, "log", d, "--json"))
    same(f"CLI tags {d}", cli(a, "tag", d), cli(b, "tag", d))
    for v in versions:
        same(f"CLI ls {d} {v}", cli(a, "ls", d, v, "--json"), cli(b, "ls", d, v, "--json"))
    # Each path through one version that exists and one that does not (a
    # process and a TLS handshake each: REST and S3 take every version).
    for v in ["v2", "v9"]:
        for p in paths:
            same(f"CLI ls {d} {v} {p}", cli(a, "ls", d, v, p), cli(b, "ls", d, v, p))
            same(f"CLI cat {d} {v} {p}", cli(a, "cat", d, v, p), cli(b, "cat", d, v, p))
for d in datasets:
    same(f"REST versions {d}", rest(a, f"/datasets/{d}/versions"), rest(b, f"/datasets/{d}/versions"))
    same(f"S3 list {d}", call(lambda: sa.list_objects_v2(Bucket=d)), call(lambda: sb.list_objects_v2(Bucket=d)))
    for v in versions:
        same(f"REST version {d} {v}", rest(a, f"/datasets/{d}/versions/{v}"), rest(b, f"/datasets/{d}/versions/{v}"))
        same(f"REST root {d} {v}", rest(a, f"/datasets/{d}/versions/{v}/files"), rest(b, f"/datasets/{d}/versions/{v}/files"))
        for delim in ["/", ""]:
            kw = {"Prefix": f"{v}/", "Delimiter": delim} if delim else {"Prefix": f"{v}/"}
            same(f"S3 list {d} {kw}", call(lambda: sa.list_objects_v2(Bucket=d, **kw)), call(lambda: sb.list_objects_v2(Bucket=d, **kw)))
        for p in paths:
            same(f"REST {d} {v} {p}", rest(a, f"/datasets/{d}/versions/{v}/files/{p}"), rest(b, f"/datasets/{d}/versions/{v}/files/{p}"))
            key = f"{v}/{p}"
            same(f"S3 get {d} {key}", call(lambda: sa.get_object(Bucket=d, Key=key)), call(lambda: sb.get_object(Bucket=d, Key=key)))
            same(f"S3 head {d} {key}", call(lambda: sa.head_object(Bucket=d, Key=key)), call(lambda: sb.head_object(Bucket=d, Key=key)))
            same(f"S3 range {d} {key}", call(lambda: sa.get_object(Bucket=d, Key=key, Range="bytes=1-2")), call(lambda: sb.get_object(Bucket=d, Key=key, Range="bytes=1-2")))
            for delim in ["/", ""]:
                kw = {"Prefix": f"{key}/", "Delimiter": delim} if delim else {"Prefix": key}
                same(f"S3 list {d} {kw}", call(lambda: sa.list_objects_v2(Bucket=d, **kw)), call(lambda: sb.list_objects_v2(Bucket=d, **kw)))

if mismatches:
    print(f"{len(mismatches)} of {count} answers differ")
    print("\n".join(mismatches[:40]))
    sys.exit(1)
print(f"ok {count} answers alike")
