"""Events through kubectl: what the controllers and the node agent report about a VM's
life (as `kubectl describe` and `kubectl events` show it), correlation under a crash
loop, the core and events.k8s.io views of the same objects, validation, and expiry after
--event-ttl. The server runs its local node with simulated guests."""

import json
import time

import pytest
import yaml

from conftest import Server, parse_table, vm_manifest, wait_until

CRASH = "sim.virtplane.io/crash-after"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("virtplane-events"),
                 ("--hypervisor", "sim", "--event-ttl", "1h"))
    srv.start()
    yield srv
    srv.stop()


def events(server, namespace="default", **selector):
    fields = ",".join(f"{k}={v}" for k, v in selector.items())
    path = f"/api/v1/namespaces/{namespace}/events"
    if fields:
        path += f"?fieldSelector={fields}"
    return server.get_json(path)["items"]


def reasons(items):
    return [e["reason"] for e in sorted(items, key=lambda e: e["metadata"]["creationTimestamp"])]


def wait_for_event(server, name, reason, kind, timeout=30):
    def found():
        return [e for e in events(server, **{"involvedObject.name": name, "involvedObject.kind": kind})
                if e["reason"] == reason]
    wait_until(found, timeout=timeout, what=f"event {reason} about {kind} {name}")
    return found()


def phase(server, name):
    reply = server.raw("GET", f"/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/{name}")
    return reply.json().get("status", {}).get("phase") if reply.status == 200 else None


def test_a_vm_life_shows_in_describe_and_kubectl_events(server):
    server.kubectl("apply", "-f", str(server.write("life.yaml", vm_manifest("life", "Always")))).ok()
    wait_until(lambda: phase(server, "life") == "Running", what="life Running")
    wait_for_event(server, "life", "Started", "VirtualMachineInstance")

    described = server.kubectl("describe", "vm", "life").ok().out
    events_part = described.split("Events:")[-1]
    assert "SuccessfulCreate" in events_part, described
    assert "Started the virtual machine by creating the new virtual machine instance life" in events_part
    assert "virtualmachine-controller" in events_part
    vmi_described = server.kubectl("describe", "vmi", "life").ok().out.split("Events:")[-1]
    for reason, message in (("Created", "VirtualMachineInstance defined."),
                            ("Started", "VirtualMachineInstance started.")):
        assert reason in vmi_described and message in vmi_described, vmi_described

    uid = server.get_json("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/life")["metadata"]["uid"]
    server.kubectl("patch", "vm", "life", "--type", "merge", "-p", '{"spec":{"runStrategy":"Halted"}}').ok()
    wait_for_event(server, "life", "SuccessfulDelete", "VirtualMachine")
    stopped = wait_for_event(server, "life", "Stopped", "VirtualMachineInstance")
    assert stopped[0]["type"] == "Normal" and stopped[0]["message"] == "The VirtualMachineInstance was shut down."
    deleted = wait_for_event(server, "life", "SuccessfulDelete", "VirtualMachine")[0]
    assert deleted["message"] == f"Stopped the virtual machine by deleting the virtual machine instance {uid}"
    assert wait_for_event(server, "life", "ShuttingDown", "VirtualMachineInstance")[0]["message"] == \
        "Signaled Graceful Shutdown"

    listed = server.kubectl("events", "--for", "vm/life").ok().out
    rows = parse_table(listed)
    assert [r["REASON"] for r in rows] == ["SuccessfulCreate", "SuccessfulDelete"], listed
    assert all(r["OBJECT"] == "VirtualMachine/life" for r in rows), listed
    # The involved object's uid selects too (kubectl describe asks with it).
    vm_uid = server.vm("life")["metadata"]["uid"]
    assert reasons(events(server, **{"involvedObject.uid": vm_uid})) == ["SuccessfulCreate", "SuccessfulDelete"]


def test_a_crash_loop_bumps_one_event_instead_of_adding_objects(server):
    manifest = vm_manifest("crashy", "Always")
    manifest["spec"]["template"]["metadata"]["annotations"] = {CRASH: "300ms"}
    server.kubectl("apply", "-f", str(server.write("crashy.yaml", manifest))).ok()

    def created():
        return [e for e in events(server, **{"involvedObject.name": "crashy",
                                             "involvedObject.kind": "VirtualMachine"})
                if e["reason"] == "SuccessfulCreate"]
    wait_until(lambda: created() and created()[0].get("count", 0) >= 3, timeout=60,
               what="the VM to be started three times")
    assert len(created()) == 1, created()
    crashed = wait_for_event(server, "crashy", "Stopped", "VirtualMachineInstance")
    assert all(e["type"] == "Warning" and e["message"] == "The VirtualMachineInstance crashed." for e in crashed)
    table = server.kubectl("get", "events", "--field-selector", "involvedObject.name=crashy,reason=SuccessfulCreate",
                           "-o", "wide").ok().out
    row = parse_table(table)[0]
    assert int(row["COUNT"]) >= 3, table
    # Created and bumped by the VM controller, which is each write's field manager.
    managers = {entry["manager"] for entry in created()[0]["metadata"]["managedFields"]}
    assert managers == {"virtualmachine-controller"}, managers
    server.kubectl("delete", "vm", "crashy", "--wait=false").ok()


def test_both_views_are_the_same_objects(server):
    core = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "viewed.1", "namespace": "default"},
        "involvedObject": {"kind": "VirtualMachine", "name": "viewed", "namespace": "default",
                           "apiVersion": "kubevirt.io/v1"},
        "reason": "Testing", "message": "said in core", "type": "Normal",
        "source": {"component": "e2e"}, "count": 2,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
    }
    server.kubectl("apply", "-f", str(server.write("core-event.yaml", core))).ok()
    as_v1 = server.get_json("/apis/events.k8s.io/v1/namespaces/default/events/viewed.1")
    assert as_v1["apiVersion"] == "events.k8s.io/v1"
    assert as_v1["note"] == "said in core" and as_v1["regarding"]["name"] == "viewed"
    assert as_v1["deprecatedCount"] == 2 and as_v1["deprecatedSource"] == {"component": "e2e"}
    as_core = server.get_json("/api/v1/namespaces/default/events/viewed.1")
    assert as_v1["metadata"]["resourceVersion"] == as_core["metadata"]["resourceVersion"]

    modern = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "viewed.2", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "e2e/tester",
        "reportingInstance": "tester-1", "action": "Test", "reason": "Testing", "type": "Warning",
        "note": "said in events.k8s.io",
        "regarding": {"kind": "VirtualMachine", "name": "viewed", "namespace": "default"},
    }
    server.kubectl("create", "-f", str(server.write("v1-event.yaml", modern))).ok()
    core_view = server.get_json("/api/v1/namespaces/default/events/viewed.2")
    assert core_view["message"] == "said in events.k8s.io"
    assert core_view["reportingComponent"] == "e2e/tester"
    assert core_view["involvedObject"]["name"] == "viewed"
    listed = server.kubectl("get", "events.events.k8s.io", "--field-selector", "regarding.name=viewed",
                            "-o", "name").ok().out.split()
    assert sorted(listed) == ["event.events.k8s.io/viewed.1", "event.events.k8s.io/viewed.2"]
    # A change through one view is the other's.
    server.kubectl("patch", "events.events.k8s.io", "viewed.2", "--type", "merge",
                   "-p", '{"note": "changed"}').ok()
    assert server.get_json("/api/v1/namespaces/default/events/viewed.2")["message"] == "changed"
    server.kubectl("delete", "events", "viewed.1", "viewed.2").ok()


def test_invalid_events_are_refused_with_field_paths(server):
    missing = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "bad.1", "namespace": "default"},
        "regarding": {"kind": "VirtualMachine", "name": "x", "namespace": "elsewhere"},
        "type": "Sometimes",
    }
    result = server.kubectl("create", "-f", str(server.write("bad-v1.yaml", missing))).failed()
    for field in ("eventTime: Required value", "reportingController: Required value",
                  "regarding.namespace: Invalid value: \"elsewhere\": does not match event.namespace",
                  "type: Invalid value: \"Sometimes\""):
        assert field in result.err, result.err
    reply = server.raw("POST", "/api/v1/namespaces/default/events", headers={"Content-Type": "application/json"},
                       body={"apiVersion": "v1", "kind": "Event", "metadata": {"name": "bad.2"},
                             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "kube-system"}})
    assert reply.status == 422, reply.text
    status = reply.json()
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "involvedObject.namespace"


def test_events_expire_after_the_event_ttl(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("virtplane-event-ttl"), ("--event-ttl", "2s"))
    srv.start()
    try:
        watch = srv.kubectl_bg("get", "events", "--watch", "--output-watch-events", "-o",
                               "custom-columns=TYPE:.type,NAME:.object.metadata.name")
        time.sleep(1)
        body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "brief.1"},
                "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "Testing", "message": "soon gone"}
        reply = srv.raw("POST", "/api/v1/namespaces/default/events", headers={"Content-Type": "application/json"},
                        body=body)
        assert reply.status == 201, reply.text
        started = time.monotonic()
        watch.expect(r"ADDED\s+brief.1")
        watch.expect(r"DELETED\s+brief.1", timeout=15)
        assert time.monotonic() - started >= 1.5
        watch.stop()
        assert srv.raw("GET", "/api/v1/namespaces/default/events/brief.1").status == 404
    finally:
        srv.stop()
