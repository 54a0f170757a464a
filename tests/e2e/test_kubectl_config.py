"""ConfigMaps and Secrets with the real kubectl: `create configmap|secret generic` from
literals and files, `get cm,secret` with kube-apiserver's columns, Secret data as base64,
server-side validation errors and `immutable`, apply and delete."""

import base64

import pytest

from conftest import parse_table

NS = "cfg"
UNATTEND = '<?xml version="1.0"?>\n<unattend xmlns="urn:schemas-microsoft-com:unattend"/>\n'


@pytest.fixture(scope="module", autouse=True)
def namespace(server):
    server.create_namespace(NS)


def test_create_configmap_from_literal_and_file(server, kubectl):
    answer = server.write("unattend.xml", UNATTEND)
    r = kubectl("-n", NS, "create", "configmap", "answers",
                f"--from-file=unattend.xml={answer}", "--from-literal=locale=en-US").ok()
    assert r.out.strip() == "configmap/answers created"
    rows = parse_table(kubectl("-n", NS, "get", "cm").ok().out)
    assert [(row["NAME"], row["DATA"]) for row in rows] == [("answers", "2")]
    assert rows[0]["AGE"].endswith("s")
    got = kubectl("-n", NS, "get", "configmap", "answers", "-o", "jsonpath={.data.unattend\\.xml}").ok()
    assert got.out == UNATTEND


def test_create_secret_generic_and_get_both_kinds(server, kubectl):
    r = kubectl("-n", NS, "create", "secret", "generic", "userdata",
                "--from-literal=userdata=#cloud-config").ok()
    assert r.out.strip() == "secret/userdata created"
    rows = parse_table(kubectl("-n", NS, "get", "secrets").ok().out)
    assert [(row["NAME"], row["TYPE"], row["DATA"]) for row in rows] == [("userdata", "Opaque", "1")]
    encoded = kubectl("-n", NS, "get", "secret", "userdata", "-o", "jsonpath={.data.userdata}").ok().out
    assert base64.b64decode(encoded) == b"#cloud-config"

    out = kubectl("-n", NS, "get", "cm,secret").ok().out
    names = [line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith("NAME")]
    assert "configmap/answers" in names and "secret/userdata" in names, out


def test_invalid_key_is_rejected_by_the_server(server, kubectl):
    manifest = server.write("bad-cm.yaml", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad", "namespace": NS},
        "data": {"a b": "1"},
    })
    r = kubectl("create", "-f", str(manifest)).failed()
    assert ('The ConfigMap "bad" is invalid: data[a b]: Invalid value: "a b": '
            "a valid config key must consist of alphanumeric characters") in r.err, r


def test_immutable_configmap_refuses_changes(server, kubectl):
    manifest = server.write("frozen.yaml", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen", "namespace": NS},
        "immutable": True, "data": {"unattend.xml": "<v1/>"},
    })
    assert kubectl("apply", "-f", str(manifest)).ok().out.strip() == "configmap/frozen created"
    r = kubectl("-n", NS, "patch", "configmap", "frozen", "-p", '{"data":{"unattend.xml":"<v2/>"}}').failed()
    assert 'The ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set' in r.err, r
    # Labels still change.
    kubectl("-n", NS, "label", "configmap", "frozen", "os=windows").ok()


def test_apply_secret_string_data_then_delete(server, kubectl):
    manifest = {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sysprep", "namespace": NS},
        "stringData": {"unattend.xml": "<v1/>"},
    }
    path = server.write("secret.yaml", manifest)
    assert kubectl("apply", "-f", str(path)).ok().out.strip() == "secret/sysprep created"
    manifest["stringData"]["unattend.xml"] = "<v2/>"
    path = server.write("secret.yaml", manifest)
    assert kubectl("apply", "-f", str(path)).ok().out.strip() == "secret/sysprep configured"
    encoded = kubectl("-n", NS, "get", "secret", "sysprep", "-o", "jsonpath={.data.unattend\\.xml}").ok().out
    assert base64.b64decode(encoded) == b"<v2/>"
    r = kubectl("-n", NS, "delete", "secret", "sysprep").ok()
    assert r.out.strip() == 'secret "sysprep" deleted'
    r = kubectl("-n", NS, "get", "secret", "sysprep").failed()
    assert 'secrets "sysprep" not found' in r.err, r
