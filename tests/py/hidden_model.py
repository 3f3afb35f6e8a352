"""What a policy hides answers, through REST, S3 and the CLI through the
gateway, exactly as the same
request does on a store that never held it (tests/gateway.rs gives two
gateways: `hiding`, where the caller's policy hides some paths and a
dataset, and `without`, a store holding only what that caller may see).
Every request of an enumeration (datasets, versions, paths that exist,
are hidden, or are missing; files and folders; reads, heads, listings;
then commits through REST and staged puts, deletions and a commit through
S3, by a key that may commit but not read what is hidden, each followed
by what the reading key sees) is sent to both, and the answers compared,
less what differs between any two stores (ETags, which name content by a
store's keys, times, and a record's parent hash).

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


def s3(side, key="s3_key", secret="s3_secret"):
    cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
    return boto3.client("s3", endpoint_url=side["s3"], aws_access_key_id=side[key], aws_secret_access_key=side[secret], region_name="us-east-1", verify=side["ca"], config=cfg)


def normal(text):
    text = re.sub(r'"?ETag"?[=:]\s*"?[^",<]*"?', "ETAG", text)
    text = re.sub(r"<ETag>[^<]*</ETag>", "", text)
    text = re.sub(r"<LastModified>[^<]*</LastModified>", "", text)
    # Times a commit stamps (now) differ between any two stores.
    text = re.sub(r'"mtime":\s*[0-9.]+', '"mtime": T', text)
    text = re.sub(r'"mtime":\s*"[^"]*"', '"mtime": T', text)
    text = re.sub(r'"mtime_ns":\s*[0-9]+', '"mtime_ns": N', text)
    text = re.sub(r'"timestamp":\s*"[^"]*"', '"timestamp": T', text)
    # A record's parent hash names the store's own bytes.
    text = re.sub(r'"parent":\s*"[0-9a-f]*"', '"parent": H', text)
    return text


def rest(side, path):
    r = requests.get(side["rest"] + path, headers={"Authorization": "Bearer " + side["rest_key"]}, verify=side["ca"])
    return (r.status_code, normal(r.text))


def page(side, path):
    """A page of the web page, signed in with the side's reading key: its
    status, where it sends the browser, and its HTML with what differs
    between any two stores or sessions taken out."""
    web = side.get("web")
    if web is None:
        web = side["web"] = requests.Session()
        form = web.get(side["rest"] + "/ui/login", verify=side["ca"]).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form).group(1)
        r = web.post(side["rest"] + "/ui/login", data={"key": side["rest_key"], "csrf": csrf},
                     verify=side["ca"], allow_redirects=False)
        assert r.status_code == 303, r.text
    r = web.get(side["rest"] + path, verify=side["ca"], allow_redirects=False)
    text = normal(r.text)
    text = re.sub(r'name="csrf" value="[0-9a-f]+"', "CSRF", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)
    text = re.sub(r"<code>[0-9a-f]{16}</code>", "HASH", text)
    return (r.status_code, r.headers.get("location"), text)


def commit(side, body):
    """A REST commit by the side's writing key."""
    r = requests.post(side["rest"] + "/datasets/ds/commit", json=body,
                      headers={"Authorization": "Bearer " + side["write_key"]}, verify=side["ca"])
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
# A path's history, and what changed between versions.
for p in paths:
    same(f"CLI log ds -- {p}", cli(a, "log", "ds", "--json", "--", p), cli(b, "log", "ds", "--json", "--", p))
same("CLI diff ds v1 v2", cli(a, "diff", "ds", "v1", "v2", "--json"), cli(b, "diff", "ds", "v1", "v2", "--json"))
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

# What changed, previews and the audit over REST, and the web page made
# of them: hidden is as missing there too.
def rest_norm(side, path):
    status, text = rest(side, path)
    text = re.sub(r'"hash":\s*"[0-9a-f]*"', '"hash": H', text)
    # The audit's record times: when each store's commits ran.
    return (status, re.sub(r'"time":\s*"[^"]*"', '"time": T', text))


same("page datasets", page(a, "/ui/"), page(b, "/ui/"))
for d in datasets:
    same(f"page log {d}", page(a, f"/ui/datasets/{d}"), page(b, f"/ui/datasets/{d}"))
    same(f"REST audit {d}", rest_norm(a, f"/datasets/{d}/audit"), rest_norm(b, f"/datasets/{d}/audit"))
    same(f"page audit {d}", page(a, f"/ui/datasets/{d}/audit"), page(b, f"/ui/datasets/{d}/audit"))
    for r in ["v1..v2", "v2..v1", "v1..v9", "v1..latest"]:
        same(f"REST diff {d} {r}", rest(a, f"/datasets/{d}/diff/{r}"), rest(b, f"/datasets/{d}/diff/{r}"))
        same(f"page diff {d} {r}", page(a, f"/ui/datasets/{d}/diff/{r}"), page(b, f"/ui/datasets/{d}/diff/{r}"))
    for p in paths:
        same(f"REST history {d} {p}", rest(a, f"/datasets/{d}/history?path={p}"), rest(b, f"/datasets/{d}/history?path={p}"))
        same(f"page history {d} {p}", page(a, f"/ui/datasets/{d}/history?path={p}"), page(b, f"/ui/datasets/{d}/history?path={p}"))
        same(f"REST file diff {d} {p}", rest(a, f"/datasets/{d}/diff/v1..v2/files/{p}"), rest(b, f"/datasets/{d}/diff/v1..v2/files/{p}"))
        same(f"page file diff {d} {p}", page(a, f"/ui/datasets/{d}/diff/v1..v2/files/{p}"), page(b, f"/ui/datasets/{d}/diff/v1..v2/files/{p}"))
    for v in versions:
        same(f"page root {d} {v}", page(a, f"/ui/datasets/{d}/versions/{v}/files"), page(b, f"/ui/datasets/{d}/versions/{v}/files"))
        for p in paths:
            same(f"REST preview {d} {v} {p}", rest(a, f"/datasets/{d}/versions/{v}/preview/{p}"), rest(b, f"/datasets/{d}/versions/{v}/preview/{p}"))
            same(f"page {d} {v} {p}", page(a, f"/ui/datasets/{d}/versions/{v}/files/{p}"), page(b, f"/ui/datasets/{d}/versions/{v}/files/{p}"))
            same(f"page download {d} {v} {p}", page(a, f"/ui/datasets/{d}/versions/{v}/download/{p}"), page(b, f"/ui/datasets/{d}/versions/{v}/download/{p}"))

# Writes by a key that may commit but not read what is hidden: each one
# answers as on the store without it, and leaves what the caller sees of
# the next version alike (the hidden files stay as they were, unseen).
import base64
wa, wb = s3(a, "w3_key", "w3_secret"), s3(b, "w3_key", "w3_secret")
b64 = lambda t: base64.b64encode(t.encode()).decode()
writes = [
    ("REST put and delete", {"commit_message": "w1", "files": {"pub/new.csv": b64("n\n")}, "delete": ["pub/a.csv"]}),
    ("REST delete hidden", {"commit_message": "w2", "delete": ["private/s.csv"]}),
    ("REST delete missing", {"commit_message": "w3", "delete": ["nothing.txt"]}),
    ("REST delete hidden in a seen folder", {"commit_message": "w4", "delete": ["mix/secret.txt"]}),
    ("REST put into a hidden folder", {"commit_message": "w5", "files": {"private/x.csv": b64("x\n")}}),
    ("REST put beside a hidden file", {"commit_message": "w6", "files": {"mix/other.txt": b64("o\n")}}),
]


def seen_now(side):
    """What the reading key sees of the newest version, whole."""
    return [rest(side, "/datasets/ds/versions/latest/files" + p) for p in ["", "/pub", "/mix", "/private"]] + \
        [cli(side, "ls", "ds", "latest", "--json")]


expected = {"REST put and delete": 201, "REST delete hidden": 404, "REST delete missing": 404,
            "REST delete hidden in a seen folder": 404, "REST put into a hidden folder": 201,
            "REST put beside a hidden file": 201}
for what, body in writes:
    answer = commit(a, body)
    same(what, answer, commit(b, body))
    same(f"{what}: status", answer[0], expected[what])
    same(f"after {what}", seen_now(a), seen_now(b))
for what, f in [
    ("S3 put", lambda c: c.put_object(Bucket="ds", Key="staging/pub/s3.csv", Body=b"s\n")),
    ("S3 delete hidden", lambda c: c.delete_object(Bucket="ds", Key="staging/private/sub/t.csv")),
    ("S3 delete hidden in a seen folder", lambda c: c.delete_object(Bucket="ds", Key="staging/mix/secret.txt")),
    ("S3 delete missing", lambda c: c.delete_object(Bucket="ds", Key="staging/nothing.txt")),
    ("S3 delete seen", lambda c: c.delete_object(Bucket="ds", Key="staging/top.txt")),
    ("S3 list staging", lambda c: c.list_objects_v2(Bucket="ds", Prefix="staging/")),
    ("S3 commit", lambda c: c.put_object(Bucket="ds", Key="staging/.detafs-commit", Body=b"s3 commit")),
]:
    answer = call(lambda: f(wa))
    same(what, answer, call(lambda: f(wb)))
    same(f"{what}: done", answer[0], "ok")
    same(f"after {what}", seen_now(a), seen_now(b))

if mismatches:
    print(f"{len(mismatches)} of {count} answers differ")
    print("\n".join(mismatches[:40]))
    sys.exit(1)
print(f"ok {count} answers alike")
