#!/usr/bin/env python3
"""Boot the test guests under QEMU (TCG) and check the guest protocol.

usage: python3 tests/guests/smoke.py [--guests DIR] [--only NAME,...] [--runs N]

Needs qemu-system-x86_64, mtools + dosfstools (seed images) and the outputs of
scripts/build-test-guests (built first if missing). xorriso is optional (ISO seed
checks are skipped without it). Prints one line per check with timings, then
'N passed, N failed'.
"""
import argparse
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QEMU = "qemu-system-x86_64"


class Guest:
    """A QEMU process whose serial console is on stdin/stdout."""

    def __init__(self, args, log):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            [QEMU, "-accel", "tcg", "-nodefaults", "-display", "none",
             "-serial", "stdio", "-m", "256"] + args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.q = queue.Queue()
        self.lines = []
        self.log = log
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        for raw in self.p.stdout:
            line = raw.decode(errors="replace").rstrip("\r\n").replace("\r", "")
            t = time.monotonic() - self.t0
            self.log.write(f"{t:8.3f} {line}\n")
            self.q.put((t, line))
        self.q.put((time.monotonic() - self.t0, None))

    def expect(self, pred, timeout):
        """Wait for a line satisfying pred; returns (time, line)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timeout waiting ({timeout}s)")
            try:
                t, line = self.q.get(timeout=left)
            except queue.Empty:
                raise AssertionError(f"timeout waiting ({timeout}s)")
            if line is None:
                raise AssertionError("guest exited")
            self.lines.append(line)
            if pred(line):
                return t, line

    def expect_line(self, text, timeout=120):
        return self.expect(lambda l: l.strip() == text, timeout)

    def send(self, s):
        self.p.stdin.write(s.encode())
        self.p.stdin.flush()

    def wait_exit(self, timeout):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("guest did not exit on its own")
        return rc, time.monotonic() - self.t0

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()

    def proto(self, key):
        pre = "virtplane-guest: " + key
        return [l[len("virtplane-guest: "):] for l in self.lines if l.startswith(pre)]


def make_seed(path, label, files, iso=False):
    """files: {relative path: text}. FAT via mkfs.vfat+mcopy, or ISO via xorrisofs."""
    if iso:
        d = path + ".d"
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        subprocess.run(["xorrisofs", "-quiet", "-output", path, "-volid", label, "-joliet",
                        "-rock", "-partition_cyl_align", "on", d], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return
    subprocess.run(["truncate", "-s", "2M", path], check=True)
    subprocess.run(["mkfs.vfat", "-n", label, path], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    dirs = set()
    for rel in files:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    for d in sorted(dirs):
        subprocess.run(["mmd", "-i", path, "::/" + d], check=True)
    for rel, text in files.items():
        src = path + ".tmp"
        with open(src, "w") as f:
            f.write(text)
        subprocess.run(["mcopy", "-i", path, src, "::/" + rel], check=True)
        os.unlink(src)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Checks:
    def __init__(self, guests, work, logdir):
        self.g = guests
        self.work = work
        self.logdir = logdir
        self.results = []

    def boot(self, name, args):
        log = open(os.path.join(self.logdir, name + ".log"), "a")
        return Guest(args, log)

    def kernel_args(self, append="console=ttyS0"):
        return ["-kernel", f"{self.g}/vmlinux", "-initrd", f"{self.g}/initramfs.cpio.gz",
                "-append", append]

    # (a) direct kernel boot, powers off on its own
    def kernel_poweroff(self, machine):
        g = self.boot(f"kernel-{machine}", ["-machine", machine] + self.kernel_args(
            "console=ttyS0 virtplane.poweroff=1"))
        try:
            tb, _ = g.expect_line("virtplane-guest: booted")
            tr, _ = g.expect_line("virtplane-guest: ready")
            rc, te = g.wait_exit(30)
            assert rc == 0, f"qemu rc {rc}"
            return f"booted {tb:.2f}s ready {tr:.2f}s exit {te:.2f}s"
        finally:
            g.kill()

    # (b) SeaBIOS + syslinux from disk.qcow2 on virtio-blk; console shell works
    def disk_boot(self, machine):
        g = self.boot(f"disk-{machine}", [
            "-machine", machine, "-snapshot",
            "-drive", f"if=none,id=d,format=qcow2,file={self.g}/disk.qcow2",
            "-device", "virtio-blk-pci,drive=d"])
        try:
            tb, _ = g.expect_line("virtplane-guest: booted", 180)
            tr, _ = g.expect_line("virtplane-guest: ready", 60)
            disks = g.proto("disk ")
            assert any(d.startswith("disk vda ") for d in disks), disks
            time.sleep(0.5)
            g.send("echo hi\n")
            g.expect_line("hi", 30)
            return f"booted {tb:.2f}s ready {tr:.2f}s disks {disks}"
        finally:
            g.kill()

    # (c) NoCloud / ConfigDrive seeds on several buses
    def seed(self, kind, bus, iso=False):
        name = f"seed-{kind}-{bus}{'-iso' if iso else ''}"
        path = os.path.join(self.work, name + (".iso" if iso else ".img"))
        ud = "#cloud-config\n#virtplane: poweroff\nhostname: seedhost\n"
        if kind == "nocloud":
            label = "cidata"
            files = {"meta-data": '{"instance-id": "i-1", "local-hostname": "vm-one"}\n',
                     "user-data": ud}
        else:
            label = "config-2"
            files = {"openstack/latest/meta_data.json":
                     '{"instance_id": "vm-two.default", "uuid": "u", "hostname": "vm-two"}',
                     "openstack/latest/user_data": ud}
        make_seed(path, label, files, iso)
        fmt = "raw"
        dev = {
            "virtio": ["-drive", f"if=none,id=s,format={fmt},file={path}",
                       "-device", "virtio-blk-pci,drive=s"],
            "scsi": ["-device", "virtio-scsi-pci,id=scsi0",
                     "-drive", f"if=none,id=s,format={fmt},file={path}",
                     "-device", f"scsi-{'cd' if iso else 'hd'},drive=s,bus=scsi0.0"],
            "sata": ["-drive", f"if=none,id=s,format={fmt},file={path}",
                     "-device", f"ide-{'cd' if iso else 'hd'},drive=s,bus=ide.0"],
        }[bus]
        g = self.boot(name, ["-machine", "q35"] + self.kernel_args() + dev)
        try:
            _, line = g.expect(lambda l: l.startswith("virtplane-guest: seed "), 60)
            assert line.split()[2] == label, line
            tr, _ = g.expect_line("virtplane-guest: ready", 30)
            uds = g.proto("user-data: ")
            assert "user-data: #virtplane: poweroff" in uds, uds
            want = "vm-one" if kind == "nocloud" else "vm-two"
            assert g.proto("hostname") == [f"hostname {want}"], g.proto("hostname")
            rc, te = g.wait_exit(30)
            return f"{line.strip()} ready {tr:.2f}s exit {te:.2f}s"
        finally:
            g.kill()

    # (d) user networking in KubeVirt's masquerade layout + serve directive
    def net_serve(self, machine, nic):
        port = free_port()
        path = os.path.join(self.work, f"serve-{nic}.img")
        make_seed(path, "cidata", {"meta-data": "instance-id: i-2\nlocal-hostname: webvm\n",
                                   "user-data": "#cloud-config\n#virtplane: serve 8080\n"})
        g = self.boot(f"net-{machine}-{nic}", ["-machine", machine] + self.kernel_args() + [
            "-drive", f"if=none,id=s,format=raw,file={path}", "-device", "virtio-blk-pci,drive=s",
            "-netdev", "user,id=n,net=10.0.2.0/24,host=10.0.2.1,dhcpstart=10.0.2.2,"
                       f"hostfwd=tcp:127.0.0.1:{port}-:8080",
            "-device", f"{nic},netdev=n"])
        try:
            tr, _ = g.expect_line("virtplane-guest: ready", 90)
            ips = g.proto("ip ")
            assert "ip eth0 10.0.2.2" in ips, ips
            out = subprocess.run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{port}/"],
                                 stdout=subprocess.PIPE, text=True).stdout
            assert out.strip() == "hello from webvm", repr(out)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"hi\n")
                raw = s.recv(100).decode()
            assert raw.strip() == "hello from webvm", repr(raw)
            return f"ready {tr:.2f}s {ips} curl {out.strip()!r} tcp {raw.strip()!r}"
        finally:
            g.kill()

    # Legacy buses: disks and NICs on other controllers are seen
    def devices(self, machine):
        img = os.path.join(self.work, f"blank-{machine}.img")
        subprocess.run(["truncate", "-s", "8M", img], check=True)
        subprocess.run(["truncate", "-s", "8M", img + "2"], check=True)
        if machine == "pc":
            dev = ["-drive", f"if=none,id=d,format=raw,file={img}", "-device", "ide-hd,drive=d,bus=ide.0",
                   "-netdev", "user,id=n", "-device", "rtl8139,netdev=n",
                   "-netdev", "user,id=m", "-device", "e1000,netdev=m"]
            want_disk, want_ifs = "sda", ["eth0", "eth1"]
        else:
            dev = ["-drive", f"if=none,id=d,format=raw,file={img}", "-device", "ide-hd,drive=d,bus=ide.0",
                   "-device", "virtio-scsi-pci,id=scsi0",
                   "-drive", f"if=none,id=e,format=raw,file={img}2",
                   "-device", "scsi-hd,drive=e,bus=scsi0.0",
                   "-netdev", "user,id=n", "-device", "e1000e,netdev=n",
                   "-device", "virtio-rng-pci", "-device", "i6300esb"]
            want_disk, want_ifs = "sdb", ["eth0"]
        g = self.boot(f"devices-{machine}", ["-machine", machine] + self.kernel_args(
            "console=ttyS0 virtplane.poweroff=1") + dev)
        try:
            tr, _ = g.expect_line("virtplane-guest: ready", 90)
            disks, ips = g.proto("disk "), g.proto("ip ")
            assert any(d.startswith(f"disk {want_disk} 8388608") for d in disks), disks
            for i in want_ifs:
                assert any(l.startswith(f"ip {i} 10.0.2.") for l in ips), ips
            g.wait_exit(30)
            return f"ready {tr:.2f}s {disks} {ips}"
        finally:
            g.kill()

    # watchdog directive: i6300esb armed and starved -> QEMU's watchdog action
    def watchdog(self):
        path = os.path.join(self.work, "watchdog.img")
        make_seed(path, "cidata", {"meta-data": "instance-id: i-3\n",
                                   "user-data": "#virtplane: watchdog 2\n"})
        g = self.boot("watchdog", ["-machine", "q35", "-action", "watchdog=poweroff",
                                   "-device", "i6300esb"] + self.kernel_args() + [
            "-drive", f"if=none,id=s,format=raw,file={path}", "-device", "virtio-blk-pci,drive=s"])
        try:
            tr, _ = g.expect_line("virtplane-guest: ready", 60)
            assert "watchdog 2" in g.proto("watchdog"), g.lines[-5:]
            rc, te = g.wait_exit(30)
            return f"ready {tr:.2f}s, watchdog fired, qemu exited at {te:.2f}s"
        finally:
            g.kill()

    # (e) registry serves the pushed manifests
    def registry(self):
        state = os.path.join(self.work, "registry.state")
        env = dict(os.environ, VIRTPLANE_REGISTRY_STATE=state)
        addr = subprocess.run([os.path.join(ROOT, "scripts/test-registry"), self.g],
                              env=env, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
        try:
            out = []
            for name, layout in (("guest", "oci"), ("guest-kernel", "oci-kernel")):
                with open(os.path.join(self.g, layout, "index.json")) as f:
                    want = json.load(f)["manifests"][0]["digest"]
                req = urllib.request.Request(
                    f"http://{addr}/v2/{name}/manifests/latest",
                    headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
                with urllib.request.urlopen(req, timeout=10) as r:
                    body = r.read()
                    got = r.headers.get("Docker-Content-Digest")
                    ctype = r.headers.get("Content-Type")
                assert got == want, (got, want)
                m = json.loads(body)
                layer = m["layers"][0]["digest"]
                req = urllib.request.Request(f"http://{addr}/v2/{name}/blobs/{layer}", method="HEAD")
                with urllib.request.urlopen(req, timeout=10) as r:
                    assert r.status == 200
                out.append(f"{name}:latest {got[:19]} {ctype}")
            return f"{addr} " + "; ".join(out)
        finally:
            subprocess.run([os.path.join(ROOT, "scripts/test-registry"), "--stop"], env=env,
                           check=True)

    def run(self, name, fn, *args):
        t = time.monotonic()
        try:
            msg = fn(*args)
            ok = True
        except Exception as e:  # noqa: BLE001
            msg, ok = f"{type(e).__name__}: {e}", False
        self.results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - t:.1f}s): {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--guests", default=os.path.join(ROOT, "target/test-guests"))
    ap.add_argument("--only", default="")
    ap.add_argument("--runs", type=int, default=1, help="repeat boot-time checks")
    a = ap.parse_args()
    subprocess.run([os.path.join(ROOT, "scripts/build-test-guests"), a.guests], check=True)
    g = os.path.abspath(a.guests)
    work = tempfile.mkdtemp(prefix="guest-smoke-")
    logdir = os.path.join(work, "logs")
    os.makedirs(logdir)
    c = Checks(g, work, logdir)
    have_iso = shutil.which("xorrisofs") is not None
    plan = []
    for i in range(a.runs):
        plan += [("kernel-q35", c.kernel_poweroff, "q35"), ("kernel-pc", c.kernel_poweroff, "pc"),
                 ("disk-pc", c.disk_boot, "pc"), ("disk-q35", c.disk_boot, "q35")]
    plan += [
        ("seed-nocloud-virtio", c.seed, "nocloud", "virtio"),
        ("seed-configdrive-virtio", c.seed, "configdrive", "virtio"),
        ("seed-nocloud-scsi", c.seed, "nocloud", "scsi"),
        ("seed-nocloud-sata", c.seed, "nocloud", "sata"),
    ]
    if have_iso:
        plan += [("seed-nocloud-sata-iso", c.seed, "nocloud", "sata", True),
                 ("seed-configdrive-scsi-iso", c.seed, "configdrive", "scsi", True)]
    plan += [
        ("net-serve-virtio", c.net_serve, "q35", "virtio-net-pci"),
        ("net-serve-e1000", c.net_serve, "pc", "e1000"),
        ("devices-pc", c.devices, "pc"), ("devices-q35", c.devices, "q35"),
        ("watchdog", c.watchdog),
        ("registry", c.registry),
    ]
    only = set(filter(None, a.only.split(",")))
    for name, fn, *args in plan:
        if only and name not in only:
            continue
        c.run(name, fn, *args)
    passed = sum(c.results)
    failed = len(c.results) - passed
    print(f"serial logs: {logdir}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
