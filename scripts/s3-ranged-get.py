#!/usr/bin/env python3
"""The reference reader for S3 reads: a plain client that GETs a bucket's
objects under a prefix in ranges of 8 MiB, 8 in flight, until it has read
LIMIT bytes (or all), from the endpoint in AWS_ENDPOINT_URL, unsigned (as
LocalStack takes). Prints: bytes read, seconds.

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


def objects(session, url, bucket, prefix):
    token = None
    while True:
        params = {"list-type": "2", "prefix": prefix}
        if token:
            params["continuation-token"] = token
        r = session.get(f"{url}/{bucket}", params=params, timeout=60)
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
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=IN_FLIGHT))
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
        got = session.get(f"{url}/{bucket}/{key}", headers={"Range": f"bytes={start}-{end}"}, timeout=60)
        got.raise_for_status()
        return len(got.content)

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        read = sum(pool.map(get, ranges))
    print(read, f"{time.monotonic() - t:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
