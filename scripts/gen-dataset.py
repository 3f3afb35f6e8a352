#!/usr/bin/env python3
"""Generates the benchmark dataset and its small edit (docs/benchmarks.md).

  gen-dataset.py DIR          ~1 GiB: one 512 MiB binary, 200 CSVs of ~1 MiB,
                              20,000 files of 1-4 KiB in 200 folders
  gen-dataset.py --edit DIR   1 MiB overwritten mid big file, 1,000 rows appended
                              to 10 CSVs, 100 small files added and 100 deleted;
                              prints the bytes changed
"""
import argparse
import os
import random


def csv_rows(rng, n, start):
    return "".join(
        f"{start + i},{rng.randint(0, 10**9)},{rng.random():.6f},name{rng.randint(0, 9999)}\n"
        for i in range(n)
    )


def generate(root):
    rng = random.Random(42)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        for _ in range(512):
            f.write(rng.randbytes(1 << 20))
    os.makedirs(os.path.join(root, "csv"), exist_ok=True)
    for i in range(200):
        with open(os.path.join(root, "csv", f"table{i:03}.csv"), "w") as f:
            f.write("id,value,score,name\n")
            f.write(csv_rows(rng, 24_000, 0))
    for d in range(200):
        folder = os.path.join(root, "small", f"dir{d:03}")
        os.makedirs(folder, exist_ok=True)
        for i in range(100):
            with open(os.path.join(folder, f"file{i:03}.txt"), "wb") as f:
                f.write(rng.randbytes(rng.randint(1024, 4096)))


def edit(root):
    rng = random.Random(7)
    changed = 0
    with open(os.path.join(root, "big.bin"), "r+b") as f:
        f.seek(256 << 20)
        f.write(rng.randbytes(1 << 20))
        changed += 1 << 20
    for i in range(10):
        rows = csv_rows(rng, 1000, 24_000)
        with open(os.path.join(root, "csv", f"table{i * 20:03}.csv"), "a") as f:
            f.write(rows)
        changed += len(rows)
    for i in range(100):
        os.remove(os.path.join(root, "small", f"dir{i:03}", "file000.txt"))
        data = rng.randbytes(rng.randint(1024, 4096))
        with open(os.path.join(root, "small", f"dir{i + 100:03}", f"new{i:03}.txt"), "wb") as f:
            f.write(data)
        changed += len(data)
    print(changed)


if __name__ == "__main__":
    # argparse, so that `--help` or a mistyped option is refused rather than
    # taken for the folder to fill with a gigabyte.
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--edit", action="store_true", help="apply the small edit to DIR")
    parser.add_argument("dir", metavar="DIR")
    args = parser.parse_args()
    if args.edit:
        edit(args.dir)
    elif os.path.exists(args.dir) and os.listdir(args.dir):
        parser.error(f"{args.dir} exists and is not empty")
    else:
        generate(args.dir)
