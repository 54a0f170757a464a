//! The store over HTTPS to an etcd that requires client certificates
//! (--etcd-cafile/--etcd-certfile/--etcd-keyfile), and refused without one.

use std::path::Path;

use bytes::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use store::Store;
use store_etcd::testing::{etcd_or_skip, EtcdServer, ServerTls};
use store_etcd::{EtcdStore, TlsFiles};

/// Writes a CA and a certificate it signed (for 127.0.0.1, with `usage`) under `dir`.
fn issue(dir: &Path, name: &str, usage: ExtendedKeyUsagePurpose) -> (String, String, String) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, &ca_key);
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("names");
    leaf.distinguished_name.push(DnType::CommonName, name);
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("certificate");
    let write = |file: &str, pem: String| {
        let path = dir.join(format!("{name}-{file}"));
        std::fs::write(&path, pem).expect("write PEM");
        path.display().to_string()
    };
    (
        write("ca.pem", ca_cert.pem()),
        write("cert.pem", cert.pem()),
        write("key.pem", key.serialize_pem()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates() {
    let Some(binary) = etcd_or_skip("store-etcd tls") else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let (server_ca, server_cert, server_key) =
        issue(dir.path(), "server", ExtendedKeyUsagePurpose::ServerAuth);
    let (client_ca, client_cert, client_key) =
        issue(dir.path(), "client", ExtendedKeyUsagePurpose::ClientAuth);
    let client = TlsFiles {
        ca_file: Some(server_ca.clone().into()),
        cert_file: Some(client_cert.into()),
        key_file: Some(client_key.into()),
    };
    let etcd = EtcdServer::start_tls(
        &binary,
        ServerTls {
            cert_file: server_cert.into(),
            key_file: server_key.into(),
            client_ca_file: client_ca.into(),
            client,
        },
    )
    .await;
    assert!(etcd.url.starts_with("https://"));

    let store = EtcdStore::connect(etcd.config("/tls"))
        .await
        .expect("connect with client certificate");
    let created = store
        .create("/k", Bytes::from_static(b"v"))
        .await
        .expect("create over TLS");
    assert_eq!(store.get("/k").await, Ok(Some(created)));

    let mut anonymous = etcd.config("/tls");
    anonymous.tls = TlsFiles {
        ca_file: Some(server_ca.into()),
        ..TlsFiles::default()
    };
    assert!(
        EtcdStore::connect(anonymous).await.is_err(),
        "etcd with --client-cert-auth must refuse a client without a certificate"
    );
}
