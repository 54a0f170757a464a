"""kubectl get in all its forms against the real server: server-side Table printing with
KubeVirt's printer columns (list, single get, watch, -o wide, -A, categories), selectors,
chunking, and the -o yaml|json|jsonpath|name outputs."""

import json
import re

import pytest
import yaml

from conftest import parse_table, settle_vm, table_rows, vm_manifest, wait_until

NS = "getns"
VM_HEADER = ["NAME", "AGE", "STATUS", "READY"]
AGE = r"(\d+s|\d+m\d*s?|\d+h\d*m?)"


@pytest.fixture(scope="module", autouse=True)
def objects(server):
    """Four halted VMs in their own namespace with app labels (their status is the VM
    controller's), and a standalone VMI carrying a status."""
    server.create_namespace(NS)
    server.create_namespace("getns2")
    for name, app in (("db", "y"), ("vm1", "x"), ("vm2", "y"), ("vm3", "x")):
        server.create_vm(name, NS, labels={"app": app})
    server.create_vm("other", "getns2", labels={"app": "z"})
    vmi = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "inst1", "labels": {"app": "x"}},
        "spec": {"domain": {"devices": {}, "memory": {"guest": "128Mi"}}},
        "status": {"phase": "Running", "nodeName": "node01",
                   "interfaces": [{"ipAddress": "10.244.0.12"}],
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "LiveMigratable", "status": "True"}]},
    }
    reply = server.raw("POST", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances",
                       headers={"Content-Type": "application/json"}, body=vmi)
    assert reply.status == 201, reply.text
    for name in ("db", "vm1", "vm2", "vm3"):
        settle_vm(server, name, NS)


def vm_cells(server, name, namespace=NS):
    """The Table cells kubectl should print for a VM, from the object the server holds."""
    vm = server.vm(name, namespace)
    status = vm.get("status", {})
    ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "")
    return {"NAME": name, "STATUS": status.get("printableStatus", ""), "READY": ready}


def vmi_cells(server, name, namespace=NS):
    vmi = server.get_json(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}")
    status = vmi.get("status", {})
    cond = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return {"NAME": name, "PHASE": status.get("phase", ""),
            "IP": (status.get("interfaces") or [{}])[0].get("ipAddress", ""),
            "NODENAME": status.get("nodeName", ""), "READY": cond.get("Ready", ""),
            "LIVE-MIGRATABLE": cond.get("LiveMigratable", ""), "PAUSED": cond.get("Paused", "")}


def check_table(text, header, expected_rows):
    """kubectl's table has exactly `header` and, per row, the expected cells (AGE by shape)."""
    assert text.splitlines()[0].split() == header, text
    rows = parse_table(text)
    assert len(rows) == len(expected_rows), text
    for row, want in zip(rows, expected_rows):
        if "AGE" in row:
            assert re.fullmatch(AGE, row["AGE"]), (row, text)
        for key, value in want.items():
            assert row[key] == value, (key, row, want, text)


def check_rows(text, header, rows):
    """Compares kubectl's table with expected rows; `AGE` cells are matched by shape."""
    got = table_rows(text)
    assert got[0] == header, text
    assert len(got) - 1 == len(rows), text
    for actual, expected in zip(got[1:], rows):
        assert len(actual) == len(expected), (actual, expected)
        for cell, want in zip(actual, expected):
            if want == "AGE":
                assert re.fullmatch(AGE, cell), (cell, text)
            else:
                assert cell == want, (actual, expected, text)


def test_get_list_table(server, kubectl):
    r = kubectl("get", "vms", "-n", NS).ok()
    check_table(r.out, VM_HEADER, [vm_cells(server, n) for n in ("db", "vm1", "vm2", "vm3")])
    # A halted VM as KubeVirt's VM controller reports it.
    assert parse_table(r.out)[0]["STATUS"] == "Stopped" and parse_table(r.out)[0]["READY"] == "False"
    assert r.err == ""


def test_get_single_table(server, kubectl):
    r = kubectl("get", "vm", "vm1", "-n", NS).ok()
    check_table(r.out, VM_HEADER, [vm_cells(server, "vm1")])


def test_get_empty_namespace(kubectl):
    r = kubectl("get", "vms", "-n", "nosuchns").ok()
    assert r.out == ""
    assert r.err.strip() == "No resources found in nosuchns namespace."


def test_get_vmi_columns_and_wide(server, kubectl):
    r = kubectl("get", "vmi", "-n", NS).ok()
    expected = vmi_cells(server, "inst1")
    check_table(r.out, ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"],
                [{k: v for k, v in expected.items() if k not in ("LIVE-MIGRATABLE", "PAUSED")}])
    wide = kubectl("get", "vmis", "-n", NS, "-o", "wide").ok()
    check_table(wide.out, ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"],
                [vmi_cells(server, "inst1")])
    # VMs have no priority>0 column: -o wide prints the same columns.
    check_table(kubectl("get", "vm", "db", "-n", NS, "-o", "wide").ok().out, VM_HEADER, [vm_cells(server, "db")])


def test_get_vmim_columns(server, kubectl):
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "mig1"}, "spec": {"vmiName": "inst1"}}
    created = server.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(vmim))
    assert created.rc == 0 or "AlreadyExists" in created.err, repr(created)
    r = kubectl("get", "vmim", "mig1", "-n", NS).ok()
    got = table_rows(r.out)
    assert got[0] == ["NAME", "PHASE", "VMI"], r.out
    assert got[1][0] == "mig1" and got[1][-1] == "inst1", r.out


def test_get_all_namespaces(kubectl):
    r = kubectl("get", "vms", "-A").ok()
    rows = table_rows(r.out)
    assert rows[0] == ["NAMESPACE", "NAME", "AGE", "STATUS", "READY"]
    mine = [row[:2] for row in rows[1:] if row[0] in (NS, "getns2")]
    assert mine == [["getns", "db"], ["getns", "vm1"], ["getns", "vm2"], ["getns", "vm3"], ["getns2", "other"]]


def test_get_multiple_kinds_and_category_all(server, kubectl):
    r = kubectl("get", "vm,vmi", "-n", NS).ok()
    blocks = r.out.split("\n\n")
    assert len(blocks) == 2, r.out
    check_table(blocks[0], VM_HEADER, [dict(vm_cells(server, n), NAME=f"virtualmachine.kubevirt.io/{n}")
                                       for n in ("db", "vm1", "vm2", "vm3")])
    vmi = vmi_cells(server, "inst1")
    check_table(blocks[1], ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"],
                [{"NAME": "virtualmachineinstance.kubevirt.io/inst1", "PHASE": vmi["PHASE"], "IP": vmi["IP"]}])
    everything = kubectl("get", "all", "-n", NS).ok()
    names = re.findall(r"^(\S+\.kubevirt\.io/\S+)", everything.out, re.M)
    assert {"virtualmachine.kubevirt.io/db", "virtualmachine.kubevirt.io/vm3",
            "virtualmachineinstance.kubevirt.io/inst1"} <= set(names), everything.out
    assert "virtualmachineinstancemigration.kubevirt.io/mig1" in names or \
        "mig1" not in kubectl("get", "vmim", "-n", NS, "-o", "name").out


def test_get_label_selectors(server, kubectl):
    check_table(kubectl("get", "vms", "-n", NS, "-l", "app=x").ok().out, VM_HEADER,
                [vm_cells(server, "vm1"), vm_cells(server, "vm3")])
    names = kubectl("get", "vms", "-n", NS, "-l", "app in (x,y),!missing", "-o", "name").ok().out.split()
    assert names == [f"virtualmachine.kubevirt.io/{n}" for n in ("db", "vm1", "vm2", "vm3")]
    assert kubectl("get", "vms", "-n", NS, "-l", "app notin (x)", "-o", "name").ok().out.split() == \
        ["virtualmachine.kubevirt.io/db", "virtualmachine.kubevirt.io/vm2"]
    assert kubectl("get", "vms", "-n", NS, "-l", "app!=y,app", "-o", "name").ok().out.split() == \
        ["virtualmachine.kubevirt.io/vm1", "virtualmachine.kubevirt.io/vm3"]
    none = kubectl("get", "vms", "-n", NS, "-l", "app=nothing").ok()
    assert none.err.strip() == f"No resources found in {NS} namespace."
    bad = kubectl("get", "vms", "-n", NS, "-l", "app in (").failed()
    assert bad.err.startswith("Error from server (BadRequest): ") or bad.err.startswith("error: "), bad.err


def test_get_field_selectors(kubectl):
    assert kubectl("get", "vms", "-n", NS, "--field-selector", "metadata.name=vm2", "-o", "name").ok().out == \
        "virtualmachine.kubevirt.io/vm2\n"
    assert kubectl("get", "vms", "-n", NS, "--field-selector", "metadata.name!=vm2,metadata.namespace=getns",
                   "-o", "name").ok().out.split() == \
        ["virtualmachine.kubevirt.io/db", "virtualmachine.kubevirt.io/vm1", "virtualmachine.kubevirt.io/vm3"]
    bad = kubectl("get", "vms", "-n", NS, "--field-selector", "spec.running=true").failed()
    assert bad.err.strip() == (
        'Error from server (BadRequest): Unable to find "kubevirt.io/v1, Resource=virtualmachines" that match '
        'label selector "", field selector "spec.running=true": field label not supported: spec.running')


def test_get_chunk_size(kubectl):
    whole = kubectl("get", "vms", "-n", NS).ok().out
    chunked = kubectl("get", "vms", "-n", NS, "--chunk-size=1").ok().out
    assert [r[0] for r in table_rows(chunked)] == [r[0] for r in table_rows(whole)]
    names = kubectl("get", "vm", "-n", NS, "--chunk-size=2", "-o", "name").ok().out.split()
    assert names == [f"virtualmachine.kubevirt.io/{n}" for n in ("db", "vm1", "vm2", "vm3")]
    items = json.loads(kubectl("get", "vm", "-A", "--chunk-size=2", "-o", "json").ok().out)["items"]
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items
            if i["metadata"]["namespace"] in (NS, "getns2")] == \
        [(NS, "db"), (NS, "vm1"), (NS, "vm2"), (NS, "vm3"), ("getns2", "other")]


def test_get_output_formats(server, kubectl):
    doc = yaml.safe_load(kubectl("get", "vm", "vm1", "-n", NS, "-o", "yaml").ok().out)
    assert doc["apiVersion"] == "kubevirt.io/v1" and doc["kind"] == "VirtualMachine"
    assert doc["metadata"]["name"] == "vm1" and doc["metadata"]["namespace"] == NS
    assert doc["spec"]["runStrategy"] == "Halted"
    stored = server.vm("vm1", NS)
    assert doc["status"] == stored["status"]
    assert "managedFields" not in doc["metadata"]  # kubectl hides them
    assert doc["metadata"]["uid"] == stored["metadata"]["uid"]
    assert doc["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]

    as_json = json.loads(kubectl("get", "vm", "vm1", "-n", NS, "-o", "json").ok().out)
    assert as_json["metadata"]["uid"] == doc["metadata"]["uid"]
    listed = json.loads(kubectl("get", "vms", "-n", NS, "-o", "json").ok().out)
    assert listed["kind"] == "List" and len(listed["items"]) == 4
    assert all(i["kind"] == "VirtualMachine" for i in listed["items"])

    assert kubectl("get", "vm", "-n", NS, "-o", "jsonpath={.items[*].metadata.name}").ok().out == "db vm1 vm2 vm3"
    assert kubectl("get", "vm", "vm1", "-n", NS, "-o",
                   "jsonpath={.status.conditions[?(@.type=='Ready')].status}").ok().out == vm_cells(server, "vm1")["READY"]
    assert kubectl("get", "vm", "vm1", "-n", NS, "-o", "name").ok().out == "virtualmachine.kubevirt.io/vm1\n"
    custom = kubectl("get", "vm", "-n", NS, "-o", "custom-columns=N:.metadata.name,RS:.spec.runStrategy").ok()
    assert table_rows(custom.out)[:2] == [["N", "RS"], ["db", "Halted"]]
    labels = kubectl("get", "vm", "vm1", "-n", NS, "--show-labels").ok()
    assert table_rows(labels.out)[0][-1] == "LABELS" and table_rows(labels.out)[1][-1] == "app=x"
    col = kubectl("get", "vm", "-n", NS, "-L", "app").ok()
    assert table_rows(col.out)[0][-1] == "APP" and table_rows(col.out)[1][-1] == "y"


def test_table_documents(server):
    accept = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
              "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
    reply = server.raw("GET", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?limit=500",
                       headers={"Accept": accept})
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
    table = reply.json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    cols = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert cols == [("Name", "string", 0), ("Age", "date", 0), ("Status", "string", 0), ("Ready", "string", 0)]
    assert table["columnDefinitions"][0]["format"] == "name"
    assert table["columnDefinitions"][2]["description"] == "Human Readable Status"
    row = next(r for r in table["rows"] if r["cells"][0] == "vm1")
    assert row["cells"][2:] == [vm_cells(server, "vm1")["STATUS"], vm_cells(server, "vm1")["READY"]]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["apiVersion"] == "meta.k8s.io/v1"
    assert row["object"]["metadata"]["namespace"] == NS
    assert row["object"]["metadata"]["labels"] == {"app": "x"}
    db = next(r for r in table["rows"] if r["cells"][0] == "db")
    assert re.fullmatch(r"\d+s", db["cells"][1])
    # A missing value is a null cell (kubectl prints it blank).
    vmi = server.raw("GET", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/inst1",
                     headers={"Accept": accept}).json()
    assert [c["name"] for c in vmi["columnDefinitions"]] == ["Name", "Age", "Phase", "IP", "NodeName", "Ready",
                                                              "Live-Migratable", "Paused"]
    assert [c["priority"] for c in vmi["columnDefinitions"]] == [0, 0, 0, 0, 0, 0, 1, 1]
    if not vmi_cells(server, "inst1")["PAUSED"]:
        assert vmi["rows"][0]["cells"][7] is None
    full = server.raw("GET", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm1?includeObject=Object",
                      headers={"Accept": accept}).json()
    assert full["rows"][0]["object"]["kind"] == "VirtualMachine"
    paged = server.raw("GET", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?limit=2",
                       headers={"Accept": accept}).json()
    assert len(paged["rows"]) == 2 and paged["metadata"]["continue"]
    assert paged["metadata"]["remainingItemCount"] == 2


def test_get_watch_prints_rows_for_changes(server, kubectl):
    w = server.kubectl_bg("get", "vms", "-n", NS, "-w")
    try:
        assert re.split(r"\s{2,}", w.expect(r"^NAME\s").strip()) == VM_HEADER
        w.expect(r"^vm3\s")
        kubectl("patch", "vm", "vm2", "-n", NS, "--subresource=status", "--type=merge",
                "-p", '{"status":{"printableStatus":"Starting"}}').ok()
        line = w.expect(r"^vm2\s+\S+\s+Starting")
        assert re.split(r"\s{2,}", line.strip())[2] == "Starting"
        # The VM controller puts the real status back, and that prints too.
        w.expect(r"^vm2\s+\S+\s+Stopped")
        server.create_vm("watched", NS)
        w.expect(r"^watched\s")
        kubectl("delete", "vm", "watched", "-n", NS).ok()
        # A deletion prints the object's last row again.
        w.expect(r"^watched\s")
    finally:
        w.stop()


def test_get_watch_only_and_watch_events(server, kubectl):
    w = server.kubectl_bg("get", "vm", "vm3", "-n", NS, "--watch-only", "-o", "name")
    try:
        # Nothing is printed for the object as it is (kubectl drops the initial event of
        # its resourceVersion=0 watch); each change prints its name. The watch starts at
        # some point after launch, so keep changing vm3 until a line shows up.
        line = None
        for i in range(40):
            kubectl("label", "vm", "vm3", "-n", NS, f"watch=one-{i}", "--overwrite").ok()
            try:
                line = w.expect(r"virtualmachine", timeout=0.5)
                break
            except AssertionError:
                continue
        assert line == "virtualmachine.kubevirt.io/vm3"
        assert set(w.seen) == {"virtualmachine.kubevirt.io/vm3"}
    finally:
        w.stop()
    w = server.kubectl_bg("get", "vms", "-n", NS, "-w", "-o", "json", "--output-watch-events")
    try:
        first = json.loads(w.expect(r'"type"'))
        assert first["type"] == "ADDED" and first["object"]["kind"] == "VirtualMachine"
        w.expect(r'"name":"vm3"')
        kubectl("label", "vm", "vm3", "-n", NS, "watch=two", "--overwrite").ok()
        event = json.loads(w.expect(r'"MODIFIED"'))
        assert event["object"]["metadata"]["name"] == "vm3"
        assert event["object"]["metadata"]["labels"]["watch"] == "two"
    finally:
        w.stop()


def test_watch_table_stream(server):
    """A Table watch: first event carries columnDefinitions, later ones null (§9)."""
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    import threading
    import urllib.request
    rv = server.get_json(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines")["metadata"]["resourceVersion"]

    def touch():
        for i in range(2):
            server.raw("PATCH", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/db",
                       headers={"Content-Type": "application/merge-patch+json"},
                       body={"metadata": {"labels": {"tick": str(i)}}})
    request = urllib.request.Request(
        server.url + f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?watch=true"
        f"&resourceVersion={rv}&timeoutSeconds=10", headers={"Accept": accept})
    with urllib.request.urlopen(request, context=server.ssl, timeout=20) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        threading.Thread(target=touch).start()
        events = [json.loads(response.readline()) for _ in range(2)]
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED"]
    assert events[0]["object"]["kind"] == "Table"
    assert [c["name"] for c in events[0]["object"]["columnDefinitions"]] == ["Name", "Age", "Status", "Ready"]
    assert events[1]["object"]["columnDefinitions"] is None
    assert events[1]["object"]["rows"][0]["cells"][0] in ("db", "vm1", "vm2", "vm3", "watched")
    wait_until(lambda: server.vm("db", NS)["metadata"]["labels"].get("tick") == "1")


def test_get_namespaces(kubectl):
    r = kubectl("get", "ns", NS).ok()
    check_rows(r.out, ["NAME", "STATUS", "AGE"], [[NS, "Active", "AGE"]])
    names = kubectl("get", "namespaces", "-o", "name").ok().out.split()
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-public", f"namespace/{NS}"} <= set(names)


def test_get_not_found(kubectl):
    r = kubectl("get", "vm", "nope", "-n", NS).failed()
    assert r.rc == 1 and r.out == ""
    assert r.err.strip() == 'Error from server (NotFound): virtualmachines.kubevirt.io "nope" not found'
    r = kubectl("get", "nosuchkind").failed()
    assert r.err.strip() == 'error: the server doesn\'t have a resource type "nosuchkind"'


def test_describe(server, kubectl):
    out = kubectl("describe", "vm", "vm1", "-n", NS).ok().out
    assert re.search(r"^Name:\s+vm1$", out, re.M)
    assert re.search(rf"^Namespace:\s+{NS}$", out, re.M)
    assert re.search(r"^API Version:\s+kubevirt\.io/v1$", out, re.M)
    assert re.search(r"^Kind:\s+VirtualMachine$", out, re.M)
    assert re.search(r"^  Run Strategy:\s+Halted$", out, re.M)
    assert re.search(r"^Events:", out, re.M)
    many = kubectl("describe", "vms", "-n", NS, "-l", "app=x").ok().out
    assert len(re.findall(r"^Name:", many, re.M)) == 2


def test_nodes_wide_and_pod_cidr_from_node_ipam(server, kubectl):
    """kubectl get nodes -o wide prints kube's node columns, and node IPAM gives a Node
    made by hand a /24 of the cluster CIDR that describe shows."""
    node = ("apiVersion: v1\nkind: Node\nmetadata:\n  name: e2e-node\n"
            "  labels:\n    node-role.kubernetes.io/worker: \"\"\n")
    kubectl("create", "-f", "-", input=node).ok()
    try:
        cidr = wait_until(lambda: server.get_json("/api/v1/nodes/e2e-node")
                          .get("spec", {}).get("podCIDR"), what="the node's pod CIDR")
        assert re.fullmatch(r"10\.244\.\d+\.0/24", cidr), cidr
        out = kubectl("get", "node", "e2e-node", "-o", "wide").ok().out
        assert out.splitlines()[0].split() == [
            "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP",
            "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"], out
        cells = out.splitlines()[1].split()
        # The hand-made node reports no version: kubectl leaves that cell blank.
        assert cells[:3] == ["e2e-node", "NotReady", "worker"], out
        assert cells[4:] == ["<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"], out
        described = kubectl("describe", "node", "e2e-node").ok().out
        assert re.search(rf"^PodCIDR:\s+{re.escape(cidr)}$", described, re.M), described
        assert re.search(r"^Roles:\s+worker$", described, re.M), described
    finally:
        kubectl("delete", "node", "e2e-node").ok()


def test_get_watch_all_namespaces(server, kubectl):
    w = server.kubectl_bg("get", "vms", "-A", "-w")
    try:
        assert w.expect(r"^NAMESPACE\s").split() == ["NAMESPACE", "NAME", "AGE", "STATUS", "READY"]
        w.expect(r"^getns2\s+other\s")
        server.create_vm("aw", "getns2")
        w.expect(r"^getns2\s+aw\s")
    finally:
        w.stop()


def test_get_sorting_and_headers(kubectl):
    out = kubectl("get", "vms", "-n", NS, "--sort-by=.metadata.name", "--no-headers").ok().out
    assert [l.split()[0] for l in out.splitlines()] == ["db", "vm1", "vm2", "vm3"]
    assert kubectl("get", "vm", "vm2", "-n", NS, "-o", "go-template={{.metadata.name}}").ok().out == "vm2"


def test_get_name_forms(server, kubectl):
    assert kubectl("get", "vm/vm1", "vmi/inst1", "-n", NS, "-o", "name").ok().out.split() == \
        ["virtualmachine.kubevirt.io/vm1", "virtualmachineinstance.kubevirt.io/inst1"]
    assert kubectl("get", "vm", "vm1", "vm2", "-n", NS, "-o", "name").ok().out.split() == \
        ["virtualmachine.kubevirt.io/vm1", "virtualmachine.kubevirt.io/vm2"]
    path = server.write("getfile.yaml", vm_manifest("vm3", namespace=NS))
    assert kubectl("get", "-f", str(path), "-o", "name").ok().out == "virtualmachine.kubevirt.io/vm3\n"
    partial = kubectl("get", "vm", "vm1", "ghost", "-n", NS, "-o", "name").failed()
    assert partial.out == "virtualmachine.kubevirt.io/vm1\n"
    assert partial.err == 'Error from server (NotFound): virtualmachines.kubevirt.io "ghost" not found\n'
