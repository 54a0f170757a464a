"""The web console in a real browser: Debian's chromium driven by Playwright, against a
server whose local QEMU node and a second QEMU node (`node-b`) run real guests.

As an admin: sign in with a token from `virtplane user add --token`, create a VM from the
form, see it Running, type into its serial console and read the guest's answer, see the VNC
screen draw, migrate it to the other node and watch the migration's progress bar move and
reach Succeeded (the guest holds 24 MB of random data and migrations are held to 8 MiB/s,
so that the move lasts seconds even under TCG), stop it
and delete it; upload a disk image into a new DataVolume. As a view-only user: actions are disabled and a forged call is refused by
the server. A wrong token is refused. Screenshots of each step are kept in
$VIRTPLANE_ARTIFACTS (default target/ui-artifacts) as the test's artifacts.

Needs chromium, the Python playwright package and QEMU with the test guests: it skips with
the reason when one is missing, and fails instead under VIRTPLANE_REQUIRE_QEMU=1 (as
scripts/test and CI run it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, Server, virtplane_bin, wait_until

CHROMIUM = os.environ.get("VIRTPLANE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("VIRTPLANE_ARTIFACTS", REPO / "target" / "ui-artifacts"))
VM = "web1"
# PatternFly tables have the ARIA role "grid"; find them by their label.
VM_TABLE = 'table[aria-label="Virtual machines"]'


def missing(why: str):
    if os.environ.get("VIRTPLANE_REQUIRE_QEMU") == "1":
        pytest.fail(f"web console test cannot run: {why}")
    pytest.skip(f"web console test skipped: {why}")


@pytest.fixture(scope="module")
def registry() -> str:
    if not shutil.which("qemu-system-x86_64"):
        missing("qemu-system-x86_64 not installed (scripts/install-deps test)")
    out = subprocess.run([str(REPO / "scripts" / "test-registry")], capture_output=True, text=True)
    if out.returncode != 0:
        missing(f"scripts/test-registry failed: {out.stderr.strip()}")
    return out.stdout.strip()


@pytest.fixture(scope="module")
def cluster(registry):
    """A server with QEMU node `node-a` and a second QEMU node `node-b`."""
    # QEMU runs as a user of its own, which must reach the data dir: pytest's temp dirs
    # are private to root.
    work = Path(tempfile.mkdtemp(prefix="virtplane-web-console-"))
    work.chmod(0o755)
    common = ("--hypervisor", "qemu", "--insecure-registry", registry, "--pod-network", "user")
    srv = Server(work, ("--node-name", "node-a", *common))
    srv.start()
    node_log = open(work / "node-b.log", "wb")
    node_b = subprocess.Popen(
        [virtplane_bin(), "node", "--kubeconfig", str(srv.data / "node-join.kubeconfig"),
         "--data-dir", str(work / "node-b"), "--name", "node-b", *common],
        stdout=node_log, stderr=subprocess.STDOUT,
        env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
    )
    try:
        def ready(node):
            reply = srv.raw("GET", f"/api/v1/nodes/{node}")
            if reply.status != 200:
                return False
            got = reply.json()
            return any(c["type"] == "Ready" and c["status"] == "True"
                       for c in got.get("status", {}).get("conditions", []))
        for node in ("node-a", "node-b"):
            wait_until(lambda: ready(node), timeout=60, interval=0.5, what=f"node {node} Ready")
        yield srv
    finally:
        node_b.terminate()
        try:
            node_b.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node_b.kill()
        node_log.close()
        srv.stop()
        # QEMU outlives its node agent by design (a restarted agent adopts it): a test that
        # failed half-way leaves its guests running, so they go with the work dir.
        subprocess.run(["pkill", "-f", f"qemu-system.*{work}"], check=False)
        shutil.rmtree(work, ignore_errors=True)


def token(srv: Server, name: str, role: str) -> str:
    out = subprocess.run(
        [virtplane_bin(), "user", "add", name, "--token", "--role", role, "--data-dir", str(srv.data)],
        capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        missing(f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the Python playwright package is not installed (tests/e2e/requirements.txt)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            yield b
        finally:
            b.close()


class Steps:
    """A page and the screenshots of its steps, numbered in order."""

    def __init__(self, page, prefix: str):
        self.page, self.prefix, self.count = page, prefix, 0

    def shot(self, what: str):
        self.count += 1
        self.page.screenshot(path=str(ARTIFACTS / f"{self.prefix}-{self.count:02d}-{what}.png"))


def signed_in_page(browser, srv: Server, secret: str, prefix: str, **context_args):
    context = browser.new_context(ignore_https_errors=True, **context_args)
    page = context.new_page()
    page.set_default_timeout(30_000)
    steps = Steps(page, prefix)
    page.goto(srv.url + "/")
    page.get_by_label("Token").fill(secret)
    page.get_by_role("button", name="Sign in").click()
    try:
        page.locator(VM_TABLE).wait_for()
    finally:
        steps.shot("signed-in")
    return context, page, steps


def expect_text(page, locator, pattern: str, timeout: float, steps: Steps | None = None, what=""):
    """Waits until `locator`'s text matches `pattern`."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = locator.inner_text(timeout=2_000)
        except Exception:  # not there yet
            text = ""
        if regex.search(text):
            return text
        page.wait_for_timeout(250)
    if steps:
        steps.shot(f"timeout-{what or 'text'}")
    raise AssertionError(f"no {pattern!r} within {timeout}s in: {text[-2000:]!r}")


def test_a_wrong_token_is_refused(cluster, browser):
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    page.goto(cluster.url + "/")
    assert "/ui/" in page.url, page.url
    page.get_by_label("Token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text("The token was not accepted").wait_for()
    page.screenshot(path=str(ARTIFACTS / "wrong-token.png"))
    assert not any(c["name"] == "virtplane-session" for c in context.cookies())
    context.close()


def test_an_admin_runs_a_vm_from_the_browser(cluster, browser, registry):
    context, page, steps = signed_in_page(browser, cluster, token(cluster, "ui-admin", "cluster-admin"), "admin")
    cookie = next(c for c in context.cookies() if c["name"] == "virtplane-session")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict", cookie

    # Create from the form, with the YAML shown before submit.
    page.get_by_role("button", name="Create VirtualMachine").click()
    page.get_by_label("Name", exact=True).fill(VM)
    page.get_by_label("Container disk image").fill(f"{registry}/guest:latest")
    page.get_by_label("Memory").fill("256Mi")
    start = page.get_by_label("Start after creation")
    if not start.is_checked():
        start.check()
    expect_text(page, page.locator("body"), rf"name: {VM}", 10)
    steps.shot("create-form")
    page.get_by_role("button", name="Create", exact=True).click()
    page.get_by_role("heading", name=VM, level=1).wait_for()
    vm = cluster.get_json(f"/apis/kubevirt.io/v1/namespaces/default/virtualmachines/{VM}")
    assert vm["spec"]["runStrategy"] == "Always", vm["spec"]
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    assert {"name": "rootdisk", "containerDisk": {"image": f"{registry}/guest:latest"}} in volumes, volumes

    status = page.locator("main")
    expect_text(page, status, r"\bRunning\b", 120, steps, "running")
    steps.shot("running")

    # The serial console: the guest's shell answers what is typed in the browser.
    page.get_by_role("tab", name="Console").click()
    page.get_by_role("tab", name="Serial console").click()
    serial = page.locator('div[aria-label="Serial console"]')
    serial.wait_for()
    serial.click()
    deadline = time.monotonic() + 120
    while True:
        page.keyboard.type("echo $((6*7))-from-the-browser\n")
        page.wait_for_timeout(1_500)
        if "42-from-the-browser" in serial.inner_text():
            break
        assert time.monotonic() < deadline, f"no answer on the serial console: {serial.inner_text()[-1500:]!r}"
    steps.shot("serial-console")
    # Memory that is not zero, for the migration below to move.
    page.keyboard.type("head -c 24000000 /dev/urandom > /tmp/fill && echo filled-$((2*21))\n")
    expect_text(page, serial, r"filled-42", 60, steps, "fill")

    # The VNC screen draws (noVNC's canvas is not one flat colour).
    page.get_by_role("tab", name="VNC").click()
    screen = page.locator('div[aria-label="VNC screen"]')
    screen.wait_for()

    def drawn():
        return page.evaluate("""() => {
            const c = document.querySelector('[aria-label="VNC screen"] canvas');
            if (!c || c.width < 100 || c.height < 100) return false;
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const seen = new Set();
            for (let i = 0; i < d.length && seen.size < 3; i += 4 * 97) seen.add(d[i] + ',' + d[i+1] + ',' + d[i+2]);
            return seen.size >= 2;
        }""")
    wait_until(drawn, timeout=60, interval=0.5, what="the VNC canvas to draw")
    assert page.get_by_role("button", name="Send Ctrl-Alt-Del").is_enabled()
    steps.shot("vnc")

    # Live migration to the other node: its progress bar moves (read from the source
    # node's metrics) and reaches Succeeded.
    kubevirt = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
                "spec": {"configuration": {"migrations": {"bandwidthPerMigration": "8Mi"}}}}
    created = cluster.raw("POST", "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts", body=kubevirt,
                          headers={"Content-Type": "application/json"})
    assert created.status == 201, created.text
    source = cluster.get_json(f"/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/{VM}")["status"]["nodeName"]
    page.get_by_role("button", name="Migrate", exact=True).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Migrate", exact=True).click()
    page.get_by_role("tab", name="Migrations").click()
    bar = page.locator('[role="progressbar"][aria-label^="Progress of migration"]')
    seen: list[float] = []
    deadline = time.monotonic() + 180
    while not re.search(r"\bSucceeded\b", page.locator("main").inner_text()):
        assert time.monotonic() < deadline, f"the migration did not succeed; progress seen: {seen}"
        if bar.count() == 1:
            value = bar.get_attribute("aria-valuenow")
            if value is not None and (not seen or seen[-1] != float(value)):
                seen.append(float(value))
                if 0 < seen[-1] < 100 and sum(0 < v < 100 for v in seen) == 1:
                    steps.shot("migrating")
        page.wait_for_timeout(100)
    steps.shot("migrated")
    assert any(0 < v < 100 for v in seen), f"no progress between 0 and 100 was shown: {seen}"
    assert seen == sorted(seen), f"the progress went back: {seen}"
    assert bar.get_attribute("aria-valuenow") == "100"
    expect_text(page, page.locator("main"), r"MiB in [\d.]+ m?s, downtime \d+ ms", 10, steps, "moved")
    target = cluster.get_json(f"/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/{VM}")["status"]["nodeName"]
    assert target != source, (source, target)
    page.get_by_role("tab", name="Overview").click()
    expect_text(page, page.locator("main"), re.escape(target), 30, steps, "new-node")

    # Stop, then delete with confirmation.
    page.get_by_role("button", name="Stop", exact=True).click()
    expect_text(page, page.locator("main"), r"\bStopped\b", 120, steps, "stopped")
    steps.shot("stopped")
    page.get_by_role("button", name="Delete", exact=True).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox").fill(VM)
    dialog.get_by_role("button", name="Delete").click()
    wait_until(lambda: cluster.raw("GET", f"/apis/kubevirt.io/v1/namespaces/default/virtualmachines/{VM}").status == 404,
               timeout=60, interval=0.5, what="the VM to be deleted")
    page.locator(VM_TABLE).wait_for()
    steps.shot("deleted")

    # Logging out ends the session on the server too.
    page.get_by_role("button", name="Log out").click()
    page.get_by_label("Token").wait_for()
    assert page.evaluate("() => fetch('/ui/session').then(r => r.status)") == 401
    context.close()


def test_an_admin_uploads_a_disk_image_from_the_browser(cluster, browser, tmp_path):
    """A DataVolume made from a file picked in the browser, sent through CDI's upload API."""
    image = tmp_path / "disk.qcow2"
    raw = tmp_path / "disk.raw"
    raw.write_bytes(b"uploaded-from-the-browser" * 40_000 + bytes(8 << 20))
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(image)], check=True)
    context, page, steps = signed_in_page(browser, cluster, token(cluster, "ui-uploader", "cluster-admin"), "upload")
    page.get_by_role("link", name="DataVolumes").click()
    page.get_by_role("button", name="Create DataVolume").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name", exact=True).fill("up1")
    dialog.get_by_label("Source").select_option(label="Upload a file")
    dialog.get_by_label("Size").fill("64Mi")
    dialog.locator("#dv-file").set_input_files(str(image))
    expect_text(page, dialog, r"disk\.qcow2", 10, steps, "file-picked")
    steps.shot("upload-form")
    dialog.get_by_role("button", name="Create", exact=True).click()
    # The modal closes once the upload is done; the DataVolume then imports it.
    page.get_by_role("dialog").wait_for(state="detached", timeout=120_000)

    def succeeded():
        dv = cluster.get_json("/apis/cdi.kubevirt.io/v1beta1/namespaces/default/datavolumes/up1")
        assert dv.get("status", {}).get("phase") != "Failed", dv
        return dv.get("status", {}).get("phase") == "Succeeded"
    wait_until(succeeded, timeout=120, interval=0.5, what="the uploaded DataVolume to succeed")
    expect_text(page, page.locator("main"), r"up1[\s\S]*Succeeded", 30, steps, "dv-succeeded")
    steps.shot("upload-succeeded")
    context.close()


def test_a_viewer_sees_actions_disabled_and_a_forged_call_is_refused(cluster, browser):
    halted = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "seen"},
              "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}, "memory": {"guest": "64Mi"}}}}}}
    created = cluster.raw("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
                          headers={"Content-Type": "application/json"}, body=halted)
    assert created.status == 201, created.text
    context, page, steps = signed_in_page(browser, cluster, token(cluster, "ui-viewer", "view"), "viewer")
    page.get_by_role("link", name="seen").click()
    page.get_by_role("heading", name="seen", level=1).wait_for()
    for action in ("Start", "Delete"):
        button = page.get_by_role("button", name=action, exact=True)
        wait_until(lambda: button.is_disabled(), timeout=15, what=f"{action} disabled for a viewer")
    steps.shot("actions-disabled")

    # The same calls made by hand from the page: the server refuses them.
    forged = page.evaluate("""async () => {
        const session = await (await fetch('/ui/session')).json();
        const put = (headers) => fetch('/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/seen/start',
                                       {method: 'PUT', headers: {'Content-Type': 'application/json', ...headers}, body: '{}'});
        const withToken = await put({'X-CSRF-Token': session.csrfToken});
        const withoutToken = await put({});
        return {withToken: [withToken.status, await withToken.text()], withoutToken: [withoutToken.status, await withoutToken.text()]};
    }""")
    assert forged["withToken"][0] == 403 and "ui-viewer" in forged["withToken"][1], forged
    assert forged["withoutToken"][0] == 403 and "CSRF" in forged["withoutToken"][1], forged
    vm = cluster.get_json("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/seen")
    assert vm["spec"]["runStrategy"] == "Halted", vm["spec"]

    # A phone-sized screen in the dark theme still shows the list.
    phone = browser.new_context(ignore_https_errors=True, viewport={"width": 390, "height": 844},
                                storage_state=context.storage_state())
    small = phone.new_page()
    small.goto(cluster.url + "/ui/vms")
    small.locator(VM_TABLE).wait_for()
    small.get_by_role("button", name="Toggle dark theme").click()
    assert "pf-v6-theme-dark" in (small.evaluate("() => document.documentElement.className") or "")
    small.screenshot(path=str(ARTIFACTS / "viewer-phone-dark.png"))
    phone.close()
    context.close()
