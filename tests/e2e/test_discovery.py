"""Discovery, health, version and OpenAPI as served over HTTPS, and what kubectl makes of
them (api-resources, api-versions, short names, categories, explain). Golden files of
every served discovery and OpenAPI document live in tests/golden/; regenerate them with
UPDATE_GOLDEN=1 after an intended change and review the diff."""

import json
import os
import re

import pytest

from conftest import GOLDEN_DIR

AGGREGATED = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
VM_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


# --- raw documents ---------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_health_endpoints(server, path):
    reply = server.raw("GET", path, auth=False)
    assert reply.status == 200
    assert reply.text == "ok"
    assert reply.headers["Content-Type"].startswith("text/plain")


def test_version(server):
    reply = server.raw("GET", "/version?timeout=32s", auth=False)
    assert reply.status == 200
    doc = reply.json()
    assert doc["major"] == "1" and doc["minor"] == "32"
    assert doc["gitVersion"].startswith("v1.32.")
    for key in ("gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler", "platform"):
        assert key in doc


def test_unauthenticated_api_request_is_401(server):
    reply = server.raw("GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", auth=False)
    assert reply.status == 401
    assert reply.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_legacy_core_discovery(server):
    api = server.get_json("/api")
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    assert api["serverAddressByClientCIDRs"] == [{"clientCIDR": "0.0.0.0/0",
                                                  "serverAddress": f"127.0.0.1:{server.port}"}]
    v1 = server.get_json("/api/v1")
    assert v1["kind"] == "APIResourceList" and v1["groupVersion"] == "v1"
    ns = next(r for r in v1["resources"] if r["name"] == "namespaces")
    assert ns["kind"] == "Namespace" and ns["namespaced"] is False and ns["shortNames"] == ["ns"]
    assert {"create", "delete", "get", "list", "watch"} <= set(ns["verbs"])


def test_legacy_group_list(server):
    apis = server.get_json("/apis")
    assert apis["kind"] == "APIGroupList" and apis["apiVersion"] == "v1"
    groups = {g["name"]: g for g in apis["groups"]}
    assert groups["kubevirt.io"] == {
        "name": "kubevirt.io",
        "versions": [{"groupVersion": "kubevirt.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "kubevirt.io/v1", "version": "v1"},
    }
    assert "authorization.k8s.io" in groups
    group = server.get_json("/apis/kubevirt.io")
    assert group["kind"] == "APIGroup" and group["name"] == "kubevirt.io"


def test_kubevirt_resource_list(server):
    doc = server.get_json("/apis/kubevirt.io/v1")
    assert doc["kind"] == "APIResourceList" and doc["groupVersion"] == "kubevirt.io/v1"
    by_name = {r["name"]: r for r in doc["resources"]}
    expected = {
        "virtualmachines": ("virtualmachine", "VirtualMachine", ["vm", "vms"]),
        "virtualmachineinstances": ("virtualmachineinstance", "VirtualMachineInstance", ["vmi", "vmis"]),
        "virtualmachineinstancemigrations": ("virtualmachineinstancemigration",
                                             "VirtualMachineInstanceMigration", ["vmim", "vmims"]),
    }
    for plural, (singular, kind, short) in expected.items():
        r = by_name[plural]
        assert r["singularName"] == singular and r["kind"] == kind
        assert r["namespaced"] is True
        assert r["shortNames"] == short
        assert r["categories"] == ["all"]
        assert r["verbs"] == VM_VERBS
        assert re.fullmatch(r"[A-Za-z0-9+/]{11}=", r["storageVersionHash"])
    # Status subresources: VM and VMIM have one, VMI does not (KubeVirt's CRDs).
    assert by_name["virtualmachines/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["virtualmachineinstancemigrations/status"]["kind"] == "VirtualMachineInstanceMigration"
    assert "virtualmachineinstances/status" not in by_name


def test_authorization_group(server):
    doc = server.get_json("/apis/authorization.k8s.io/v1")
    ssar = next(r for r in doc["resources"] if r["name"] == "selfsubjectaccessreviews")
    assert ssar["kind"] == "SelfSubjectAccessReview" and ssar["verbs"] == ["create"]
    assert ssar["namespaced"] is False


def test_subresources_group(server):
    """virtctl's group (kubevirt-semantics §6): served by virt-api as its own group."""
    reply = server.raw("GET", "/apis/subresources.kubevirt.io/v1")
    assert reply.status == 200, (
        "GET /apis/subresources.kubevirt.io/v1 must answer an APIResourceList "
        f"(virtctl discovers it), got {reply.status} {reply.text}")
    doc = reply.json()
    assert doc["kind"] == "APIResourceList"
    assert doc["groupVersion"] == "subresources.kubevirt.io/v1"
    names = {r["name"] for r in doc["resources"]}
    assert {"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart",
            "virtualmachines/migrate", "virtualmachineinstances/pause",
            "virtualmachineinstances/unpause"} <= names
    apis = server.get_json("/apis")
    assert "subresources.kubevirt.io" in {g["name"] for g in apis["groups"]}


def test_unknown_group_version_is_404(server):
    reply = server.raw("GET", "/apis/nosuch.io/v1")
    assert reply.status == 404
    assert reply.json()["message"] == "the server could not find the requested resource"


def test_aggregated_discovery(server):
    reply = server.raw("GET", "/apis", headers={"Accept": AGGREGATED})
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    doc = reply.json()
    assert doc["kind"] == "APIGroupDiscoveryList" and doc["apiVersion"] == "apidiscovery.k8s.io/v2"
    kubevirt = next(i for i in doc["items"] if i["metadata"]["name"] == "kubevirt.io")
    version = kubevirt["versions"][0]
    assert version["version"] == "v1" and version["freshness"] == "Current"
    vm = next(r for r in version["resources"] if r["resource"] == "virtualmachines")
    assert vm["responseKind"] == {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}
    assert vm["scope"] == "Namespaced" and vm["singularResource"] == "virtualmachine"
    assert vm["shortNames"] == ["vm", "vms"] and vm["categories"] == ["all"]
    assert vm["verbs"] == VM_VERBS
    assert vm["subresources"] == [{"subresource": "status", "responseKind": vm["responseKind"],
                                   "verbs": ["get", "patch", "update"]}]
    vmi = next(r for r in version["resources"] if r["resource"] == "virtualmachineinstances")
    assert not vmi.get("subresources")
    core = server.raw("GET", "/api", headers={"Accept": AGGREGATED}).json()
    assert [i["metadata"].get("name", "") for i in core["items"]] == [""]
    ns = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "namespaces")
    assert ns["scope"] == "Cluster"


# --- golden documents ------------------------------------------------------------------

GOLDEN_DOCS = {
    "discovery-api.json": ("/api", None),
    "discovery-api-v1.json": ("/api/v1", None),
    "discovery-apis.json": ("/apis", None),
    "discovery-apis-kubevirt.io.json": ("/apis/kubevirt.io", None),
    "discovery-apis-kubevirt.io-v1.json": ("/apis/kubevirt.io/v1", None),
    "discovery-apis-authorization.k8s.io-v1.json": ("/apis/authorization.k8s.io/v1", None),
    "discovery-aggregated-api.json": ("/api", AGGREGATED),
    "discovery-aggregated-apis.json": ("/apis", AGGREGATED),
    "openapi-v3-root.json": ("/openapi/v3", None),
    "openapi-v3-api-v1.json": ("/openapi/v3/api/v1", None),
    "openapi-v3-apis-kubevirt.io-v1.json": ("/openapi/v3/apis/kubevirt.io/v1", None),
}


def normalize(server, text: str) -> str:
    """Pretty, key-sorted JSON with this run's address replaced."""
    doc = json.loads(text)
    out = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return out.replace(f"127.0.0.1:{server.port}", "127.0.0.1:PORT")


@pytest.mark.parametrize("golden", sorted(GOLDEN_DOCS))
def test_golden_document(server, golden):
    path, accept = GOLDEN_DOCS[golden]
    reply = server.raw("GET", path, headers={"Accept": accept or "application/json"})
    assert reply.status == 200, f"GET {path}: {reply.status} {reply.text}"
    actual = normalize(server, reply.text)
    # Served twice, the same bytes: documents must be deterministic.
    assert normalize(server, server.raw("GET", path, headers={"Accept": accept or "application/json"}).text) == actual
    file = GOLDEN_DIR / golden
    if os.environ.get("UPDATE_GOLDEN") == "1":
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(actual)
        return
    assert file.exists(), f"{file} is missing: run with UPDATE_GOLDEN=1 to create it"
    expected = file.read_text()
    if actual != expected:
        import difflib
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"golden/{golden}", f"served {path}", n=2))
        pytest.fail(f"served {path} differs from tests/golden/{golden} "
                    f"(UPDATE_GOLDEN=1 regenerates it if the change is intended):\n{diff[:6000]}")


# --- OpenAPI semantics kubectl relies on ------------------------------------------------

def test_openapi_root_and_hash_redirect(server):
    root = server.get_json("/openapi/v3")
    url = root["paths"]["apis/kubevirt.io/v1"]["serverRelativeURL"]
    assert re.fullmatch(r"/openapi/v3/apis/kubevirt\.io/v1\?hash=[0-9A-F]+", url)
    reply = server.raw("GET", url, headers={"Accept": "application/json"})
    assert reply.status == 200
    assert "immutable" in reply.headers.get("Cache-Control", "")
    assert reply.headers.get("Etag", "").strip('"') == url.split("hash=")[1]


def test_openapi_patch_operations_support_server_side_field_validation(server):
    """kubectl decides server-side field validation from the PATCH operation (§3)."""
    doc = server.get_json("/openapi/v3/apis/kubevirt.io/v1")
    for plural, kind in (("virtualmachines", "VirtualMachine"),
                         ("virtualmachineinstances", "VirtualMachineInstance"),
                         ("virtualmachineinstancemigrations", "VirtualMachineInstanceMigration")):
        item = doc["paths"][f"/apis/kubevirt.io/v1/namespaces/{{namespace}}/{plural}/{{name}}"]
        patch = item["patch"]
        assert patch["x-kubernetes-group-version-kind"] == {"group": "kubevirt.io", "version": "v1", "kind": kind}
        params = patch.get("parameters", []) + item.get("parameters", [])

        def name_of(p):
            if "$ref" in p:
                return doc["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]["name"]
            return p["name"]
        assert "fieldValidation" in {name_of(p) for p in params}
        content = set(patch["requestBody"]["content"])
        assert "application/strategic-merge-patch+json" not in content
        assert {"application/merge-patch+json", "application/json-patch+json",
                "application/apply-patch+yaml"} <= content
    schema = doc["components"]["schemas"]["io.kubevirt.v1.VirtualMachine"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": "kubevirt.io", "version": "v1",
                                                          "kind": "VirtualMachine"}]


def test_openapi_v2_is_a_document_without_definitions(server):
    """/openapi/v2 answers (kubectl reads it for `kind: List` files and client-side apply's
    patch type) without definitions: schemas are in v3, and kubectl leaves items to the
    server's strict validation and patches custom kinds with JSON merge patch."""
    doc = server.raw("GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert doc.status == 200 and doc.headers["Content-Type"] == "application/json"
    assert doc.json() == {"swagger": "2.0", "info": {"title": "virtplane", "version": "v1"}, "paths": {}}
    # What kubectl asks for: gnostic's openapi.v2.Document in protobuf, under a media type
    # Go's MIME parser accepts (the one asked for has an "@").
    pb = server.raw("GET", "/openapi/v2",
                    headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert pb.status == 200
    assert pb.headers["Content-Type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert pb.body == b"\x0a\x032.0\x12\x0f\x0a\x09virtplane\x12\x02v1\x42\x00"


# --- kubectl on top of discovery ------------------------------------------------------

def test_kubectl_api_resources(kubectl):
    out = kubectl("api-resources").ok().out
    lines = out.splitlines()
    assert re.split(r"\s+", lines[0].strip()) == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {re.split(r"\s+", l.strip())[0]: re.split(r"\s+", l.strip()) for l in lines[1:]}
    assert rows["virtualmachines"] == ["virtualmachines", "vm,vms", "kubevirt.io/v1", "true", "VirtualMachine"]
    assert rows["virtualmachineinstances"] == ["virtualmachineinstances", "vmi,vmis", "kubevirt.io/v1", "true",
                                               "VirtualMachineInstance"]
    assert rows["virtualmachineinstancemigrations"] == ["virtualmachineinstancemigrations", "vmim,vmims",
                                                        "kubevirt.io/v1", "true", "VirtualMachineInstanceMigration"]
    assert rows["namespaces"] == ["namespaces", "ns", "v1", "false", "Namespace"]
    assert rows["selfsubjectaccessreviews"] == ["selfsubjectaccessreviews", "authorization.k8s.io/v1", "false",
                                                "SelfSubjectAccessReview"]
    wide = kubectl("api-resources", "--api-group=kubevirt.io", "-o", "wide").ok().out.splitlines()
    assert re.split(r"\s+", wide[0].strip())[-2:] == ["VERBS", "CATEGORIES"]
    vm = next(l for l in wide if l.startswith("virtualmachines "))
    assert re.split(r"\s+", vm.strip())[-2:] == ["delete,deletecollection,get,list,patch,create,update,watch", "all"]
    # VM, VMI, VMIM and the cluster configuration (KubeVirt, kv).
    assert len(wide) == 5
    kv = next(l for l in wide if l.startswith("kubevirts "))
    assert re.split(r"\s+", kv.strip())[:4] == ["kubevirts", "kv,kvs", "kubevirt.io/v1", "true"]
    names = kubectl("api-resources", "--categories=all", "-o", "name").ok().out.split()
    assert sorted(names) == ["datasources.cdi.kubevirt.io", "datavolumes.cdi.kubevirt.io", "pods", "services",
                             "virtualmachineinstancemigrations.kubevirt.io",
                             "virtualmachineinstances.kubevirt.io", "virtualmachines.kubevirt.io"]
    # The cluster network's kinds, as kube-apiserver serves them.
    assert rows["services"] == ["services", "svc", "v1", "true", "Service"]
    assert rows["endpointslices"] == ["endpointslices", "discovery.k8s.io/v1", "true", "EndpointSlice"]
    # CDI's kinds, as its CRDs name them.
    assert rows["datavolumes"] == ["datavolumes", "dv,dvs", "cdi.kubevirt.io/v1beta1", "true", "DataVolume"]
    assert rows["datasources"] == ["datasources", "das", "cdi.kubevirt.io/v1beta1", "true", "DataSource"]
    assert rows["storageprofiles"] == ["storageprofiles", "cdi.kubevirt.io/v1beta1", "false", "StorageProfile"]


def test_kubectl_api_versions(kubectl):
    versions = kubectl("api-versions").ok().out.split()
    assert {"v1", "kubevirt.io/v1", "authorization.k8s.io/v1"} <= set(versions)


def test_kubectl_version(kubectl):
    doc = json.loads(kubectl("version", "-o", "json").ok().out)
    assert doc["serverVersion"]["minor"] == "32"


def test_kubectl_get_raw(kubectl):
    doc = json.loads(kubectl("get", "--raw", "/apis/kubevirt.io/v1").ok().out)
    assert doc["groupVersion"] == "kubevirt.io/v1"
    assert kubectl("get", "--raw", "/readyz").ok().out == "ok"
    r = kubectl("get", "--raw", "/apis/nosuch.io/v1").failed()
    assert r.err.strip() == "Error from server (NotFound): the server could not find the requested resource"


def test_kubectl_short_names_resolve(server, kubectl):
    server.create_vm("short1")
    for name in ("vm", "vms", "virtualmachine", "virtualmachines", "virtualmachines.kubevirt.io",
                 "vm.v1.kubevirt.io"):
        assert kubectl("get", name, "short1", "-o", "name").ok().out == "virtualmachine.kubevirt.io/short1\n", name
    for name in ("vmi", "vmis", "vmim", "vmims"):
        r = kubectl("get", name).ok()
        assert r.err.strip() == "No resources found in default namespace.", name


def test_kubectl_explain(kubectl):
    out = kubectl("explain", "vm").ok().out
    assert re.search(r"^GROUP:\s+kubevirt\.io$", out, re.M)
    assert re.search(r"^KIND:\s+VirtualMachine$", out, re.M)
    assert re.search(r"^VERSION:\s+v1$", out, re.M)
    for field in ("apiVersion", "kind", "metadata", "spec", "status"):
        assert re.search(rf"^  {field}\t<", out, re.M), field
    assert re.search(r"^  metadata\t<ObjectMeta>", out, re.M)

    disks = kubectl("explain", "vm.spec.template.spec.domain.devices.disks").ok().out
    assert re.search(r"^FIELD: disks <\[\]Disk>$", disks, re.M), disks
    assert "DESCRIPTION:" in disks and "FIELDS:" in disks
    for field in ("name", "disk", "cdrom", "lun", "bootOrder"):
        assert re.search(rf"^  {field}\t<", disks, re.M), field
    assert re.search(r"^  name\t<string> -required-$", disks, re.M)

    run = kubectl("explain", "virtualmachines.spec.runStrategy").ok().out
    assert re.search(r"^FIELD: runStrategy <string>$", run, re.M)

    vmi = kubectl("explain", "vmi.status.phase").ok().out
    assert re.search(r"^FIELD: phase <string>$", vmi, re.M)

    recursive = kubectl("explain", "vmim.spec", "--recursive").ok().out
    assert "vmiName\t<string>" in recursive

    missing = kubectl("explain", "vm.spec.nosuchfield").failed()
    assert 'field "nosuchfield" does not exist' in missing.err
