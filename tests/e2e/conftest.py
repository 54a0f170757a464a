"""End-to-end harness: starts the real `virtplane server --no-node` over HTTPS and drives
it with the real kubectl binary, the Python `kubernetes` client and raw HTTPS requests.

One server per test module (fixture `server`), each with its own data dir, port and
kubectl cache dir (kubectl caches discovery and OpenAPI by host:port). Run with

    VIRTPLANE_BIN=$PWD/target/debug/virtplane python3 -m pytest -q tests/e2e
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden"


def virtplane_bin() -> str:
    path = os.environ.get("VIRTPLANE_BIN") or str(REPO / "target" / "debug" / "virtplane")
    if not Path(path).is_file():
        pytest.fail(
            f"virtplane binary not found at {path}: run `cargo build --bin virtplane` "
            "and set VIRTPLANE_BIN=$PWD/target/debug/virtplane"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout=20.0, interval=0.05, what="condition"):
    """Polls `predicate` until it returns something truthy; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Reply:
    def __init__(self, status: int, headers, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


class Result:
    """What a kubectl run produced."""

    def __init__(self, args, proc: subprocess.CompletedProcess):
        self.args = args
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"kubectl {' '.join(self.args)} -> rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"

    def ok(self) -> "Result":
        assert self.rc == 0, repr(self)
        return self

    def failed(self) -> "Result":
        assert self.rc != 0, repr(self)
        return self


class WatchProcess:
    """A long-running kubectl (get -w, wait) whose stdout lines are collected."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, pattern: str, timeout=20.0) -> str:
        """Waits for a stdout line matching the regex `pattern`; returns it."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern!r} within {timeout}s; saw {self.seen!r}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(line)
            if regex.search(line):
                return line

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        return err

    def wait(self, timeout=30.0) -> int:
        return self.proc.wait(timeout=timeout)


class Server:
    def __init__(self, workdir: Path, extra_args: tuple[str, ...] = ()):
        self.extra_args = list(extra_args)
        self.dir = workdir
        self.data = workdir / "data"
        self.cache = workdir / "kubecache"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.data / "admin.kubeconfig"
        self.proc: subprocess.Popen | None = None
        self.log = workdir / "server.log"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self):
        self.data.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [virtplane_bin(), "server", "--data-dir", str(self.data),
             "--listen", f"127.0.0.1:{self.port}",
             # A test that asks for a hypervisor gets the server's local node with it.
             *([] if "--hypervisor" in self.extra_args else ["--no-node"]), *self.extra_args],
            stdout=self._log_file, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        deadline = time.monotonic() + 60
        while not self.kubeconfig.exists():
            self._check_alive()
            assert time.monotonic() < deadline, "server did not write admin.kubeconfig"
            time.sleep(0.05)
        self._load_credentials()
        while True:
            self._check_alive()
            try:
                if self.raw("GET", "/readyz", auth=False).status == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            assert time.monotonic() < deadline, "server never answered /readyz with 200"
            time.sleep(0.05)

    def _check_alive(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"virtplane server exited with {self.proc.returncode}:\n{self.log.read_text()}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log_file", None):
            self._log_file.close()

    def _load_credentials(self):
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        pki = self.dir / "client-pki"
        pki.mkdir(exist_ok=True)
        self.ca_file = pki / "ca.crt"
        self.ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        cert, key = pki / "client.crt", pki / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        self.ssl = ssl.create_default_context(cafile=str(self.ca_file))
        self.ssl.load_cert_chain(str(cert), str(key))
        self.ssl_anonymous = ssl.create_default_context(cafile=str(self.ca_file))

    # -- clients -----------------------------------------------------------------------
    def raw(self, method: str, path: str, headers: dict | None = None, body=None,
            auth: bool = True, timeout: float = 30) -> Reply:
        """One HTTPS request with the admin client certificate (or none)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        context = self.ssl if auth else self.ssl_anonymous
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
                return Reply(response.status, response.headers, response.read())
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.headers, e.read())

    def kubectl_env(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env.update({"KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.cache),
                    "HOME": str(self.dir)})
        env.update(extra or {})
        return env

    def kubectl(self, *args: str, input: str | None = None, env: dict | None = None,
                kubeconfig: Path | None = None, timeout: float = 90) -> Result:
        cmd = [kubectl_bin(), *args]
        e = self.kubectl_env(env)
        if kubeconfig:
            e["KUBECONFIG"] = str(kubeconfig)
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, env=e,
                              timeout=timeout, cwd=self.dir)
        return Result(list(args), proc)

    def kubectl_bg(self, *args: str) -> WatchProcess:
        proc = subprocess.Popen([kubectl_bin(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.kubectl_env(), cwd=self.dir)
        return WatchProcess(proc)

    def write(self, name: str, content) -> Path:
        """Writes a manifest (dict, list of dicts or YAML text) into the work dir."""
        path = self.dir / name
        if isinstance(content, dict):
            content = yaml.safe_dump(content, sort_keys=False)
        elif isinstance(content, list):
            content = yaml.safe_dump_all(content, sort_keys=False)
        path.write_text(content)
        return path

    def get_json(self, path: str):
        reply = self.raw("GET", path)
        assert reply.status == 200, f"GET {path}: {reply.status} {reply.text}"
        return reply.json()

    def vm(self, name: str, namespace: str = "default"):
        reply = self.raw("GET", f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}")
        return reply.json() if reply.status == 200 else None

    def create_vm(self, name: str, namespace: str = "default", **kw):
        reply = self.raw("POST", f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines",
                         headers={"Content-Type": "application/json"}, body=vm_manifest(name, **kw))
        assert reply.status == 201, reply.text
        return reply.json()

    def create_namespace(self, name: str):
        reply = self.raw("POST", "/api/v1/namespaces", headers={"Content-Type": "application/json"},
                         body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        assert reply.status == 201, reply.text


def kubectl_bin() -> str:
    path = shutil.which("kubectl")
    if not path:
        pytest.skip("KUBECTL NOT INSTALLED: the kubectl end-to-end tests did not run "
                    "(install kubectl, e.g. scripts/install-deps test)")
    return path


def vm_manifest(name: str, run_strategy: str = "Halted", labels: dict | None = None,
                namespace: str | None = None, **extra_spec) -> dict:
    metadata = {"name": name, "labels": labels if labels is not None else {"app": "demo"}}
    if namespace:
        metadata["namespace"] = namespace
    spec = {
        "runStrategy": run_strategy,
        "template": {
            "metadata": {"labels": {"kubevirt.io/vm": name}},
            "spec": {
                "domain": {
                    "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    "memory": {"guest": "128Mi"},
                },
                "volumes": [{"name": "root", "containerDisk": {"image": "registry.local/guest:1"}}],
            },
        },
    }
    spec.update(extra_spec)
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": metadata, "spec": spec}


def settle_vm(server, name: str, namespace: str = "default", quiet: float = 0.3, timeout: float = 20.0):
    """Waits until the VM controller has written the VM's status and nothing changed it
    for `quiet` seconds; returns the VM. Lets tests compare resourceVersions."""
    wait_until(lambda: (server.vm(name, namespace) or {}).get("status", {}).get("printableStatus"),
               timeout=timeout, what=f"vm {namespace}/{name} to get a status from the VM controller")
    deadline = time.monotonic() + timeout
    before = server.vm(name, namespace)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = server.vm(name, namespace)
        if now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]:
            return now
        before = now
    raise AssertionError(f"vm {namespace}/{name} kept changing for {timeout}s")


def parse_table(text: str) -> list[dict]:
    """kubectl's table output as dicts keyed by header, cut at the header's column starts
    (so empty cells come out as "")."""
    lines = [l for l in text.splitlines() if l.strip()]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cells.append(line[start:end].strip())
        rows.append(dict(zip(names, cells)))
    return rows


def table_rows(text: str) -> list[list[str]]:
    """kubectl's table output as rows of cells (header first); AGE-like cells kept as is."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("virtplane"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def kubectl(server):
    kubectl_bin()  # skip loudly without kubectl
    return server.kubectl
