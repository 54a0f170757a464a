"""CDI's DataVolumes with unmodified kubectl and the Python client: apply (client- and
server-side), the Table columns CDI's CRD prints, `kubectl explain`, `kubectl wait` on
the Ready condition, CDI's admission messages, and the claim the DataVolume owns."""

import json

import pytest
import yaml
from kubernetes import client, config

from conftest import parse_table, wait_until

NS = "dvns"


def blank_dv(name: str, size: str = "8Mi") -> dict:
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"blank": {}},
                     "storage": {"resources": {"requests": {"storage": size}}}}}


@pytest.fixture(scope="module", autouse=True)
def namespace(server):
    server.create_namespace(NS)


def test_kubectl_apply_get_wait_and_explain(kubectl):
    kubectl("apply", "-f", "-", input=yaml.safe_dump(blank_dv("scratch"))).ok()
    kubectl("wait", "-n", NS, "dv/scratch", "--for=condition=Ready", "--timeout=60s").ok()
    rows = parse_table(kubectl("get", "dv", "-n", NS).ok().out)
    assert list(rows[0]) == ["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE"]
    row = next(r for r in rows if r["NAME"] == "scratch")
    assert (row["PHASE"], row["PROGRESS"], row["RESTARTS"]) == ("Succeeded", "100.0%", "0")
    claim = json.loads(kubectl("get", "pvc", "scratch", "-n", NS, "-o", "json").ok().out)
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("DataVolume", "scratch", True)
    assert claim["status"]["phase"] == "Bound"
    explained = kubectl("explain", "dv.spec.source.http").ok().out
    assert "url" in explained and "secretRef" in explained and "certConfigMap" in explained
    # Server-side apply of the same manifest is a no-op for the spec.
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(blank_dv("scratch"))).ok()


def test_cdi_admission_messages(kubectl):
    bad = blank_dv("bad")
    bad["spec"]["source"] = {"http": {"url": "ftp://example.com/disk.img"}}
    out = kubectl("create", "-f", "-", input=yaml.safe_dump(bad)).failed().err
    assert "spec.source Invalid source URL scheme: ftp://example.com/disk.img" in out, out
    no_size = blank_dv("no-size")
    no_size["spec"]["storage"] = {}
    out = kubectl("create", "-f", "-", input=yaml.safe_dump(no_size)).failed().err
    assert "Storage size is missing" in out, out
    kubectl("apply", "-f", "-", input=yaml.safe_dump(blank_dv("fixed"))).ok()
    changed = blank_dv("fixed", size="16Mi")
    out = kubectl("apply", "-f", "-", input=yaml.safe_dump(changed)).failed().err
    assert "Cannot update DataVolume Spec" in out, out


def test_python_client_creates_and_reads_data_volumes(server):
    api = config.new_client_from_config(config_file=str(server.kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        custom.create_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", NS, "datavolumes", blank_dv("py"))

        def succeeded():
            dv = custom.get_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", NS, "datavolumes", "py")
            return dv.get("status", {}).get("phase") == "Succeeded"

        wait_until(succeeded, timeout=60, what="DataVolume py Succeeded")
        listed = custom.list_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", NS, "datavolumes")
        assert "py" in [item["metadata"]["name"] for item in listed["items"]]
        claim = core.read_namespaced_persistent_volume_claim("py", NS)
        assert claim.metadata.owner_references[0].kind == "DataVolume"
        custom.delete_namespaced_custom_object("cdi.kubevirt.io", "v1beta1", NS, "datavolumes", "py")

        def claim_gone():
            try:
                core.read_namespaced_persistent_volume_claim("py", NS)
                return False
            except client.rest.ApiException as e:
                return e.status == 404

        wait_until(claim_gone, timeout=60, what="the DataVolume's claim deleted with it")
    finally:
        api.close()
