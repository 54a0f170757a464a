"""The server's own metrics at /metrics, beside the request and KubeVirt series: the
store's commits, the watches it serves, each controller's work and the lease it holds.
The server runs its local node with simulated guests."""

import re

import pytest

from conftest import Server, vm_manifest, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("virtplane-server-metrics"), ("--hypervisor", "sim"))
    srv.start()
    yield srv
    srv.stop()


def samples(text, name):
    """{labels text: value} of the samples of metric `name`."""
    found = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            found[m.group(1) or ""] = float(m.group(2))
    return found


def test_store_watches_controllers_and_the_lease_are_measured(server):
    server.kubectl("apply", "-f", str(server.write("measured.yaml", vm_manifest("measured", "Always")))).ok()

    def running():
        reply = server.raw("GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/measured")
        return reply.status == 200 and reply.json().get("status", {}).get("phase") == "Running"
    wait_until(running, what="measured Running")

    def scraped():
        text = server.raw("GET", "/metrics").body.decode()
        vm_work = samples(text, "workqueue_work_duration_seconds_count")
        return text if any('name="virtualmachine"' in k and v > 0 for k, v in vm_work.items()) else None
    text = wait_until(scraped, what="the VM controller's work in /metrics")

    commits = samples(text, "virtplane_store_commit_duration_seconds_count")
    assert commits.get("", 0) > 0, commits
    writes = samples(text, "virtplane_store_commit_writes_sum")
    assert writes.get("", 0) >= commits[""], writes

    watchers = samples(text, "apiserver_registered_watchers")
    vmi_watchers = [v for k, v in watchers.items() if 'kind="VirtualMachineInstance"' in k]
    assert vmi_watchers and vmi_watchers[0] >= 1, watchers
    events = samples(text, "apiserver_watch_events_total")
    assert any('kind="VirtualMachine"' in k and v > 0 for k, v in events.items()), events

    leading = samples(text, "leader_election_master_status")
    assert leading.get('{name="virtplane-controller-manager"}') == 1.0, leading
    # Every wrapped controller has its series from the start, 0 until something happens.
    processing = samples(text, "virtplane_workqueue_processing")
    assert processing.get('{name="virtualmachine"}', -1) >= 0, processing
    retries = samples(text, "workqueue_retries_total")
    assert retries.get('{name="virtualmachine"}', -1) >= 0, retries
    assert '{name="launcher-pod"}' in samples(text, "workqueue_work_duration_seconds_count"), text[:2000]

    # The VMI's default interface (masquerade on the pod network), and its addresses.
    vnics = samples(text, "kubevirt_vmi_vnic_info")
    assert any('name="measured"' in k and 'vnic_name="default"' in k and 'binding_name="masquerade"' in k
               and 'network="pod networking"' in k for k in vnics), vnics
    vmi = server.get_json("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/measured")
    ips = [ip for i in vmi["status"].get("interfaces", []) for ip in i.get("ipAddresses", [])]
    assert ips, vmi["status"]  # the simulated node gives its Pods addresses too
    addresses = samples(text, "kubevirt_vmi_status_addresses")
    for ip in ips:
        assert any(f'address="{ip}"' in k and 'name="measured"' in k for k in addresses), (ip, addresses)


def test_what_each_vm_asks_for_is_measured(server):
    vm = vm_manifest("sized")
    domain = vm["spec"]["template"]["spec"]["domain"]
    domain["cpu"] = {"cores": 2, "sockets": 1, "threads": 1}
    domain["memory"] = {"guest": "128Mi"}
    domain["resources"] = {"requests": {"memory": "200Mi", "cpu": "500m"}, "limits": {"cpu": "2"}}
    server.kubectl("apply", "-f", str(server.write("sized.yaml", vm))).ok()
    text = server.raw("GET", "/metrics").text
    who = 'name="sized",namespace="default"'
    requests = samples(text, "kubevirt_vm_resource_requests")
    assert requests.get(f'{{{who},resource="memory",unit="bytes",source="guest"}}') == 128 * 2**20, requests
    assert requests.get(f'{{{who},resource="cpu",unit="cores",source="domain"}}') == 2, requests
    assert requests.get(f'{{{who},resource="memory",unit="bytes",source="requests"}}') == 200 * 2**20, requests
    assert requests.get(f'{{{who},resource="cpu",unit="cores",source="requests"}}') == 0.5, requests
    limits = samples(text, "kubevirt_vm_resource_limits")
    assert limits == {f'{{{who},resource="cpu",unit="cores"}}': 2}, limits
