"""Expired history (410 Gone) as clients meet it, with a server that compacts its store
every second (`--compaction-interval 1s`, kube-apiserver's --etcd-compaction-interval):
stale continue tokens, watches from a compacted resourceVersion, and clients recovering."""

import json
import time
import urllib.request

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from conftest import Server, vm_manifest, wait_until

NS = "compacted"
VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("virtplane-compaction"), ("--compaction-interval", "1s"))
    srv.start()
    srv.create_namespace(NS)
    srv.create_namespace("noise")
    for name in ("a", "b", "c"):
        srv.create_vm(name, NS)
    yield srv
    srv.stop()


def age_history(server):
    """Moves the store revision on and waits for two compactions to pass the old one."""
    before = int(server.get_json(VMS)["metadata"]["resourceVersion"])
    for i in range(3):
        server.raw("POST", "/api/v1/namespaces", headers={"Content-Type": "application/json"},
                   body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "noise-"}})
    time.sleep(2.5)
    return before


def test_stale_continue_token_is_410(server):
    first = server.get_json(VMS + "?limit=1")
    token = first["metadata"]["continue"]
    assert token
    age_history(server)
    reply = server.raw("GET", VMS + f"?limit=1&continue={token}")
    assert reply.status == 410
    status = reply.json()
    assert status["reason"] == "Expired" and status["code"] == 410
    assert status["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result.")


def test_kubectl_chunked_list_fresh_is_fine(server):
    # Fresh tokens still work under a short compaction interval.
    r = server.kubectl("get", "vms", "-n", NS, "--chunk-size=1", "-o", "name")
    if r.rc == 0:
        assert r.out.split() == [f"virtualmachine.kubevirt.io/{n}" for n in "abc"]
    else:
        # A compaction may land between two pages: kubectl prints what it had and the 410.
        assert "Error from server (Expired): The provided continue parameter is too old" in r.err, repr(r)


def test_watch_from_compacted_revision_sends_expired_error_event(server):
    old = age_history(server)
    request = urllib.request.Request(server.url + VMS + f"?watch=true&resourceVersion={old}&timeoutSeconds=5",
                                     headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, context=server.ssl, timeout=20) as response:
        assert response.status == 200
        event = json.loads(response.readline())
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert status["code"] == 410 and status["reason"] == "Expired"
    assert status["status"] == "Failure" and status["message"]


def test_python_watch_from_expired_revision(server):
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(server.kubeconfig)))
    old = age_history(server)
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(api.list_namespaced_custom_object, "kubevirt.io", "v1", NS,
                                      "virtualmachines", resource_version=str(old), timeout_seconds=5):
            pass
    assert e.value.status == 410


def test_kubectl_wait_still_works(server):
    # kubectl wait lists, then watches from the list's revision; a later change is seen
    # even while history is being compacted underneath.
    w = server.kubectl_bg("wait", "-n", NS, "--for=jsonpath={.metadata.labels.done}=yes", "vm/a", "--timeout=30s")
    time.sleep(1.5)
    server.kubectl("label", "vm", "a", "-n", NS, "done=yes").ok()
    assert w.wait(30) == 0
    assert w.expect("condition met") == "virtualmachine.kubevirt.io/a condition met"
