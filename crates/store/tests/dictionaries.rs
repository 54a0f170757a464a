//! The in-memory store packs the values of one resource against a dictionary: the first
//! value stored under its prefix, made once and handed to a durable backend with the batch.

use bytes::Bytes;
use store::{MemoryStore, Store, WriteOp};

#[tokio::test]
async fn values_of_a_class_are_packed_against_its_first_value() {
    let store = MemoryStore::new();
    let vm = |name: &str| {
        Bytes::from(format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"runStrategy":"Always","template":{{"spec":{{"domain":{{"devices":{{"disks":[{{"name":"root"}}]}}}},"volumes":[{{"name":"root","containerDisk":{{"image":"quay.io/containerdisks/fedora:40"}}}},{{"name":"cloudinit","cloudInitNoCloud":{{"userData":"cloud-config\\nuser: fedora\\npassword: fedora\\nchpasswd: {{ expire: False }}\\n"}}}}]}}}}}}}}"#
        ))
    };
    let small = Bytes::from_static(b"{}");
    store
        .create("/registry/g/small/ns/a", small.clone())
        .await
        .unwrap();
    let batch = store.stage(vec![
        WriteOp::Create {
            key: "/registry/g/vms/ns/a".into(),
            value: vm("a"),
        },
        WriteOp::Create {
            key: "/registry/g/vms/ns/b".into(),
            value: vm("b"),
        },
    ]);
    // One dictionary for the class, made of the first value; none for tiny values.
    let made = batch.new_dictionaries().to_vec();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].class, "/registry/g/vms/");
    assert_eq!(&made[0].bytes[..], &vm("a")[..]);
    let packed_b = batch.changes()[1].kv.value.as_bytes().len();
    assert!(packed_b < vm("b").len() / 4, "{packed_b} bytes");
    store.commit(batch).unwrap();
    // Later batches use it and make no other.
    let batch = store.stage(vec![WriteOp::Create {
        key: "/registry/g/vms/other/c".into(),
        value: vm("c"),
    }]);
    assert!(batch.new_dictionaries().is_empty());
    store.commit(batch).unwrap();
    for (key, value) in [("a", vm("a")), ("b", vm("b"))] {
        let kv = store
            .get(&format!("/registry/g/vms/ns/{key}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kv.value, value);
    }
    let kv = store.get("/registry/g/vms/other/c").await.unwrap().unwrap();
    assert_eq!(kv.value, vm("c"));
    assert_eq!(
        store
            .get("/registry/g/small/ns/a")
            .await
            .unwrap()
            .unwrap()
            .value,
        small
    );
}
