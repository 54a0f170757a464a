"""Logs as JSON (`--log-format json`): every line is one JSON object; each API request's
`HTTP` line (at debug) names the audit ID the response carried, and lines about a VMI name
its namespace, name (`vmi`) and uid. The server runs its local node with simulated guests."""

import json
import os

import pytest

from conftest import Server, vm_manifest, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    saved = os.environ.get("RUST_LOG")
    os.environ["RUST_LOG"] = "warn,apiserver::http=debug,node_agent::vmi=debug"
    srv = Server(tmp_path_factory.mktemp("virtplane-logs"),
                 ("--hypervisor", "sim", "--log-format", "json"))
    try:
        srv.start()
    finally:
        if saved is None:
            os.environ.pop("RUST_LOG")
        else:
            os.environ["RUST_LOG"] = saved
    yield srv
    srv.stop()


def log_lines(server):
    lines = [l for l in server.log.read_text().splitlines() if l.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a log line is not JSON: {line!r}")
    return parsed


def spans_with(line, name):
    return [s for s in line.get("spans", []) if s.get("name") == name]


def test_request_lines_carry_their_audit_id(server):
    reply = server.raw("GET", "/api/v1/namespaces/default/configmaps")
    assert reply.status == 200
    audit_id = reply.headers["Audit-Id"]

    def logged():
        return [l for l in log_lines(server)
                if l.get("fields", {}).get("message") == "HTTP"
                and any(s.get("audit_id") == audit_id for s in spans_with(l, "request"))]
    found = wait_until(logged, what=f"the HTTP line of request {audit_id}")
    fields = found[0]["fields"]
    assert fields["verb"] == "GET", found
    assert fields["uri"].endswith("/api/v1/namespaces/default/configmaps"), found
    assert fields["code"] == 200, found
    assert found[0]["level"] == "DEBUG", found


def test_vmi_lines_name_the_vmi(server):
    server.kubectl("apply", "-f", str(server.write("logged.yaml", vm_manifest("logged", "Always")))).ok()

    def running():
        reply = server.raw("GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/logged")
        return reply.status == 200 and reply.json().get("status", {}).get("phase") == "Running" and reply.json()
    vmi = wait_until(running, what="logged Running")
    uid = vmi["metadata"]["uid"]

    def about_the_vmi():
        return [l for l in log_lines(server)
                if any(s.get("uid") == uid for s in spans_with(l, "vmi"))]
    lines = wait_until(about_the_vmi, what=f"log lines in the span of VMI {uid}")
    span = spans_with(lines[0], "vmi")[0]
    assert (span["namespace"], span["vmi"]) == ("default", "logged"), lines[0]
    assert any("sync: phase" in l["fields"].get("message", "") for l in lines), lines[:3]
