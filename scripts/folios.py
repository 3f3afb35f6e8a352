#!/usr/bin/env python3
"""How the page cache holds a file: of its cached pages, how many belong to
large folios (compound pages), read from /proc/self/pagemap and
/proc/kpageflags (root only). Prints: pages, in large folios, share.

    scripts/folios.py FILE      (reads FILE whole through a private mapping)
"""
import ctypes
import mmap
import os
import struct
import sys

COMPOUND_HEAD, COMPOUND_TAIL = 1 << 15, 1 << 16
PRESENT, PFN_MASK = 1 << 63, (1 << 55) - 1


def main(path):
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    # A private mapping not written to maps the page cache's own pages.
    m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    total = large = 0
    with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as flags:
        for off in range(0, size, page):
            _ = m[off]  # fault the page in
            pagemap.seek((base + off) // page * 8)
            (entry,) = struct.unpack("<Q", pagemap.read(8))
            if not entry & PRESENT:
                continue
            flags.seek((entry & PFN_MASK) * 8)
            (f,) = struct.unpack("<Q", flags.read(8))
            total += 1
            large += bool(f & (COMPOUND_HEAD | COMPOUND_TAIL))
    print(total, large, f"{large / max(total, 1) * 100:.0f}%")


if __name__ == "__main__":
    main(sys.argv[1])
