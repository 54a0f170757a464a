"""kubectl's writing commands against the real server: create, apply (client- and
server-side), replace, patch, label, annotate, edit, diff, delete and wait — checking
what kubectl prints, its exit code, and the object the server then holds."""

import json
import pathlib
import re
import stat
import time

import pytest
import yaml

from conftest import settle_vm, vm_manifest, wait_until

SSA_HINT = "Please review the fields above--they currently have other managers."


def managers(vm):
    return {(m["manager"], m["operation"]) for m in vm["metadata"].get("managedFields", [])}


# --- create ---------------------------------------------------------------------------

def test_create(server, kubectl):
    path = server.write("create.yaml", vm_manifest("created1"))
    r = kubectl("create", "-f", str(path)).ok()
    assert r.out == "virtualmachine.kubevirt.io/created1 created\n" and r.err == ""
    vm = server.vm("created1")
    assert vm["spec"]["runStrategy"] == "Halted"
    assert vm["metadata"]["generation"] == 1
    assert ("kubectl-create", "Update") in managers(vm)
    again = kubectl("create", "-f", str(path)).failed()
    assert again.rc == 1 and again.out == ""
    assert again.err == (f'Error from server (AlreadyExists): error when creating "{path}": '
                         'virtualmachines.kubevirt.io "created1" already exists\n')


def test_create_from_stdin_and_generate_name(server, kubectl):
    manifest = vm_manifest("ignored")
    del manifest["metadata"]["name"]
    manifest["metadata"]["generateName"] = "gen-"
    r = kubectl("create", "-f", "-", input=json.dumps(manifest)).ok()
    m = re.fullmatch(r"virtualmachine\.kubevirt\.io/(gen-[bcdfghjklmnpqrstvwxz2456789]{5}) created\n", r.out)
    assert m, r.out
    assert server.vm(m.group(1))["metadata"]["generateName"] == "gen-"


def test_create_in_missing_namespace(server, kubectl):
    path = server.write("nsless.yaml", vm_manifest("nsless"))
    r = kubectl("create", "-f", str(path), "-n", "nosuchns").failed()
    assert r.err == (f'Error from server (NotFound): error when creating "{path}": '
                     'namespaces "nosuchns" not found\n')


def test_create_namespace_typed_client(server, kubectl):
    """`kubectl create namespace` posts a protobuf Namespace through the typed client."""
    assert kubectl("create", "namespace", "made-by-kubectl").ok().out == "namespace/made-by-kubectl created\n"
    ns = server.get_json("/api/v1/namespaces/made-by-kubectl")
    assert ns["status"]["phase"] == "Active"
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == "made-by-kubectl"
    r = kubectl("create", "namespace", "made-by-kubectl").failed()
    assert r.err == 'Error from server (AlreadyExists): namespaces "made-by-kubectl" already exists\n'
    assert kubectl("delete", "namespace", "made-by-kubectl").ok().out == 'namespace "made-by-kubectl" deleted\n'


def test_namespace_apply_patch_label(server, kubectl):
    """Namespaces are built-in: kubectl sends them strategic merge patches (apply after
    create, patch's default type, label), which kube-apiserver accepts for built-ins."""
    def ns(labels):
        metadata = {"name": "applied-ns"}
        if labels:
            metadata["labels"] = labels
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    assert kubectl("apply", "-f", "-", input=json.dumps(ns({"a": "1"}))).ok().out == "namespace/applied-ns created\n"
    assert kubectl("apply", "-f", "-", input=json.dumps(ns({"a": "2"}))).ok().out == \
        "namespace/applied-ns configured\n"
    assert kubectl("apply", "-f", "-", input=json.dumps(ns({"a": "2"}))).ok().out == \
        "namespace/applied-ns unchanged\n"
    assert kubectl("patch", "ns", "applied-ns", "-p", '{"metadata":{"labels":{"b":"3"}}}').ok().out == \
        "namespace/applied-ns patched\n"
    kubectl("label", "ns", "applied-ns", "c=4").ok()
    labels = server.get_json("/api/v1/namespaces/applied-ns")["metadata"]["labels"]
    assert labels == {"a": "2", "b": "3", "c": "4", "kubernetes.io/metadata.name": "applied-ns"}
    # Dropping every label from the manifest removes them, but never the name label.
    assert kubectl("apply", "-f", "-", input=json.dumps(ns(None))).ok().out == "namespace/applied-ns configured\n"
    labels = server.get_json("/api/v1/namespaces/applied-ns")["metadata"]["labels"]
    assert labels == {"kubernetes.io/metadata.name": "applied-ns"}
    kubectl("delete", "ns", "applied-ns").ok()


def test_create_unknown_field_validation_modes(server, kubectl):
    manifest = vm_manifest("unknownfield")
    manifest["spec"]["bogusField"] = 1
    path = server.write("unknown.yaml", manifest)
    strict = kubectl("create", "-f", str(path)).failed()
    assert strict.err == (f'Error from server (BadRequest): error when creating "{path}": VirtualMachine in version '
                          '"v1" cannot be handled as a VirtualMachine: strict decoding error: unknown field '
                          '"spec.bogusField"\n')
    assert server.vm("unknownfield") is None
    warn = kubectl("create", "-f", str(path), "--validate=warn").ok()
    assert warn.out == "virtualmachine.kubevirt.io/unknownfield created\n"
    assert warn.err == 'Warning: unknown field "spec.bogusField"\n'
    assert "bogusField" not in server.vm("unknownfield")["spec"]
    kubectl("delete", "vm", "unknownfield").ok()
    ignore = kubectl("create", "-f", str(path), "--validate=false").ok()
    assert ignore.err == ""
    assert "bogusField" not in server.vm("unknownfield")["spec"]


def test_list_files_create_and_apply_with_items_validated_by_the_server(server, kubectl):
    """A `kind: List` file (what `kubectl get -o yaml` writes) goes through kubectl's
    client-side check, which reads /openapi/v2, then each item is created with
    fieldValidation=Strict."""
    listed = {"apiVersion": "v1", "kind": "List", "items": [vm_manifest("listed1"), vm_manifest("listed2")]}
    path = server.write("list.yaml", listed)
    r = kubectl("create", "-f", str(path)).ok()
    assert r.out == ("virtualmachine.kubevirt.io/listed1 created\n"
                     "virtualmachine.kubevirt.io/listed2 created\n") and r.err == ""
    # A copy taken with `get -o yaml` applies back; a changed spec is configured.
    saved = kubectl("get", "vm", "listed1", "listed2", "-o", "yaml").ok().out
    assert saved.startswith("apiVersion: v1\nitems:\n")
    doc = yaml.safe_load(saved)
    for item in doc["items"]:
        # Not a precondition here: the VM controller may write a status meanwhile.
        del item["metadata"]["resourceVersion"]
    doc["items"][0]["spec"]["template"]["metadata"] = {"labels": {"from-list": "yes"}}
    r = kubectl("apply", "-f", str(server.write("list-apply.yaml", doc))).ok()
    assert "virtualmachine.kubevirt.io/listed1 configured\n" in r.out, r.out
    assert server.vm("listed1")["spec"]["template"]["metadata"]["labels"]["from-list"] == "yes"
    # An unknown field in one item: the server refuses that item, the other is created.
    bad = vm_manifest("listed3")
    bad["spec"]["bogusField"] = 1
    listed = {"apiVersion": "v1", "kind": "List", "items": [bad, vm_manifest("listed4")]}
    path = server.write("list-bad.yaml", listed)
    r = kubectl("create", "-f", str(path)).failed()
    assert r.out == "virtualmachine.kubevirt.io/listed4 created\n"
    assert r.err == (f'Error from server (BadRequest): error when creating "{path}": VirtualMachine in version '
                     '"v1" cannot be handled as a VirtualMachine: strict decoding error: unknown field '
                     '"spec.bogusField"\n')
    assert server.vm("listed3") is None


def test_create_invalid_object(server, kubectl):
    manifest = vm_manifest("Bad_Name")
    r = kubectl("create", "-f", "-", input=json.dumps(manifest)).failed()
    assert r.err.startswith('The VirtualMachine "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
                            "a lowercase RFC 1123 subdomain must consist of"), r.err
    assert r.err.count("metadata.name:") == 1, r.err


# --- client-side apply ------------------------------------------------------------------

def test_apply_create_update_unchanged_dry_run(server, kubectl):
    path = server.write("apply.yaml", vm_manifest("applied"))
    assert kubectl("apply", "-f", str(path)).ok().out == "virtualmachine.kubevirt.io/applied created\n"
    vm = settle_vm(server, "applied")
    last = json.loads(vm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["spec"]["runStrategy"] == "Halted"
    assert ("kubectl-client-side-apply", "Update") in managers(vm)

    r = kubectl("apply", "-f", str(path)).ok()
    assert r.out == "virtualmachine.kubevirt.io/applied unchanged\n"
    assert server.vm("applied")["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]

    changed = server.write("apply2.yaml", vm_manifest("applied", run_strategy="Always", labels={"tier": "web"}))
    dry = kubectl("apply", "-f", str(changed), "--dry-run=server").ok()
    assert dry.out == "virtualmachine.kubevirt.io/applied configured (server dry run)\n"
    after_dry = server.vm("applied")
    assert after_dry["spec"]["runStrategy"] == "Halted"
    assert after_dry["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]

    assert kubectl("apply", "-f", str(changed)).ok().out == "virtualmachine.kubevirt.io/applied configured\n"
    updated = server.vm("applied")
    assert updated["spec"]["runStrategy"] == "Always"
    # The label dropped from the manifest is removed (three-way merge), the new one added.
    assert updated["metadata"]["labels"] == {"tier": "web"}
    assert updated["metadata"]["generation"] == 2
    assert kubectl("apply", "-f", str(changed)).ok().out == "virtualmachine.kubevirt.io/applied unchanged\n"


def test_apply_unknown_field_strict(server, kubectl):
    server.create_vm("applystrict")
    manifest = vm_manifest("applystrict")
    manifest["spec"]["bogusField"] = 1
    path = server.write("applystrict.yaml", manifest)
    r = kubectl("apply", "-f", str(path)).failed()
    lines = r.err.splitlines()
    assert lines[0].startswith("Warning: resource virtualmachines/applystrict is missing the "
                               "kubectl.kubernetes.io/last-applied-configuration annotation"), r.err
    assert re.fullmatch(r'The request is invalid: patch: Invalid value: ".*": strict decoding error: '
                        r'unknown field "spec\.bogusField"', lines[1]), r.err
    assert "bogusField" not in server.vm("applystrict")["spec"]


# --- server-side apply ------------------------------------------------------------------

def test_apply_server_side_and_conflicts(server, kubectl):
    path = server.write("ssa.yaml", vm_manifest("ssa"))
    assert kubectl("apply", "--server-side", "-f", str(path)).ok().out == \
        "virtualmachine.kubevirt.io/ssa serverside-applied\n"
    vm = settle_vm(server, "ssa")
    assert ("kubectl", "Apply") in managers(vm)
    assert {m for m in managers(vm) if m[1] == "Apply"} == {("kubectl", "Apply")}
    assert kubectl("apply", "--server-side", "-f", str(path)).ok().out == \
        "virtualmachine.kubevirt.io/ssa serverside-applied\n"
    assert server.vm("ssa")["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]

    other = server.write("ssa-other.yaml", vm_manifest("ssa", run_strategy="Always"))
    conflict = kubectl("apply", "--server-side", "--field-manager=other", "-f", str(other)).failed()
    assert conflict.err.startswith(
        'error: Apply failed with 1 conflict: conflict with "kubectl": .spec.runStrategy\n' + SSA_HINT), conflict.err
    assert server.vm("ssa")["spec"]["runStrategy"] == "Halted"

    dry = kubectl("apply", "--server-side", "--field-manager=other", "--force-conflicts", "--dry-run=server",
                  "-f", str(other)).ok()
    assert dry.out == "virtualmachine.kubevirt.io/ssa serverside-applied (server dry run)\n"
    assert server.vm("ssa")["spec"]["runStrategy"] == "Halted"

    forced = kubectl("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", str(other)).ok()
    assert forced.out == "virtualmachine.kubevirt.io/ssa serverside-applied\n"
    vm = server.vm("ssa")
    assert vm["spec"]["runStrategy"] == "Always"
    entries = {m["manager"]: m for m in vm["metadata"]["managedFields"]}
    assert entries["other"]["operation"] == "Apply"
    assert "f:runStrategy" in entries["other"]["fieldsV1"]["f:spec"]
    assert "f:runStrategy" not in entries["kubectl"]["fieldsV1"]["f:spec"]

    # An Update manager shows up in conflicts with its API version.
    kubectl("patch", "vm", "ssa", "--type=merge", "-p", '{"spec":{"runStrategy":"Manual"}}').ok()
    again = kubectl("apply", "--server-side", "--field-manager=other", "-f", str(other)).failed()
    assert again.err.startswith('error: Apply failed with 1 conflict: conflict with "kubectl-patch" using '
                                'kubevirt.io/v1: .spec.runStrategy\n'), again.err


def test_apply_server_side_removes_fields_no_longer_applied(server, kubectl):
    manifest = vm_manifest("ssaprune", labels={"a": "1", "b": "2"})
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest)).ok()
    manifest["metadata"]["labels"] = {"a": "1"}
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest)).ok()
    assert server.vm("ssaprune")["metadata"]["labels"] == {"a": "1"}


# --- replace, patch, label, annotate, edit --------------------------------------------

def test_replace(server, kubectl):
    server.create_vm("replaced")
    path = server.write("replace.yaml", vm_manifest("replaced", run_strategy="Manual"))
    assert kubectl("replace", "-f", str(path)).ok().out == "virtualmachine.kubevirt.io/replaced replaced\n"
    vm = server.vm("replaced")
    assert vm["spec"]["runStrategy"] == "Manual" and vm["metadata"]["generation"] == 2
    assert ("kubectl-replace", "Update") in managers(vm)

    stale = dict(vm)
    stale["metadata"] = dict(vm["metadata"], resourceVersion="1")
    stale_path = server.write("stale.json", json.dumps(stale))
    r = kubectl("replace", "-f", str(stale_path)).failed()
    assert r.err == (f'Error from server (Conflict): error when replacing "{stale_path}": Operation cannot be '
                     'fulfilled on virtualmachines.kubevirt.io "replaced": the object has been modified; please '
                     'apply your changes to the latest version and try again\n')
    # No resourceVersion in the file: kubectl's GET finds nothing, its PUT is a 404
    # (custom resources are never created by PUT).
    missing = server.write("missing.yaml", vm_manifest("neverthere"))
    r = kubectl("replace", "-f", str(missing)).failed()
    assert r.err == (f'Error from server (NotFound): error when replacing "{missing}": '
                     'virtualmachines.kubevirt.io "neverthere" not found\n')
    # A PUT without resourceVersion of an existing object (raw: kubectl always fills it).
    body = vm_manifest("replaced")
    reply = server.raw("PUT", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/replaced",
                       headers={"Content-Type": "application/json"}, body=body)
    assert reply.status == 422
    status = reply.json()
    assert status["message"] == ('virtualmachines.kubevirt.io "replaced" is invalid: metadata.resourceVersion: '
                                 'Invalid value: 0x0: must be specified for an update')
    assert status["details"] == {"name": "replaced", "group": "kubevirt.io", "kind": "virtualmachines",
                                 "causes": [{"reason": "FieldValueInvalid", "field": "metadata.resourceVersion",
                                             "message": "Invalid value: 0x0: must be specified for an update"}]}


def test_patch_types(server, kubectl):
    server.create_vm("patched")
    settle_vm(server, "patched")
    r = kubectl("patch", "vm", "patched", "--type=merge", "-p", '{"spec":{"runStrategy":"Manual"}}').ok()
    assert r.out == "virtualmachine.kubevirt.io/patched patched\n"
    vm = settle_vm(server, "patched")
    assert vm["spec"]["runStrategy"] == "Manual"
    r = kubectl("patch", "vm", "patched", "--type=merge", "-p", '{"spec":{"runStrategy":"Manual"}}').ok()
    assert r.out == "virtualmachine.kubevirt.io/patched patched (no change)\n"
    assert server.vm("patched")["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]

    r = kubectl("patch", "vm", "patched", "--type=merge", "-p", '{"spec":{"runStrategy":"Always"}}').ok()
    assert r.out == "virtualmachine.kubevirt.io/patched patched\n"
    vm = server.vm("patched")
    assert vm["spec"]["runStrategy"] == "Always" and ("kubectl-patch", "Update") in managers(vm)

    r = kubectl("patch", "vm", "patched", "--type=json",
                "-p", '[{"op":"replace","path":"/spec/runStrategy","value":"Manual"}]').ok()
    assert r.out == "virtualmachine.kubevirt.io/patched patched\n"
    assert server.vm("patched")["spec"]["runStrategy"] == "Manual"

    r = kubectl("patch", "vm", "patched", "-p", '{"spec":{"runStrategy":"Halted"}}').failed()
    assert r.err == ("error: application/strategic-merge-patch+json is not supported by kubevirt.io/v1, "
                     "Kind=VirtualMachine: the body of the request was in an unknown format - accepted media types "
                     "include: application/json-patch+json, application/merge-patch+json, "
                     "application/apply-patch+yaml\n")
    assert server.vm("patched")["spec"]["runStrategy"] == "Manual"

    r = kubectl("patch", "vm", "patched", "--type=json",
                "-p", '[{"op":"test","path":"/spec/runStrategy","value":"Always"}]').failed()
    assert r.err.startswith("The request is invalid") or r.err.startswith("Error from server"), r.err

    r = kubectl("patch", "vm", "patched", "--subresource=status", "--type=merge",
                "-p", '{"status":{"printableStatus":"Paused"}}', "-o", "json", "--show-managed-fields").ok()
    vm = json.loads(r.out)
    assert vm["status"]["printableStatus"] == "Paused"
    assert vm["metadata"]["generation"] == 4  # status writes never bump it
    assert ("kubectl-patch", "Update") in {(m["manager"], m["operation"]) for m in vm["metadata"]["managedFields"]
                                           if m.get("subresource") == "status"}

    r = kubectl("patch", "vm", "nope", "--type=merge", "-p", "{}").failed()
    assert r.err == 'Error from server (NotFound): virtualmachines.kubevirt.io "nope" not found\n'


def test_label_and_annotate(server, kubectl):
    server.create_vm("labeled")
    assert kubectl("label", "vm", "labeled", "tier=gold").ok().out == "virtualmachine.kubevirt.io/labeled labeled\n"
    assert kubectl("annotate", "vm", "labeled", "note=hello").ok().out == \
        "virtualmachine.kubevirt.io/labeled annotated\n"
    vm = server.vm("labeled")
    assert vm["metadata"]["labels"] == {"app": "demo", "tier": "gold"}
    assert vm["metadata"]["annotations"]["note"] == "hello"
    assert {("kubectl-label", "Update"), ("kubectl-annotate", "Update")} <= managers(vm)
    r = kubectl("label", "vm", "labeled", "tier=silver").failed()
    assert r.err == "error: 'tier' already has a value (gold), and --overwrite is false\n"
    kubectl("label", "vm", "labeled", "tier=silver", "--overwrite").ok()
    kubectl("label", "vm", "labeled", "tier-").ok()
    assert server.vm("labeled")["metadata"]["labels"] == {"app": "demo"}
    r = kubectl("label", "vm", "labeled", "bad key=x").failed()
    assert r.rc == 1


def test_edit_with_editor_script(server, kubectl):
    server.create_vm("edited")
    settle_vm(server, "edited")
    script = server.dir / "editor.sh"
    script.write_text("#!/bin/sh\nsed -i 's/runStrategy: Halted/runStrategy: Always/' \"$1\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    r = kubectl("edit", "vm", "edited", env={"EDITOR": str(script)}).ok()
    assert r.out == "virtualmachine.kubevirt.io/edited edited\n"
    vm = server.vm("edited")
    assert vm["spec"]["runStrategy"] == "Always" and ("kubectl-edit", "Update") in managers(vm)
    kubectl("patch", "vm", "edited", "--type=merge", "-p", '{"spec":{"runStrategy":"Halted"}}').ok()
    vm = settle_vm(server, "edited")
    # An editor that changes nothing: kubectl says so and writes nothing.
    noop = server.dir / "noop.sh"
    noop.write_text("#!/bin/sh\ntrue\n")
    noop.chmod(noop.stat().st_mode | stat.S_IEXEC)
    r = kubectl("edit", "vm", "edited", env={"EDITOR": str(noop)}).ok()
    assert r.err == "Edit cancelled, no changes made.\n"
    assert server.vm("edited")["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]


def test_diff(server, kubectl):
    path = server.write("diff.yaml", vm_manifest("diffed"))
    kubectl("apply", "-f", str(path)).ok()
    same = kubectl("diff", "-f", str(path))
    assert same.rc == 0 and same.out == "", repr(same)
    changed = server.write("diff2.yaml", vm_manifest("diffed", run_strategy="Manual"))
    r = kubectl("diff", "-f", str(changed))
    assert r.rc == 1, repr(r)
    assert "-  runStrategy: Halted\n+  runStrategy: Manual\n" in r.out
    assert "-  generation: 1\n+  generation: 2\n" in r.out
    # The dry run left the live object alone and kept its resourceVersion.
    assert "resourceVersion" not in "".join(l for l in r.out.splitlines(True) if l[:1] in "+-" and l[:3] not in ("---", "+++"))
    assert server.vm("diffed")["spec"]["runStrategy"] == "Halted"
    ssa = kubectl("diff", "--server-side", "-f", str(changed))
    assert ssa.rc == 1 and "+  runStrategy: Manual\n" in ssa.out, repr(ssa)
    new = server.write("diff3.yaml", vm_manifest("diffnew"))
    created = kubectl("diff", "-f", str(new))
    assert created.rc == 1 and "+  name: diffnew\n" in created.out
    assert server.vm("diffnew") is None


# --- delete ---------------------------------------------------------------------------

def test_server_dry_run_writes(server, kubectl):
    server.create_vm("dry")
    vm = settle_vm(server, "dry")
    r = kubectl("patch", "vm", "dry", "--type=merge", "-p", '{"spec":{"runStrategy":"Manual"}}',
                "--dry-run=server", "-o", "jsonpath={.spec.runStrategy}").ok()
    assert r.out == "Manual"
    assert kubectl("delete", "vm", "dry", "--dry-run=server").ok().out == \
        'virtualmachine.kubevirt.io "dry" deleted (server dry run)\n'
    created = kubectl("create", "-f", "-", "--dry-run=server", "-o", "json",
                      input=json.dumps(vm_manifest("drynew"))).ok()
    assert json.loads(created.out)["metadata"]["uid"]
    assert server.vm("drynew") is None
    after = server.vm("dry")
    assert after["spec"]["runStrategy"] == "Halted" and "deletionTimestamp" not in after["metadata"]
    assert after["metadata"]["resourceVersion"] == vm["metadata"]["resourceVersion"]


def test_delete_by_name_and_not_found(server, kubectl):
    server.create_vm("del1")
    assert kubectl("delete", "vm", "del1").ok().out == 'virtualmachine.kubevirt.io "del1" deleted\n'
    assert server.vm("del1") is None
    r = kubectl("delete", "vm", "del1").failed()
    assert r.err == 'Error from server (NotFound): virtualmachines.kubevirt.io "del1" not found\n'
    ok = kubectl("delete", "vm", "del1", "--ignore-not-found").ok()
    assert ok.out == "" and ok.err == ""


def test_delete_by_label_and_all(server, kubectl):
    server.create_namespace("delns")
    for name, app in (("a", "x"), ("b", "y"), ("c", "y"), ("d", "z")):
        server.create_vm(name, "delns", labels={"app": app})
    r = kubectl("delete", "vm", "-n", "delns", "-l", "app=y").ok()
    assert r.out == 'virtualmachine.kubevirt.io "b" deleted\nvirtualmachine.kubevirt.io "c" deleted\n'
    assert [server.vm(n, "delns") is None for n in "abcd"] == [False, True, True, False]
    r = kubectl("delete", "vms", "--all", "-n", "delns", "--wait=false").ok()
    assert r.out == 'virtualmachine.kubevirt.io "a" deleted\nvirtualmachine.kubevirt.io "d" deleted\n'
    # Without --wait the VMs may still be terminating: the VM controller's finalizer goes
    # once it has checked that no VMI is left, as in KubeVirt.
    wait_until(lambda: all(server.vm(n, "delns") is None for n in "ad"), what="vms a and d gone")
    none = kubectl("delete", "vms", "--all", "-n", "delns").ok()
    assert none.out == "No resources found\n"


def test_delete_waits_for_finalizers_removed_later(server, kubectl):
    server.create_vm("fin")
    kubectl("patch", "vm", "fin", "--type=merge", "-p", '{"metadata":{"finalizers":["example.com/hold"]}}').ok()
    deleting = server.kubectl_bg("delete", "vm", "fin")
    wait_until(lambda: (server.vm("fin") or {}).get("metadata", {}).get("deletionTimestamp"),
               what="deletionTimestamp on vm fin")
    vm = server.vm("fin")
    # The VM controller may have put its own finalizer back next to ours, as KubeVirt's does.
    assert "example.com/hold" in vm["metadata"]["finalizers"]
    assert set(vm["metadata"]["finalizers"]) <= {"example.com/hold", "kubevirt.io/virtualMachineControllerFinalize"}
    assert vm["metadata"]["deletionGracePeriodSeconds"] == 0
    time.sleep(0.3)
    assert deleting.proc.poll() is None, "kubectl delete must wait while a finalizer holds the object"
    kubectl("patch", "vm", "fin", "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]').ok()
    assert deleting.wait(30) == 0
    assert deleting.expect(r"deleted") == 'virtualmachine.kubevirt.io "fin" deleted'
    assert server.vm("fin") is None


def test_delete_cascade_foreground(server, kubectl):
    server.create_vm("fg")
    r = kubectl("delete", "vm", "fg", "--cascade=foreground").ok()
    assert r.out == 'virtualmachine.kubevirt.io "fg" deleted\n'
    # No dependents: the garbage collector drops foregroundDeletion and the VM goes.
    wait_until(lambda: server.vm("fg") is None, what="vm fg to be gone")


def test_delete_cascade_foreground_with_finalizer_shows_gc_finalizer(server, kubectl):
    server.create_vm("fg2")
    kubectl("patch", "vm", "fg2", "--type=merge", "-p", '{"metadata":{"finalizers":["example.com/hold"]}}').ok()
    kubectl("delete", "vm", "fg2", "--cascade=foreground", "--wait=false").ok()
    vm = server.vm("fg2")
    assert vm["metadata"]["deletionTimestamp"]
    assert "example.com/hold" in vm["metadata"]["finalizers"]
    kubectl("patch", "vm", "fg2", "--type=merge", "-p", '{"metadata":{"finalizers":null}}').ok()
    wait_until(lambda: server.vm("fg2") is None, what="vm fg2 to be gone")


# --- wait -----------------------------------------------------------------------------

def status_patch(kubectl, name, status):
    kubectl("patch", "vm", name, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status})).ok()


def test_wait_jsonpath_condition_and_delete(server, kubectl):
    server.create_vm("waited")
    # The VM controller reports a halted VM as Stopped with Ready=False.
    r = kubectl("wait", "--for=jsonpath={.status.printableStatus}=Stopped", "vm/waited", "--timeout=30s").ok()
    assert r.out == "virtualmachine.kubevirt.io/waited condition met\n"
    r = kubectl("wait", "--for=condition=Ready=false", "vm/waited", "--timeout=30s").ok()
    assert r.out == "virtualmachine.kubevirt.io/waited condition met\n"

    # A change that happens while kubectl watches.
    w = server.kubectl_bg("wait", "--for=jsonpath={.metadata.labels.phase}=go", "vm/waited", "--timeout=30s")
    time.sleep(0.5)
    kubectl("label", "vm", "waited", "phase=go").ok()
    assert w.wait(30) == 0
    assert w.expect("condition met") == "virtualmachine.kubevirt.io/waited condition met"

    # A condition only seen in a watch event: the VM controller owns the conditions and
    # may rewrite them at once, so write it until kubectl has seen it.
    w = server.kubectl_bg("wait", "--for=condition=Demo", "vm/waited", "--timeout=30s")
    for i in range(60):
        if w.proc.poll() is not None:
            break
        status_patch(kubectl, "waited", {"conditions": [{"type": "Demo", "status": "True", "reason": f"r{i}"}]})
        time.sleep(0.5)
    assert w.wait(30) == 0
    assert w.expect("condition met") == "virtualmachine.kubevirt.io/waited condition met"

    timeout = kubectl("wait", "--for=condition=Paused", "vm/waited", "--timeout=1s").failed()
    assert timeout.err == "error: timed out waiting for the condition on virtualmachines/waited\n"

    kubectl("delete", "vm", "waited", "--wait=false").ok()
    r = kubectl("wait", "--for=delete", "vm/waited", "--timeout=20s")
    # Either it is already gone (kubectl says nothing, exit 0) or kubectl saw the deletion.
    assert r.rc == 0, repr(r)
    assert r.out in ("", "virtualmachine.kubevirt.io/waited condition met\n")


def test_wait_for_delete_while_finalizer_holds(server, kubectl):
    server.create_vm("waitdel")
    kubectl("patch", "vm", "waitdel", "--type=merge", "-p", '{"metadata":{"finalizers":["example.com/hold"]}}').ok()
    kubectl("delete", "vm", "waitdel", "--wait=false").ok()
    w = server.kubectl_bg("wait", "--for=delete", "vm/waitdel", "--timeout=30s")
    time.sleep(0.5)
    assert w.proc.poll() is None
    kubectl("patch", "vm", "waitdel", "--type=merge", "-p", '{"metadata":{"finalizers":null}}').ok()
    assert w.wait(30) == 0
    assert w.expect("condition met") == "virtualmachine.kubevirt.io/waitdel condition met"


# --- auth, events -----------------------------------------------------------------------

def test_auth_can_i(kubectl):
    assert kubectl("auth", "can-i", "create", "virtualmachines.kubevirt.io").ok().out == "yes\n"
    assert kubectl("auth", "can-i", "delete", "vm/vm1").ok().out == "yes\n"
    assert kubectl("auth", "can-i", "list", "vmis", "-A").ok().out == "yes\n"
    assert kubectl("auth", "can-i", "update", "virtualmachines", "--subresource=status").ok().out == "yes\n"


def test_events_if_served(server, kubectl):
    resources = server.get_json("/api/v1")["resources"]
    if not any(r["name"] == "events" for r in resources):
        r = kubectl("get", "events").failed()
        assert r.err == 'error: the server doesn\'t have a resource type "events"\n'
        pytest.skip("core/v1 events are not served yet (kubectl get events answers as for an unknown type)")
    kubectl("get", "events").ok()


def test_wait_for_create_force_delete_and_replace_force(server, kubectl):
    w = server.kubectl_bg("wait", "--for=create", "vm/later", "--timeout=30s")
    time.sleep(0.5)
    server.create_vm("later")
    assert w.wait(30) == 0
    assert w.expect("condition met") == "virtualmachine.kubevirt.io/later condition met"

    path = server.write("later.yaml", vm_manifest("later", run_strategy="Manual"))
    old_uid = server.vm("later")["metadata"]["uid"]
    r = kubectl("replace", "--force", "-f", str(path)).ok()
    assert r.out == 'virtualmachine.kubevirt.io "later" deleted\nvirtualmachine.kubevirt.io/later replaced\n'
    vm = server.vm("later")
    assert vm["metadata"]["uid"] != old_uid and vm["spec"]["runStrategy"] == "Manual"

    r = kubectl("delete", "vm", "later", "--grace-period=0", "--force").ok()
    assert r.out == 'virtualmachine.kubevirt.io "later" force deleted\n'
    assert r.err.startswith("Warning: Immediate deletion does not wait for confirmation")
    wait_until(lambda: server.vm("later") is None, what="vm later to be gone")


# --- the README's examples ---------------------------------------------------------------

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_apply(server, kubectl, example):
    """Every manifest in examples/ is accepted as written (a server-side dry run: admitted,
    defaulted and validated, nothing stored); the migration names a VMI that is not there."""
    r = kubectl("apply", "-f", str(EXAMPLES / example), "--dry-run=server")
    if example == "migration.yaml":
        assert 'the VMI "default/guest" does not exist' in r.failed().err
    else:
        assert "(server dry run)" in r.ok().out
