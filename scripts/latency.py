#!/usr/bin/env python3
"""Latency of `stat` and a small read of FILES, over and over, while the
process PID runs: prints the count, median, p99 and max in milliseconds.
    scripts/latency.py PID FILE...
"""
import os
import statistics
import sys
import time

pid, files = int(sys.argv[1]), sys.argv[2:]
times = []


def running():
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that ended but was not waited for yet is done too.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


while running():
    for path in files:
        t = time.perf_counter()
        os.stat(path)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        with open(path, "rb") as f:
            f.read(4096)
        times.append(time.perf_counter() - t)
times.sort()
ms = lambda x: x * 1000
p99 = times[min(len(times) - 1, int(len(times) * 0.99))] if times else 0
print(f"{len(times)} {ms(statistics.median(times) if times else 0):.3f} {ms(p99):.3f} {ms(times[-1] if times else 0):.3f}")
