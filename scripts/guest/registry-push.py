#!/usr/bin/env python3
"""Push an OCI image layout to a registry with the HTTP API v2 (stdlib only).

usage: registry-push.py [--ca CA_FILE] HOST:PORT NAME:TAG LAYOUT_DIR

With --ca the registry is spoken to over HTTPS, trusting the certificates in CA_FILE.

Pushes the first manifest in LAYOUT_DIR/index.json: its blobs (config and
layers: HEAD to skip existing ones, else POST /v2/NAME/blobs/uploads/ then a
monolithic PUT <location>?digest=...), then PUT /v2/NAME/manifests/TAG.
Prints the manifest digest.
"""
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

TLS = None


def request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60, context=TLS) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def main():
    global TLS
    args = sys.argv[1:]
    scheme = "http"
    if args[:1] == ["--ca"]:
        TLS = ssl.create_default_context(cafile=args[1])
        scheme = "https"
        args = args[2:]
    addr, ref, layout = args[:3]
    name, _, tag = ref.partition(":")
    tag = tag or "latest"
    base = f"{scheme}://{addr}"
    blobdir = os.path.join(layout, "blobs", "sha256")
    with open(os.path.join(layout, "index.json")) as f:
        desc = json.load(f)["manifests"][0]
    with open(os.path.join(blobdir, desc["digest"].split(":", 1)[1]), "rb") as f:
        manifest_bytes = f.read()
    manifest = json.loads(manifest_bytes)

    for blob in [manifest["config"]] + manifest["layers"]:
        digest = blob["digest"]
        st, _, _ = request("HEAD", f"{base}/v2/{name}/blobs/{digest}")
        if st == 200:
            continue
        st, hdrs, body = request("POST", f"{base}/v2/{name}/blobs/uploads/", b"",
                                 {"Content-Length": "0"})
        if st != 202:
            sys.exit(f"registry-push: POST upload for {name}: HTTP {st} {body[:200]!r}")
        loc = urllib.parse.urljoin(base + "/", hdrs["Location"])
        loc += ("&" if "?" in loc else "?") + "digest=" + urllib.parse.quote(digest)
        with open(os.path.join(blobdir, digest.split(":", 1)[1]), "rb") as f:
            data = f.read()
        st, _, body = request("PUT", loc, data, {"Content-Type": "application/octet-stream",
                                                  "Content-Length": str(len(data))})
        if st != 201:
            sys.exit(f"registry-push: PUT blob {digest}: HTTP {st} {body[:200]!r}")

    st, hdrs, body = request("PUT", f"{base}/v2/{name}/manifests/{tag}", manifest_bytes,
                             {"Content-Type": manifest["mediaType"]})
    if st != 201:
        sys.exit(f"registry-push: PUT manifest {name}:{tag}: HTTP {st} {body[:300]!r}")
    got = hdrs.get("Docker-Content-Digest")
    if got and got != desc["digest"]:
        sys.exit(f"registry-push: registry digest {got} != {desc['digest']}")
    print(desc["digest"])


if __name__ == "__main__":
    main()
