"""The PyPI `kubernetes` client, unmodified, against the real server over HTTPS with the
admin kubeconfig: CustomObjectsApi, CoreV1Api and the DynamicClient (traces py-01..14)."""

import json
import threading
import time

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from conftest import settle_vm, vm_manifest, wait_until

G, V, P = "kubevirt.io", "v1", "virtualmachines"
NS = "pyns"


@pytest.fixture(scope="module")
def api_client(server):
    api = config.new_client_from_config(config_file=str(server.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="module")
def custom(api_client, server):
    server.create_namespace(NS)
    return client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="module")
def dynamic(api_client):
    return DynamicClient(api_client)


def status_of(e: ApiException) -> dict:
    return json.loads(e.body)


# --- CustomObjectsApi ---------------------------------------------------------------------

def test_create_get_list(custom):
    created = custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("py1", labels={"app": "x"}))
    assert created["metadata"]["name"] == "py1" and created["metadata"]["namespace"] == NS
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    got = custom.get_namespaced_custom_object(G, V, NS, P, "py1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["kind"] == "VirtualMachine" and got["apiVersion"] == "kubevirt.io/v1"
    listed = custom.list_namespaced_custom_object(G, V, NS, P)
    assert listed["kind"] == "VirtualMachineList" and listed["apiVersion"] == "kubevirt.io/v1"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["py1"]
    assert int(listed["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    by_label = custom.list_namespaced_custom_object(G, V, NS, P, label_selector="app=x")
    assert len(by_label["items"]) == 1
    assert custom.list_namespaced_custom_object(G, V, NS, P, label_selector="app=nothing")["items"] == []
    everywhere = custom.list_cluster_custom_object(G, V, P)
    assert (NS, "py1") in {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]}


def test_paging(custom):
    for i in range(3):
        custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest(f"page{i}", labels={"page": "yes"}))
    first = custom.list_namespaced_custom_object(G, V, NS, P, limit=2)
    assert len(first["items"]) == 2 and first["metadata"]["continue"]
    rest = custom.list_namespaced_custom_object(G, V, NS, P, limit=2, _continue=first["metadata"]["continue"])
    names = [i["metadata"]["name"] for i in first["items"] + rest["items"]]
    all_names = [i["metadata"]["name"] for i in custom.list_namespaced_custom_object(G, V, NS, P)["items"]]
    assert names[: len(all_names)] == all_names[: len(names)]
    with pytest.raises(ApiException) as e:
        custom.list_namespaced_custom_object(G, V, NS, P, limit=2, _continue="not-a-token")
    assert e.value.status == 400
    assert status_of(e.value)["message"].startswith("continue key is not valid")


def test_get_missing_and_duplicate_create(custom):
    with pytest.raises(ApiException) as e:
        custom.get_namespaced_custom_object(G, V, NS, P, "nope")
    assert e.value.status == 404 and e.value.reason == "Not Found"
    assert status_of(e.value) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": 'virtualmachines.kubevirt.io "nope" not found', "reason": "NotFound",
                                  "details": {"name": "nope", "group": "kubevirt.io", "kind": "virtualmachines"},
                                  "code": 404}
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pydup"))
    with pytest.raises(ApiException) as e:
        custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pydup"))
    assert e.value.status == 409
    body = status_of(e.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'virtualmachines.kubevirt.io "pydup" already exists'


def test_patch_merge_and_json(custom):
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pypatch"))
    patched = custom.patch_namespaced_custom_object(G, V, NS, P, "pypatch", {"spec": {"runStrategy": "Manual"}})
    assert patched["spec"]["runStrategy"] == "Manual" and patched["metadata"]["generation"] == 2
    # A JSON-patch list sent the way CustomObjectsApi sends everything (merge-patch content type).
    with pytest.raises(ApiException) as e:
        custom.patch_namespaced_custom_object(G, V, NS, P, "pypatch",
                                              [{"op": "replace", "path": "/spec/runStrategy", "value": "Always"}])
    assert e.value.status == 400
    assert status_of(e.value)["message"] == ("error decoding patch: json: cannot unmarshal array into Go value "
                                             "of type map[string]interface {}")
    # The same list as a real JSON patch.
    patched = custom.patch_namespaced_custom_object(
        G, V, NS, P, "pypatch", [{"op": "replace", "path": "/spec/runStrategy", "value": "Always"}],
        _content_type="application/json-patch+json")
    assert patched["spec"]["runStrategy"] == "Always"
    with pytest.raises(ApiException) as e:
        custom.patch_namespaced_custom_object(
            G, V, NS, P, "pypatch", [{"op": "test", "path": "/spec/runStrategy", "value": "Halted"}],
            _content_type="application/json-patch+json")
    assert e.value.status == 422
    status = custom.patch_namespaced_custom_object_status(
        G, V, NS, P, "pypatch", {"status": {"printableStatus": "Migrating"}})
    assert status["status"]["printableStatus"] == "Migrating"
    assert status["metadata"]["generation"] == 3


def test_replace_and_stale_replace(custom, server):
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pyreplace"))
    settle_vm(server, "pyreplace", NS)  # the VM controller writes status (and a finalizer) first
    vm = custom.get_namespaced_custom_object(G, V, NS, P, "pyreplace")
    vm["spec"]["runStrategy"] = "Manual"
    replaced = custom.replace_namespaced_custom_object(G, V, NS, P, "pyreplace", vm)
    assert replaced["spec"]["runStrategy"] == "Manual"
    assert int(replaced["metadata"]["resourceVersion"]) > int(vm["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as e:
        custom.replace_namespaced_custom_object(G, V, NS, P, "pyreplace", vm)  # vm carries the old RV
    assert e.value.status == 409
    assert status_of(e.value)["message"] == (
        'Operation cannot be fulfilled on virtualmachines.kubevirt.io "pyreplace": the object has been modified; '
        'please apply your changes to the latest version and try again')


def test_delete(custom, server):
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pydelete"))
    vm = settle_vm(server, "pydelete", NS)
    result = custom.delete_namespaced_custom_object(G, V, NS, P, "pydelete")
    if vm["metadata"].get("finalizers"):
        # Held by a finalizer (KubeVirt's VM controller sets one): 200 with the object,
        # marked for deletion; it goes once the finalizer is removed.
        assert result["kind"] == "VirtualMachine" and result["metadata"]["deletionTimestamp"]
        assert result["metadata"]["finalizers"] == vm["metadata"]["finalizers"]
        wait_until(lambda: _missing(custom, "pydelete"), what="pydelete to be deleted")
    else:
        assert result["kind"] == "Status" and result["status"] == "Success"
        assert result["details"] == {"name": "pydelete", "group": "kubevirt.io", "kind": "virtualmachines",
                                     "uid": vm["metadata"]["uid"]}
    with pytest.raises(ApiException) as e:
        custom.delete_namespaced_custom_object(G, V, NS, P, "pydelete")
    assert e.value.status == 404
    # Without finalizers the answer is a Status naming the plural resource (as for CRs).
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pydelete3"))
    settle_vm(server, "pydelete3", NS)
    vm = custom.patch_namespaced_custom_object(G, V, NS, P, "pydelete3", {"metadata": {"finalizers": None}})
    result = custom.delete_namespaced_custom_object(G, V, NS, P, "pydelete3")
    if result["kind"] == "Status":
        assert result["status"] == "Success"
        assert result["details"] == {"name": "pydelete3", "group": "kubevirt.io", "kind": "virtualmachines",
                                     "uid": vm["metadata"]["uid"]}
    # Foreground via body: held by the GC finalizer until the collector releases it.
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pydelete2"))
    custom.delete_namespaced_custom_object(G, V, NS, P, "pydelete2",
                                           body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_until(lambda: _missing(custom, "pydelete2"), what="pydelete2 to be deleted")


def _missing(custom, name):
    try:
        custom.get_namespaced_custom_object(G, V, NS, P, name)
        return False
    except ApiException as e:
        return e.status == 404


def test_delete_collection(custom):
    for name in ("coll1", "coll2"):
        custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest(name, labels={"coll": "yes"}))
    result = custom.delete_collection_namespaced_custom_object(G, V, NS, P, label_selector="coll=yes")
    assert result["kind"] == "VirtualMachineList"
    assert sorted(i["metadata"]["name"] for i in result["items"]) == ["coll1", "coll2"]
    wait_until(lambda: _missing(custom, "coll1") and _missing(custom, "coll2"), what="collection deleted")


def test_watch(custom):
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pywatch"))

    def change():
        time.sleep(0.5)
        custom.patch_namespaced_custom_object(G, V, NS, P, "pywatch", {"metadata": {"labels": {"w": "1"}}})

    threading.Thread(target=change).start()
    events = []
    w = watch.Watch()
    for event in w.stream(custom.list_namespaced_custom_object, G, V, NS, P, timeout_seconds=3):
        events.append((event["type"], event["object"]["metadata"]["name"], event["object"]))
        if event["type"] == "MODIFIED" and event["object"]["metadata"].get("labels", {}).get("w") == "1":
            w.stop()
    added = {name for t, name, _ in events if t == "ADDED"}
    assert "pywatch" in added and "py1" in added  # synthetic ADDED for what exists
    modified = [o for t, name, o in events if t == "MODIFIED" and name == "pywatch"]
    assert modified and modified[-1]["metadata"]["labels"]["w"] == "1"
    # Events come in resourceVersion order.
    rvs = [int(o["metadata"]["resourceVersion"]) for t, _, o in events if t == "MODIFIED"]
    assert rvs == sorted(rvs)


def test_watch_resumes_from_resource_version(custom):
    listed = custom.list_namespaced_custom_object(G, V, NS, P)
    rv = listed["metadata"]["resourceVersion"]
    custom.create_namespaced_custom_object(G, V, NS, P, vm_manifest("pyafter"))
    events = []
    for event in watch.Watch().stream(custom.list_namespaced_custom_object, G, V, NS, P,
                                      resource_version=rv, timeout_seconds=2):
        events.append((event["type"], event["object"]["metadata"]["name"]))
        if event["object"]["metadata"]["name"] == "pyafter":
            break
    assert events[0] == ("ADDED", "pyafter")


# --- CoreV1Api ------------------------------------------------------------------------

def test_namespaces(core):
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", NS} <= names
    ns = core.read_namespace("default")
    assert ns.status.phase == "Active"
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "default"
    created = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="pycore")))
    assert created.metadata.name == "pycore" and created.spec.finalizers == ["kubernetes"]
    with pytest.raises(ApiException) as e:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="pycore")))
    assert e.value.status == 409
    core.delete_namespace("pycore")
    with pytest.raises(ApiException) as e:
        core.read_namespace("nosuch")
    assert e.value.status == 404


# --- DynamicClient --------------------------------------------------------------------

def test_dynamic_client(dynamic):
    vms = dynamic.resources.get(api_version="kubevirt.io/v1", kind="VirtualMachine")
    assert vms.name == "virtualmachines" and vms.namespaced and "vm" in vms.short_names
    created = vms.create(body=vm_manifest("dyn1"), namespace=NS)
    assert created.metadata.name == "dyn1"
    assert vms.get(name="dyn1", namespace=NS).spec.runStrategy == "Halted"
    assert "dyn1" in [i.metadata.name for i in vms.get(namespace=NS).items]

    # The default patch type is strategic merge: a 415 for a custom resource.
    with pytest.raises(ApiException) as e:
        vms.patch(body={"spec": {"runStrategy": "Manual"}}, name="dyn1", namespace=NS)
    assert e.value.status == 415
    assert status_of(e.value)["reason"] == "UnsupportedMediaType"

    merged = vms.patch(body={"spec": {"runStrategy": "Manual"}}, name="dyn1", namespace=NS,
                       content_type="application/merge-patch+json")
    assert merged.spec.runStrategy == "Manual"
    jsonpatched = vms.patch(body=[{"op": "add", "path": "/metadata/labels/dyn", "value": "yes"}], name="dyn1",
                            namespace=NS, content_type="application/json-patch+json")
    assert jsonpatched.metadata.labels["dyn"] == "yes"

    applied = vms.server_side_apply(body=vm_manifest("dyn2", run_strategy="Always"), name="dyn2", namespace=NS,
                                    field_manager="python-e2e")
    assert applied.spec.runStrategy == "Always"
    assert {(m.manager, m.operation) for m in applied.metadata.managedFields} >= {("python-e2e", "Apply")}
    with pytest.raises(ApiException) as e:
        vms.server_side_apply(body=vm_manifest("dyn2", run_strategy="Manual"), name="dyn2", namespace=NS,
                              field_manager="someone-else")
    assert e.value.status == 409
    conflict = status_of(e.value)
    assert conflict["reason"] == "Conflict"
    assert conflict["message"] == 'Apply failed with 1 conflict: conflict with "python-e2e": .spec.runStrategy'
    assert conflict["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                              "message": 'conflict with "python-e2e"',
                                              "field": ".spec.runStrategy"}]
    forced = vms.server_side_apply(body=vm_manifest("dyn2", run_strategy="Manual"), name="dyn2", namespace=NS,
                                   field_manager="someone-else", force_conflicts=True)
    assert forced.spec.runStrategy == "Manual"

    vms.delete(name="dyn1", namespace=NS)
    namespaces = dynamic.resources.get(api_version="v1", kind="Namespace")
    assert namespaces.get(name=NS).status.phase == "Active"
