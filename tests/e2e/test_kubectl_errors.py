"""Bad cases: what kubectl prints for 401, 404, 409 and 422 answers of the real server
(the same text as against kube-apiserver, per the traces), and credentials over HTTPS."""

import json

import pytest
import yaml

from conftest import vm_manifest

LOGIN_ERROR = ("error: You must be logged in to the server "
               "(the server has asked for the client to provide credentials)")


def kubeconfig_with_user(server, name, user):
    config = yaml.safe_load(server.kubeconfig.read_text())
    config["users"][0]["user"] = user
    path = server.dir / name
    path.write_text(yaml.safe_dump(config))
    return path


def admin_token(server):
    tokens = json.loads((server.data / "pki" / "tokens.json").read_text())
    return next(t for t, u in tokens.items() if u["user"] == "admin")


def test_wrong_token_is_401_and_kubectl_says_log_in(server, kubectl):
    path = kubeconfig_with_user(server, "wrong-token.kubeconfig", {"token": "not-a-token"})
    r = kubectl("get", "vms", kubeconfig=path, env={"KUBECACHEDIR": str(server.dir / "cache-401")}).failed()
    assert r.rc == 1 and r.out == ""
    lines = r.err.splitlines()
    assert lines[-1] == LOGIN_ERROR, r.err
    # kubectl retries discovery before giving up; every retry reports the 401.
    assert all(l.endswith('err="couldn\'t get current server API group list: the server has asked for the '
                          'client to provide credentials"') for l in lines[:-1]), r.err


def test_untrusted_client_certificate_is_401(server, kubectl, tmp_path):
    """A client certificate from another CA authenticates nobody."""
    other = tmp_path / "other"
    import subprocess
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(other) + ".key", "-out", str(other) + ".crt", "-days", "1",
                    "-subj", "/O=system:masters/CN=mallory"], check=True, capture_output=True)
    path = kubeconfig_with_user(server, "foreign-cert.kubeconfig", {
        "client-certificate": str(other) + ".crt", "client-key": str(other) + ".key"})
    r = kubectl("get", "vms", kubeconfig=path, env={"KUBECACHEDIR": str(server.dir / "cache-foreign")})
    assert r.rc == 1, repr(r)
    # Refused either in the TLS handshake or with 401; never served.
    assert r.err.splitlines()[-1] == LOGIN_ERROR or "certificate" in r.err, r.err


def test_bearer_token_over_https(server, kubectl):
    server.create_vm("tokenvm")
    path = kubeconfig_with_user(server, "token.kubeconfig", {"token": admin_token(server)})
    r = kubectl("get", "vm", "tokenvm", "-o", "name", kubeconfig=path).ok()
    assert r.out == "virtualmachine.kubevirt.io/tokenvm\n"
    # Writes with a token record the manager as usual.
    kubectl("label", "vm", "tokenvm", "by=token", kubeconfig=path).ok()
    assert server.vm("tokenvm")["metadata"]["labels"]["by"] == "token"


def test_404_texts(server, kubectl):
    assert kubectl("get", "vm", "ghost").failed().err == \
        'Error from server (NotFound): virtualmachines.kubevirt.io "ghost" not found\n'
    assert kubectl("get", "vmi", "ghost").failed().err == \
        'Error from server (NotFound): virtualmachineinstances.kubevirt.io "ghost" not found\n'
    assert kubectl("get", "vmim", "ghost", "-n", "kube-system").failed().err == \
        'Error from server (NotFound): virtualmachineinstancemigrations.kubevirt.io "ghost" not found\n'
    assert kubectl("delete", "vm", "ghost").failed().err == \
        'Error from server (NotFound): virtualmachines.kubevirt.io "ghost" not found\n'
    assert kubectl("label", "vm", "ghost", "a=b").failed().err == \
        'Error from server (NotFound): virtualmachines.kubevirt.io "ghost" not found\n'
    assert kubectl("get", "ns", "ghost").failed().err == 'Error from server (NotFound): namespaces "ghost" not found\n'
    # A missing object in a missing namespace is the object's own NotFound; kubectl then
    # looks the namespace up itself and reports that instead.
    reply = server.raw("GET", "/apis/kubevirt.io/v1/namespaces/nowhere/virtualmachines/ghost")
    assert reply.status == 404 and reply.json()["message"] == 'virtualmachines.kubevirt.io "ghost" not found'
    assert kubectl("get", "vm", "ghost", "-n", "nowhere").failed().err == \
        'Error from server (NotFound): namespaces "nowhere" not found\n'
    reply = server.raw("GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/ghost")
    assert reply.status == 404
    assert reply.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": 'virtualmachines.kubevirt.io "ghost" not found', "reason": "NotFound",
                            "details": {"name": "ghost", "group": "kubevirt.io", "kind": "virtualmachines"},
                            "code": 404}


def test_409_texts(server, kubectl):
    server.create_vm("dup")
    r = kubectl("create", "-f", "-", input=json.dumps(vm_manifest("dup"))).failed()
    assert r.err == ('Error from server (AlreadyExists): error when creating "STDIN": '
                     'virtualmachines.kubevirt.io "dup" already exists\n')
    stored = server.vm("dup")
    stored["metadata"]["resourceVersion"] = "1"
    r = kubectl("replace", "-f", "-", input=json.dumps(stored)).failed()
    assert r.err == ('Error from server (Conflict): error when replacing "STDIN": Operation cannot be fulfilled on '
                     'virtualmachines.kubevirt.io "dup": the object has been modified; please apply your changes to '
                     'the latest version and try again\n')
    # A merge patch carrying a stale resourceVersion is a conflict too.
    r = kubectl("patch", "vm", "dup", "--type=merge", "-p", '{"metadata":{"resourceVersion":"1"}}').failed()
    assert r.err == ('Error from server (Conflict): Operation cannot be fulfilled on virtualmachines.kubevirt.io '
                     '"dup": the object has been modified; please apply your changes to the latest version and '
                     'try again\n')


def test_422_texts(server, kubectl):
    bad_name = kubectl("create", "-f", "-", input=json.dumps(vm_manifest("Bad_Name"))).failed()
    assert bad_name.err == (
        'The VirtualMachine "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 '
        "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')\n")
    # KubeVirt's validating webhook: causes without name/kind, printed as "The request is invalid".
    manifest = vm_manifest("badref")
    manifest["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["name"] = "other"
    r = kubectl("create", "-f", "-", input=json.dumps(manifest)).failed()
    assert r.err.startswith("The request is invalid: spec.template.spec.domain.devices.disks[0].name: "), r.err
    reply = server.raw("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
                       headers={"Content-Type": "application/json"}, body=manifest)
    assert reply.status == 422
    status = reply.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('admission webhook "virtualmachine-validator.kubevirt.io" denied the request: ')
    assert "name" not in status.get("details", {}) and status["details"]["causes"]
    assert server.vm("badref") is None
    # A label that is not a label.
    server.create_vm("labels422")
    r = kubectl("patch", "vm", "labels422", "--type=merge", "-p", '{"metadata":{"labels":{"a":"x y"}}}').failed()
    assert r.err.startswith('The VirtualMachine "labels422" is invalid: metadata.labels: Invalid value: "x y": '
                            "a valid label must be an empty string or consist of alphanumeric characters"), r.err


def test_400_texts(kubectl):
    r = kubectl("get", "vms", "-l", "a b").failed()
    assert r.err == ('Error from server (BadRequest): Unable to find "kubevirt.io/v1, Resource=virtualmachines" '
                     'that match label selector "a b", field selector "": unable to parse requirement: '
                     "found 'b', expected: in, notin, =, ==, !=, gt, lt\n")


def test_415_for_strategic_merge_patch_raw(server):
    server.create_vm("smp")
    reply = server.raw("PATCH", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/smp",
                       headers={"Content-Type": "application/strategic-merge-patch+json"}, body={"spec": {}})
    assert reply.status == 415
    assert reply.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
                   "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        "reason": "UnsupportedMediaType", "code": 415}


@pytest.mark.parametrize("path", ["/apis/kubevirt.io/v1/namespaces/default/nosuchthings", "/nope", "/apis/kubevirt.io/v2"])
def test_unknown_paths_are_404(server, path):
    reply = server.raw("GET", path)
    assert reply.status == 404
    assert reply.json()["message"] == "the server could not find the requested resource"
