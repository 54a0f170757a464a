#!/usr/bin/env python3
"""Write a single-layer OCI image layout (no docker/skopeo needed).

usage: oci-layout.py --out DIR [--ref latest] [--uid 107 --gid 107 --mode 0444]
                     DEST=SRC [DEST=SRC ...]

DEST is the path inside the image (e.g. disk/disk.qcow2), SRC the file on the
host. The layer is one gzip'd tar; parent directories are added (0755), files
get --mode and --uid/--gid. Output is reproducible: fixed mtimes, sorted
entries, gzip without a timestamp, so unchanged inputs give unchanged digests.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


class HashWriter:
    """File wrapper that hashes what goes through it."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)

    def flush(self):
        self.f.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref", default="latest")
    ap.add_argument("--uid", type=int, default=107)
    ap.add_argument("--gid", type=int, default=107)
    ap.add_argument("--mode", default="0444")
    ap.add_argument("--level", type=int, default=6, help="gzip level")
    ap.add_argument("files", nargs="+", metavar="DEST=SRC")
    a = ap.parse_args()

    entries = []
    for spec in a.files:
        dest, src = spec.split("=", 1)
        entries.append((dest.strip("/"), src))
    entries.sort()

    tmpdir = a.out + ".tmp"
    shutil.rmtree(tmpdir, ignore_errors=True)
    blobs = os.path.join(tmpdir, "blobs", "sha256")
    os.makedirs(blobs)

    def put_blob(data):
        d = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, d), "wb") as f:
            f.write(data)
        return "sha256:" + d, len(data)

    # Layer: stream tar -> (diff_id hash) -> gzip -> (digest hash) -> file.
    layer_tmp = os.path.join(blobs, "layer.tmp")
    with open(layer_tmp, "wb") as raw:
        gz_hw = HashWriter(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=gz_hw,
                           compresslevel=a.level, mtime=0) as gz:
            tar_hw = HashWriter(gz)
            with tarfile.open(fileobj=tar_hw, mode="w|", format=tarfile.GNU_FORMAT) as tar:
                dirs_done = set()
                for dest, src in entries:
                    parts = dest.split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        d = "/".join(parts[:i])
                        if d in dirs_done:
                            continue
                        dirs_done.add(d)
                        ti = tarfile.TarInfo(d + "/")
                        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                        ti.uid, ti.gid, ti.mtime = a.uid, a.gid, 0
                        tar.addfile(ti)
                    ti = tarfile.TarInfo(dest)
                    ti.size = os.path.getsize(src)
                    ti.mode = int(a.mode, 8)
                    ti.uid, ti.gid, ti.mtime = a.uid, a.gid, 0
                    with open(src, "rb") as f:
                        tar.addfile(ti, f)
    layer_digest = "sha256:" + gz_hw.h.hexdigest()
    layer_size = gz_hw.n
    diff_id = "sha256:" + tar_hw.h.hexdigest()
    os.replace(layer_tmp, os.path.join(blobs, layer_digest.split(":")[1]))

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "virtplane scripts/build-test-guests"}],
    }
    cfg_digest, cfg_size = put_blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": cfg_digest, "size": cfg_size},
        "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": layer_size}],
    }
    man_digest, man_size = put_blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [{
            "mediaType": MT_MANIFEST, "digest": man_digest, "size": man_size,
            "annotations": {"org.opencontainers.image.ref.name": a.ref},
        }],
    }
    with open(os.path.join(tmpdir, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True)
    with open(os.path.join(tmpdir, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    shutil.rmtree(a.out, ignore_errors=True)
    os.replace(tmpdir, a.out)
    print(f"oci-layout: {a.out} manifest {man_digest} layer {layer_size} bytes",
          flush=True, file=__import__("sys").stderr)


if __name__ == "__main__":
    main()
