"""The S3 endpoint and REST under a policy, for writes and keys: what the
policy hides is missing for writes too; staging and uploads belong to a
key's id; presigned URLs live at most 7 days; a CompleteMultipartUpload
that names its parts wrongly keeps them. boto3 and requests only.

    s3_hidden.py stage SETUP    (before the key `temp` is revoked)
    s3_hidden.py check SETUP    (after it is made again)
"""
import json
import sys

import boto3
import botocore.config
import requests
from botocore.exceptions import ClientError

checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        raise SystemExit(f"FAILED: {what}")


def client(s, key, secret, signature_version=None):
    cfg = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version=signature_version)
    return boto3.client("s3", endpoint_url=s["endpoint"], aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1", verify=s["ca"], config=cfg)


def answer(f):
    """(code, HTTP status, message) of an S3 call, (None, 200, None) if it worked."""
    try:
        f()
        return (None, 200, None)
    except ClientError as e:
        return (e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"].get("Message"))


def commit(c, message):
    return c.put_object(Bucket="ds", Key="staging/.detafs-commit", Body=message.encode())


def stage(s):
    t = client(s, s["temp_key"], s["temp_secret"])
    t.put_object(Bucket="ds", Key="staging/by-the-old-key.txt", Body=b"old")


def hidden_writes(s):
    c = client(s, s["clerk_key"], s["clerk_secret"])
    # A deletion of a file the policy hides is as of a missing one: dropped
    # at the commit, which names neither, and never blocking a later one.
    c.delete_object(Bucket="ds", Key="staging/private/secret.csv")
    c.delete_object(Bucket="ds", Key="staging/private/none.csv")
    c.put_object(Bucket="ds", Key="staging/a.txt", Body=b"a")
    check(commit(c, "by the clerk")["VersionId"] == "v2", "a commit beside a hidden deletion")
    c.put_object(Bucket="ds", Key="staging/b.txt", Body=b"b")
    check(commit(c, "again")["VersionId"] == "v3", "the next commit")
    c.delete_object(Bucket="ds", Key="staging/private/secret.csv")
    hidden = answer(lambda: commit(c, "hidden only"))
    c.delete_object(Bucket="ds", Key="staging/private/none.csv")
    missing = answer(lambda: commit(c, "missing only"))
    check(hidden == missing and hidden[0] == "InvalidRequest", f"hidden {hidden} missing {missing}")


def presigned(s):
    # boto3 signs presigned URLs with SigV2 (`Expires`, a time) unless told
    # SigV4 (`X-Amz-Expires`, seconds): both live at most 7 days.
    for version in ["s3v4", None]:
        r = client(s, s["reader_key"], s["reader_secret"], signature_version=version)
        url = lambda secs: r.generate_presigned_url("get_object", Params={"Bucket": "ds", "Key": "v1/pub.txt"}, ExpiresIn=secs)
        got = requests.get(url(604000), verify=s["ca"])
        check(got.status_code == 200 and got.content == b"public\n", f"{version} within a week {got.status_code} {got.content[:200]}")
        got = requests.get(url(604801 + 60), verify=s["ca"])
        check(got.status_code == 400 and b"AuthorizationQueryParametersError" in got.content, f"{version} beyond a week {got.status_code} {got.content[:200]}")


def multipart(s):
    c = client(s, s["clerk_key"], s["clerk_secret"])
    up = c.create_multipart_upload(Bucket="ds", Key="staging/big.bin")["UploadId"]
    one = c.upload_part(Bucket="ds", Key="staging/big.bin", UploadId=up, PartNumber=1, Body=b"1" * (5 << 20))["ETag"]
    two = c.upload_part(Bucket="ds", Key="staging/big.bin", UploadId=up, PartNumber=2, Body=b"2")["ETag"]
    done = lambda parts: c.complete_multipart_upload(Bucket="ds", Key="staging/big.bin", UploadId=up, MultipartUpload={"Parts": parts})
    check(answer(lambda: done([{"PartNumber": 2, "ETag": two}, {"PartNumber": 1, "ETag": one}]))[0] == "InvalidPartOrder", "parts out of order")
    check(answer(lambda: done([{"PartNumber": 1, "ETag": one}, {"PartNumber": 3, "ETag": two}]))[0] == "InvalidPart", "a missing part")
    check(answer(lambda: done([{"PartNumber": 1, "ETag": one}, {"PartNumber": 2, "ETag": two}]))[0] is None, "kept for the retry")
    check(c.head_object(Bucket="ds", Key="staging/big.bin")["ContentLength"] == (5 << 20) + 1, "staged")


def hidden_dataset(s):
    r = client(s, s["reader_key"], s["reader_secret"])
    hidden = answer(lambda: r.get_object(Bucket="other", Key="v1/x.txt"))
    missing = answer(lambda: r.get_object(Bucket="nosuch", Key="v1/x.txt"))
    check(hidden[:2] == missing[:2] == ("NoSuchBucket", 404), f"GetObject hidden {hidden} missing {missing}")
    check(hidden[2].replace("other", "X") == missing[2].replace("nosuch", "X"), f"messages {hidden[2]} {missing[2]}")
    listed = answer(lambda: r.list_objects_v2(Bucket="other"))
    check(listed[:2] == ("NoSuchBucket", 404), f"ListObjectsV2 hidden {listed}")
    # REST: a hidden dataset's version list answers as a missing one's.
    auth = {"Authorization": f"Bearer {s['rest_reader']}"}
    h = requests.get(f"{s['rest']}/datasets/other/versions", headers=auth, verify=s["ca"])
    m = requests.get(f"{s['rest']}/datasets/nosuch/versions", headers=auth, verify=s["ca"])
    check((h.status_code, h.json()["error"]["code"]) == (m.status_code, m.json()["error"]["code"]) == (404, "no_dataset"), f"REST versions {h.text} {m.text}")


def uploads_are_their_makers(s):
    a = {"Authorization": f"Bearer {s['rest_a']}"}
    b = {"Authorization": f"Bearer {s['rest_b']}"}
    up = requests.put(f"{s['rest']}/datasets/ds/uploads/made-by-a.txt", data=b"a's", headers=a, verify=s["ca"])
    check(up.status_code == 201, f"upload {up.text}")
    theirs = requests.post(f"{s['rest']}/datasets/ds/commit", json={"commit_message": "b", "uploads": [up.json()["upload"]]}, headers=b, verify=s["ca"])
    bogus = requests.post(f"{s['rest']}/datasets/ds/commit", json={"commit_message": "b", "uploads": ["0" * 32]}, headers=b, verify=s["ca"])
    check(theirs.status_code == bogus.status_code == 400, f"another's upload {theirs.text} {bogus.text}")
    mine = requests.post(f"{s['rest']}/datasets/ds/commit", json={"commit_message": "a", "uploads": [up.json()["upload"]]}, headers=a, verify=s["ca"])
    check(mine.status_code == 201, f"its maker commits it {mine.text}")


def new_key_of_the_same_name(s):
    t = client(s, s["temp_key"], s["temp_secret"])
    staged = t.list_objects_v2(Bucket="ds", Prefix="staging/").get("Contents", [])
    check(staged == [], f"a new key of a revoked one's name sees its staging {staged}")
    check(answer(lambda: commit(t, "not mine"))[0] == "InvalidRequest", "and commits none of it")


setup = json.load(open(sys.argv[2]))
if sys.argv[1] == "stage":
    stage(setup)
else:
    hidden_writes(setup)
    presigned(setup)
    multipart(setup)
    hidden_dataset(setup)
    uploads_are_their_makers(setup)
    new_key_of_the_same_name(setup)
print(f"ok {checks} checks")
