#!/usr/bin/env python3
"""Extract the uncompressed kernel ELF (vmlinux) from a bzImage.

Same idea as the kernel's scripts/extract-vmlinux: look for the magic bytes of
each supported compressor inside the bzImage, try to decompress from every hit
and keep the first result that is an ELF file.

usage: extract-vmlinux.py BZIMAGE OUTPUT
"""
import gzip
import lzma
import shutil
import subprocess
import sys
import zlib

MAGICS = [
    ("xz", b"\xfd7zXZ\x00"),
    ("zstd", b"\x28\xb5\x2f\xfd"),
    ("gzip", b"\x1f\x8b\x08"),
    ("lzma", b"\x5d\x00\x00"),
]


def decompress(kind, data):
    if kind == "xz":
        # The payload is followed by trailing bytes (the decompressor stub, the
        # size word), so use a decompressor object and ignore unused_data.
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)
    if kind == "lzma":
        return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(data)
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    if kind == "zstd":
        if not shutil.which("zstd"):
            raise RuntimeError("zstd payload but no zstd binary (apt-get install zstd)")
        # zstd -d stops at the end of the frame; trailing garbage makes it exit
        # non-zero, so read what it wrote regardless of the status.
        p = subprocess.run(["zstd", "-dcq"], input=data, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
        return p.stdout
    raise ValueError(kind)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        blob = f.read()
    if blob[:4] == b"\x7fELF":
        shutil.copyfile(src, dst)
        return 0
    for kind, magic in MAGICS:
        pos = blob.find(magic)
        while pos >= 0:
            try:
                out = decompress(kind, blob[pos:])
            except Exception:
                out = b""
            if out[:4] == b"\x7fELF":
                tmp = dst + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(out)
                shutil.move(tmp, dst)
                print(f"extract-vmlinux: {kind} payload at offset {pos}, "
                      f"{len(out)} bytes", file=sys.stderr)
                return 0
            pos = blob.find(magic, pos + 1)
    print(f"extract-vmlinux: no compressed ELF payload found in {src}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
