//! The objects the benches store.
#![allow(dead_code)] // not every bench uses every helper

use serde_json::{json, Value};

/// A realistic VirtualMachine (about 1.5 KiB of JSON): labels, annotations, CPU/memory,
/// two disks, a masquerade interface, a containerDisk and a cloud-init seed.
pub fn vm(name: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": name,
            "labels": {
                "app": "bench",
                "kubevirt.io/os": "fedora",
                "tier": "backend",
                "team": "platform"
            },
            "annotations": {
                "description": "a benchmark VM",
                "kubevirt.io/latest-observed-api-version": "v1"
            }
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {
                    "labels": {"kubevirt.io/vm": name, "kubevirt.io/domain": name, "app": "bench"}
                },
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2, "sockets": 1, "threads": 1},
                        "memory": {"guest": "2Gi"},
                        "resources": {"requests": {"memory": "2Gi", "cpu": "500m"}},
                        "machine": {"type": "q35"},
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}},
                                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}}
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                            "rng": {}
                        }
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 180,
                    "evictionStrategy": "LiveMigrate",
                    "volumes": [
                        {"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:40"}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData":
                            "#cloud-config\nuser: fedora\npassword: fedora\nchpasswd: { expire: False }\nssh_authorized_keys:\n  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyBenchmarkKeyBenchmarkKeyXYZ bench@virtplane\npackages:\n  - qemu-guest-agent\nruncmd:\n  - [systemctl, enable, --now, qemu-guest-agent]\n"}}
                    ]
                }
            }
        }
    })
}
