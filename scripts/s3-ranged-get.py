#!/usr/bin/env python3
"""The reference reader for S3 reads: a plain client that GETs a bucket's
objects under a prefix in ranges of 8 MiB, 8 in flight, until it has read
LIMIT bytes (or all), from the endpoint in AWS_ENDPOINT_URL: unsigned (as
LocalStack takes), or signed (SigV4, botocore) when AWS_ACCESS_KEY_ID is
set, over TLS checked against AWS_CA_BUNDLE if given. Prints: bytes read,
seconds; with --list, the seconds of listing the prefix alone and the
keys listed.

    scripts/s3-ranged-get.py BUCKET PREFIX LIMIT
"""
import concurrent.futures
import os
import sys
import time
import xml.etree.ElementTree as ET

import requests

PART, IN_FLIGHT = 8 << 20, 8
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def signer():
    """Signs a request's headers (SigV4) when keys are given, else nothing."""
    if "AWS_ACCESS_KEY_ID" not in os.environ:
        return lambda method, url, headers: headers
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    creds = botocore.credentials.Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    auth = botocore.auth.S3SigV4Auth(creds, "s3", os.environ.get("AWS_REGION", "us-east-1"))

    def sign(method, url, headers):
        req = botocore.awsrequest.AWSRequest(method=method, url=url, headers=headers)
        auth.add_auth(req)
        return dict(req.headers)

    return sign


SIGN = signer()
VERIFY = os.environ.get("AWS_CA_BUNDLE", True)


def objects(session, url, bucket, prefix):
    token = None
    while True:
        params = {"list-type": "2", "prefix": prefix}
        if token:
            params["continuation-token"] = token
        full = requests.Request("GET", f"{url}/{bucket}", params=params).prepare().url
        r = session.get(full, headers=SIGN("GET", full, {}), timeout=60, verify=VERIFY)
        r.raise_for_status()
        root = ET.fromstring(r.content)
        for c in root.iter(f"{NS}Contents"):
            yield c.find(f"{NS}Key").text, int(c.find(f"{NS}Size").text)
        token = root.findtext(f"{NS}NextContinuationToken")
        if not token:
            return


def main(bucket, prefix, limit):
    url = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    session = requests.Session()
    for scheme in ("http://", "https://"):
        session.mount(scheme, requests.adapters.HTTPAdapter(pool_maxsize=IN_FLIGHT))
    ranges, total = [], 0
    for key, size in sorted(objects(session, url, bucket, prefix), key=lambda o: -o[1]):
        for start in range(0, size, PART):
            end = min(start + PART, size, start + limit - total) - 1
            if end < start:
                break
            ranges.append((key, start, end))
            total += end - start + 1
        if total >= limit:
            break

    def get(r):
        key, start, end = r
        full = f"{url}/{bucket}/{key}"
        headers = SIGN("GET", full, {"Range": f"bytes={start}-{end}"})
        got = session.get(full, headers=headers, timeout=60, verify=VERIFY)
        got.raise_for_status()
        return len(got.content)

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        read = sum(pool.map(get, ranges))
    print(read, f"{time.monotonic() - t:.3f}")


def list_only(bucket, prefix):
    url = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    session = requests.Session()
    t = time.monotonic()
    n = sum(1 for _ in objects(session, url, bucket, prefix))
    print(f"{time.monotonic() - t:.3f}", n)


if __name__ == "__main__":
    if sys.argv[1] == "--list":
        list_only(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
