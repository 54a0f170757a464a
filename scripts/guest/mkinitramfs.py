#!/usr/bin/env python3
"""Build the virtplane test-guest initramfs (gzip'd newc cpio), reproducibly.

usage: mkinitramfs.py --kver VERSION --busybox PATH --guest-dir DIR --out FILE

Contents: busybox (applet links are made by /init at boot), /init and its helper
scripts from --guest-dir, /dev/console, and the kernel modules in MODULES plus
everything they depend on (from modules.dep), with /etc/virtplane-modules
listing them in load order, signatures stripped (see strip_signature). Modules built into the kernel (modules.builtin)
are skipped. Written without root: device nodes and owners are set in the
archive headers only.
"""
import argparse
import gzip
import io
import lzma
import os
import sys

# Drivers the guest must have for the devices KubeVirt / virtplane give it.
MODULES = [
    "virtio_pci",                       # transport for all virtio-*-pci devices
    "virtio_blk", "virtio_net", "virtio_scsi",
    "sd_mod", "sr_mod",                 # scsi disks / cdroms
    "ahci", "libahci",                  # sata (q35)
    "ata_piix",                         # ide (pc)
    "e1000", "e1000e", "8139cp", "8139too",
    "vfat", "fat", "nls_cp437", "nls_iso8859_1",   # FAT seeds
    "nls_utf8",                         # CONFIG_NLS_DEFAULT (isofs joliet), FAT utf8=1
    "isofs",                            # NoCloud / ConfigDrive ISOs, cdroms
    "button", "evdev",                  # the ACPI power button, read by acpid
    "virtio_rng", "i6300esb",
    "virtio_balloon",                   # memory stats for the node's metrics
]
# insmod arguments. scan=sync: SCSI scanning finishes before insmod returns,
# so disks behind virtio-scsi exist when /init looks for the seed.
PARAMS = {"scsi_mod": "scan=sync"}


def norm(name):
    return name.replace("-", "_")


def modname(path):
    base = os.path.basename(path)
    for ext in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(ext):
            return norm(base[: -len(ext)])
    return norm(base)


def config_nls(kver):
    """nls_* modules named by the kernel's default FAT codepage / iocharset
    (vfat mounts fail with EINVAL when the default iocharset is missing)."""
    extra = []
    try:
        with open(f"/boot/config-{kver}") as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                v = v.strip('"')
                if k == "CONFIG_FAT_DEFAULT_CODEPAGE":
                    extra.append("nls_cp" + v)
                elif k in ("CONFIG_FAT_DEFAULT_IOCHARSET", "CONFIG_NLS_DEFAULT"):
                    extra.append("nls_" + v.replace("-", "_"))
    except FileNotFoundError:
        extra = ["nls_ascii"]
    return extra


def resolve(moddir, wanted):
    deps, paths = {}, {}
    with open(os.path.join(moddir, "modules.dep")) as f:
        for line in f:
            if ":" not in line:
                continue
            left, right = line.split(":", 1)
            name = modname(left.strip())
            paths[name] = left.strip()
            deps[name] = [modname(p) for p in right.split()]
    builtin = set()
    try:
        with open(os.path.join(moddir, "modules.builtin")) as f:
            builtin = {modname(l.strip()) for l in f if l.strip()}
    except FileNotFoundError:
        pass
    order, seen, skipped = [], set(), []

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        if name in builtin:
            skipped.append(name)
            return
        if name not in paths:
            sys.exit(f"mkinitramfs: module {name} is neither in modules.dep nor built in")
        # modules.dep lists deps so that loading them right-to-left works;
        # a post-order walk gives a valid order either way.
        for d in reversed(deps[name]):
            visit(d)
        order.append(name)

    for m in wanted:
        if norm(m) not in paths and norm(m) not in builtin and m.startswith("nls_"):
            continue  # e.g. nls_utf8 is in nls_base
        visit(norm(m))
    return order, paths, skipped


SIG_MAGIC = b"~Module signature appended~\n"


def strip_signature(data):
    """Drop the appended module signature: verifying it (RSA under TCG) costs
    about 0.5 s per boot over all modules. The kernel then loads the module
    unverified and marks itself tainted; that is refused only under lockdown
    (EFI secure boot), which these BIOS/PVH guests never run with."""
    if not data.endswith(SIG_MAGIC):
        return data
    # struct module_signature (12 bytes) ends with the big-endian sig_len.
    sig_len = int.from_bytes(data[-len(SIG_MAGIC) - 4:-len(SIG_MAGIC)], "big")
    return data[:len(data) - len(SIG_MAGIC) - 12 - sig_len]


def read_module(path, keep_sig):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        data = lzma.decompress(data)
    elif path.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.endswith(".zst"):
        import subprocess
        data = subprocess.run(["zstd", "-dcq", path], check=True,
                              stdout=subprocess.PIPE).stdout
    return data if keep_sig else strip_signature(data)


class Cpio:
    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name, mode, data=b"", nlink=1, rdev=(0, 0)):
        name_b = name.encode() + b"\0"
        hdr = "070701" + "".join("%08X" % v for v in (
            self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0,
            rdev[0], rdev[1], len(name_b), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + name_b)
        self.buf.write(b"\0" * (-(110 + len(name_b)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name, perm=0o755):
        self._entry(name, 0o040000 | perm, nlink=2)

    def file(self, name, data, perm=0o644):
        self._entry(name, 0o100000 | perm, data)

    def symlink(self, name, target):
        self._entry(name, 0o120777, target.encode())

    def chardev(self, name, major, minor, perm=0o600):
        self._entry(name, 0o020000 | perm, rdev=(major, minor))

    def finish(self):
        self.ino = 0
        self._entry("TRAILER!!!", 0, nlink=1)
        data = self.buf.getvalue()
        return data + b"\0" * (-len(data) % 512)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kver", required=True)
    ap.add_argument("--busybox", required=True)
    ap.add_argument("--guest-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep-module-signatures", action="store_true")
    a = ap.parse_args()

    moddir = f"/lib/modules/{a.kver}"
    order, paths, skipped = resolve(moddir, MODULES + config_nls(a.kver))

    c = Cpio()
    for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "proc", "sys",
              "dev", "tmp", "run", "mnt", "root", "lib", "lib/modules"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3, 0o666)
    c.chardev("dev/ttyS0", 4, 64)
    with open(a.busybox, "rb") as f:
        c.file("bin/busybox", f.read(), 0o755)
    c.symlink("bin/sh", "busybox")

    def guest(name):
        with open(os.path.join(a.guest_dir, name), "rb") as f:
            return f.read()

    c.file("init", guest("init"), 0o755)
    c.file("etc/udhcpc.script", guest("udhcpc.script"), 0o755)
    c.file("bin/echo-hello", guest("echo-hello"), 0o755)
    c.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    c.file("etc/group", b"root:x:0:\n")
    c.file("etc/hosts", b"127.0.0.1 localhost\n")
    lines = []
    for m in order:
        c.file(f"lib/modules/{m}.ko", read_module(os.path.join(moddir, paths[m]), a.keep_module_signatures))
        lines.append((m + " " + PARAMS.get(m, "")).strip())
    c.file("etc/virtplane-modules", ("\n".join(lines) + "\n").encode())

    raw = c.finish()
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as g:
            g.write(raw)
    os.replace(tmp, a.out)
    print(f"mkinitramfs: {len(order)} modules ({' '.join(order)}); built in: "
          f"{' '.join(skipped) or 'none'}; cpio {len(raw)} bytes, "
          f"gz {os.path.getsize(a.out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
