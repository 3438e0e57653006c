#!/usr/bin/env python3
"""fetch_nccl_header.py DEST_DIR: the reference nccl.h of the NCCL drop-in's ABI test, where no CUDA toolkit
provides one (CI). It is NVIDIA's own header of the NCCL release whose ABI compat/nccl implements (2.28.9),
taken from PyPI's nvidia-nccl-cu13 wheel: only that one file is read out of the 190 MB wheel, through HTTP
range requests on the zip's directory and the file's entry (over HTTPS from PyPI's file host; zipfile
checks the entry's CRC-32), and the header must say 2.28.9. Writes DEST_DIR/nccl.h.
Exit status: 0 written; 77 not available (no network, no such release): the ABI test is then not built.
SPDX-License-Identifier: Apache-2.0"""
import io
import json
import os
import sys
import urllib.parse
import urllib.request
import zipfile

PACKAGE, VERSION, CODE = "nvidia-nccl-cu13", "2.28.9", "22809"
MEMBER = "nvidia/nccl/include/nccl.h"
TIMEOUT = 20


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests (what zipfile needs to read one member)."""

    def __init__(self, url, size):
        self.url, self.size, self.pos = url, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = offset if whence == io.SEEK_SET else self.pos + offset if whence == io.SEEK_CUR else self.size + offset
        return self.pos

    def readinto(self, b):
        if self.pos >= self.size or len(b) == 0:
            return 0
        end = min(self.size, self.pos + len(b)) - 1
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            data = r.read()
        if r.status != 206 or len(data) != end - self.pos + 1:
            raise OSError(f"range request answered {r.status} with {len(data)} bytes")
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


def main():
    if len(sys.argv) != 2:
        print("usage: fetch_nccl_header.py DEST_DIR", file=sys.stderr)
        return 2
    dest = sys.argv[1]
    try:
        index = f"https://pypi.org/pypi/{PACKAGE}/json"
        with urllib.request.urlopen(index, timeout=TIMEOUT) as r:
            info = json.load(r)
        wheel = next(f for f in info["releases"][VERSION] if f["filename"].endswith("_x86_64.whl"))
        raw = HttpRangeFile(urllib.parse.urljoin(index, wheel["url"]), int(wheel["size"]))  # (mirrors answer relative URLs)
        with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 16)) as z:
            header = z.read(MEMBER)  # zipfile checks the member's CRC-32
    except Exception as e:  # no network, no release, not a range-capable server: not available
        print(f"fetch_nccl_header: {PACKAGE} {VERSION}'s {MEMBER} is not available: {e}", file=sys.stderr)
        return 77
    text = header.decode("utf-8", "replace")
    if f"#define NCCL_VERSION_CODE {CODE}" not in text:
        print(f"fetch_nccl_header: the fetched header is not NCCL {VERSION}", file=sys.stderr)
        return 77
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "nccl.h"), "wb") as f:
        f.write(header)
    print(f"fetch_nccl_header: {os.path.join(dest, 'nccl.h')} from {wheel['filename']} ({len(header)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
