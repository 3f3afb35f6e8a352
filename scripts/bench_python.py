"""Driver of scripts/bench-python.sh: BIN ROOT RUNS. Prints a Markdown table."""

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

import fsspec
import numpy as np
import pandas as pd

import detafs

BIN, ROOT, RUNS = sys.argv[1], sys.argv[2], int(sys.argv[3])
STORE, WORK = f"{ROOT}/py-store", f"{ROOT}/py-work"
env = dict(os.environ, DETAFS_STORE=STORE, DETAFS_CACHE=f"{ROOT}/py-cache")
os.environ.update(env)


def cli(*args):
    subprocess.run([BIN, *args], env=env, check=True, capture_output=True)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_all(fs, path, block=4 << 20):
    with fs.open(path, "rb", block_size=block) as f:
        while f.read(block):
            pass


# The data: the benchmark dataset, and a ~100 MiB Parquet file of random numbers.
shutil.rmtree(STORE, ignore_errors=True)
shutil.rmtree(f"{ROOT}/py-cache", ignore_errors=True)
shutil.rmtree(WORK, ignore_errors=True)
shutil.copytree(f"{ROOT}/data", WORK)
rng = np.random.default_rng(7)
pd.DataFrame({c: rng.random(2_600_000) for c in "abcde"}).to_parquet(f"{WORK}/table.parquet", compression=None)
cli("init", "--plaintext")
cli("dataset", "create", "bench")
cli("commit", "bench", "--from", WORK, "-m", "v1")
local, fs = fsspec.filesystem("file"), fsspec.filesystem("detafs", skip_instance_cache=True)
# The gateway on 127.0.0.1, its self-signed certificate trusted.
key = subprocess.run([BIN, "apikey", "create", "bench", "--scopes", "read"], env=env, check=True,
                     capture_output=True, text=True).stdout.strip()
gateway = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
url = next(line.split()[1].rstrip("/") for line in gateway.stderr if line.startswith("serving "))
threading.Thread(target=lambda: [None for _ in gateway.stderr], daemon=True).start()
cert = next(os.path.join(d, "gateway-cert.pem") for d, _, fs_ in os.walk(f"{ROOT}/py-cache") if "gateway-cert.pem" in fs_)
remote = {"store": url, "api_key": key, "ca": cert}
small = sorted(local.find(f"{WORK}/small"))[:2000]
rows = {k: [] for k in ("big_cold_n", "big_cold_d", "big_warm_n", "big_warm_d", "pq_n", "pq_d", "pq_g",
                        "find_n", "find_d", "t1", "t8", "tx", "commit")}
for run in range(RUNS):
    drop_caches()
    rows["big_cold_n"].append(timed(lambda: read_all(local, f"{WORK}/big.bin")))
    drop_caches()
    fs = fsspec.filesystem("detafs", skip_instance_cache=True)
    rows["big_cold_d"].append(timed(lambda: read_all(fs, "detafs://bench@v1/big.bin")))
    # Warm: each read again at once (the page cache holds the local file,
    # and the store's packs; detafs's chunk cache holds 64 MiB of it).
    read_all(local, f"{WORK}/big.bin")
    rows["big_warm_n"].append(timed(lambda: read_all(local, f"{WORK}/big.bin")))
    rows["big_warm_d"].append(timed(lambda: read_all(fs, "detafs://bench@v1/big.bin")))
    # Parquet with the page cache warm for both (each read once first):
    # the disk of this host is too uneven for a cold comparison.
    pd.read_parquet(f"{WORK}/table.parquet")
    pd.read_parquet("detafs://bench@v1/table.parquet", filesystem=fs)
    rows["pq_n"].append(timed(lambda: pd.read_parquet(f"{WORK}/table.parquet")))
    rows["pq_d"].append(timed(lambda: pd.read_parquet("detafs://bench@v1/table.parquet", filesystem=fs)))
    rows["pq_g"].append(timed(lambda: pd.read_parquet("detafs://bench@v1/table.parquet", storage_options=remote)))
    rows["find_n"].append(timed(lambda: local.find(f"{WORK}/small")))
    rows["find_d"].append(timed(lambda: fs.find("detafs://bench@v1/small")))
    names = [p[len(WORK) + 1:] for p in small]

    def reads(ds, part):
        for n in part:
            ds.read(n, "v1")

    # Each on a Store of its own (its chunk cache empty), the page cache
    # warmed by a first pass.
    reads(detafs.Store().dataset("bench"), names)
    one = detafs.Store().dataset("bench")
    rows["t1"].append(timed(lambda: reads(one, names)))
    eight = detafs.Store().dataset("bench")
    threads = [threading.Thread(target=reads, args=(eight, names[i::8])) for i in range(8)]
    rows["t8"].append(timed(lambda: ([t.start() for t in threads], [t.join() for t in threads])))
    ds = eight
    # 1,000 new files: a transaction, then the same files by `commit --from`.
    files = {f"tx{run}/f{i:04}.txt": os.urandom(2000) for i in range(1000)}

    def transaction():
        with ds.stage(f"tx {run}") as s:
            for p, data in files.items():
                s.write(p, data)

    rows["tx"].append(timed(transaction))
    folder = f"{ROOT}/py-tx"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(WORK, folder)
    for p, data in files.items():
        os.makedirs(os.path.dirname(f"{folder}/c{p}"), exist_ok=True)
        with open(f"{folder}/c{p}", "wb") as f:
            f.write(data)
    cli("commit", "bench", "--from", folder, "-m", "warm the stat cache")
    for p, data in files.items():
        with open(f"{folder}/c{p}", "wb") as f:
            f.write(data[::-1])
    rows["commit"].append(timed(lambda: cli("commit", "bench", "--from", folder, "-m", f"cli {run}")))
    print(run + 1, {k: round(v[-1], 3) for k, v in rows.items()}, file=sys.stderr)

med = {k: statistics.median(v) for k, v in rows.items()}
sp = {k: f"{min(v):.2f}–{max(v):.2f}" for k, v in rows.items()}
size = os.path.getsize(f"{WORK}/big.bin") / 2**20
pq = os.path.getsize(f"{WORK}/table.parquet") / 2**20
print(f"| Python, runs: {RUNS} (medians, spread) | fsspec local | detafs:// | detafs vs local |")
print("|---|---|---|---|")
print(f"| read the {size:.0f} MiB file, cold | {med['big_cold_n']:.2f} s ({sp['big_cold_n']}) | {med['big_cold_d']:.2f} s ({sp['big_cold_d']}) | {med['big_cold_n'] / med['big_cold_d'] * 100:.0f}% |")
print(f"| the same, warm | {med['big_warm_n']:.2f} s ({sp['big_warm_n']}) | {med['big_warm_d']:.2f} s ({sp['big_warm_d']}) | {med['big_warm_n'] / med['big_warm_d'] * 100:.0f}% |")
print(f"| `pd.read_parquet` of a {pq:.0f} MiB file, page cache warm | {med['pq_n']:.2f} s ({sp['pq_n']}) | {med['pq_d']:.2f} s ({sp['pq_d']}) | {med['pq_n'] / med['pq_d'] * 100:.0f}% |")
print(f"| the same through `detafs serve` on 127.0.0.1 (TLS) | {med['pq_n']:.2f} s | {med['pq_g']:.2f} s ({sp['pq_g']}) | {med['pq_n'] / med['pq_g'] * 100:.0f}% |")
print(f"| `fs.find` over the 20,000 small files | {med['find_n']:.2f} s ({sp['find_n']}) | {med['find_d']:.2f} s ({sp['find_d']}) | {med['find_d'] / med['find_n']:.2f}x |")
print(f"| 2,000 small files read on 1 thread / 8 threads | | {med['t1']:.2f} s / {med['t8']:.2f} s | {med['t1'] / med['t8']:.2f}x faster on 8 |")
gateway.kill()
print(f"| 1,000 files of 2 KB: a transaction / `detafs commit --from` | | {med['tx']:.2f} s / {med['commit']:.2f} s | {med['tx'] / med['commit']:.2f}x |")
