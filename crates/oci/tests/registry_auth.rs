//! Pulls from Debian's `docker-registry` (distribution 2.8) on loopback, behind htpasswd
//! basic auth and behind a token service the test runs (`oci::testing`), as public
//! registries answer: credentials from a dockerconfigjson Secret, none, wrong ones;
//! tokens reused until they expire and replaced when refused; multi-arch indexes; pinned
//! digests; 404s. Skipped loudly without docker-registry (a failure under CI or
//! `VIRTPLANE_REQUIRE_QEMU=1`).

use std::time::Duration;

use oci::testing::{docker_config_secret, registry_or_skip, Auth, AuthRegistry};
use oci::{
    Config, Credentials, Keyring, Platform, PullError, PullOptions, PullPolicy, Puller, Reference,
    Retry,
};

const AMD64_DISK: &[u8] = b"the amd64 disk";
const ARM64_DISK: &[u8] = b"the arm64 disk";

fn users() -> Vec<(String, String)> {
    vec![("alice".into(), "s3cret".into())]
}

fn puller(cache: &std::path::Path, insecure: &str) -> Puller {
    Puller::new(Config {
        cache: cache.to_path_buf(),
        insecure_registries: vec![insecure.to_string()],
        retry: Retry {
            attempts: 3,
            first_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(200),
        },
        platform: Platform::new("linux", "amd64"),
    })
}

/// The credentials an imagePullSecret for `registry` holds, read as the kubelet does.
fn from_secret(registry: &str, user: &str, password: &str, image: &str) -> Vec<Credentials> {
    let (kind, data) = docker_config_secret(registry, user, password);
    Keyring::from_secret(kind, &data)
        .expect("a dockerconfigjson secret")
        .lookup(&Reference::parse(image).expect("image"))
}

fn with(credentials: Vec<Credentials>, policy: PullPolicy) -> PullOptions {
    PullOptions {
        credentials,
        policy,
        ca_bundle: None,
        progress: None,
    }
}

async fn disk(puller: &Puller, image: &str, options: &PullOptions) -> Result<Vec<u8>, PullError> {
    let pulled = puller.pull_disk(image, options, None).await?;
    Ok(std::fs::read(&pulled.path).expect("the pulled disk"))
}

fn assert_words(message: &str, words: &[&str]) {
    for w in words {
        assert!(message.contains(w), "{w:?} missing from {message:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_registry() {
    let Some(binary) = registry_or_skip("basic_auth_registry") else {
        return;
    };
    let registry = AuthRegistry::start(&binary, Auth::Basic { users: users() }).await;
    let address = registry.address.clone();
    registry
        .push_image(
            "private/guest",
            "v1",
            &[("disk/disk.img", AMD64_DISK)],
            "amd64",
        )
        .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &address);
    let image = format!("{address}/private/guest:v1");

    let anonymous = disk(&puller, &image, &with(vec![], PullPolicy::Always))
        .await
        .unwrap_err();
    assert!(
        matches!(anonymous, PullError::Unauthorized { .. }),
        "{anonymous:?}"
    );
    assert_words(
        &anonymous.to_string(),
        &[
            "unauthorized: authentication required",
            &address,
            &image,
            "anonymous",
        ],
    );

    let wrong = from_secret(&address, "alice", "wrong", &image);
    assert_eq!(wrong.len(), 1);
    let refused = disk(&puller, &image, &with(wrong.clone(), PullPolicy::Always))
        .await
        .unwrap_err();
    assert_words(
        &refused.to_string(),
        &["unauthorized: authentication required", &image, "\"alice\""],
    );

    let right = from_secret(&address, "alice", "s3cret", &image);
    assert_eq!(
        disk(&puller, &image, &with(right.clone(), PullPolicy::Always))
            .await
            .unwrap(),
        AMD64_DISK
    );
    // Credentials are tried in turn, as the kubelet does: a stale one first is no harm.
    let both = [wrong, right.clone()].concat();
    assert_eq!(
        disk(&puller, &image, &with(both, PullPolicy::Always))
            .await
            .unwrap(),
        AMD64_DISK
    );

    let missing = format!("{address}/private/guest:nope");
    let unknown = disk(&puller, &missing, &with(right, PullPolicy::Always))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, PullError::ManifestUnknown { .. }),
        "{unknown:?}"
    );
    assert_words(
        &unknown.to_string(),
        &[
            "manifest unknown",
            &missing,
            "tag \"nope\"",
            "private/guest",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_registry() {
    let Some(binary) = registry_or_skip("token_registry") else {
        return;
    };
    let mut registry = AuthRegistry::start(
        &binary,
        Auth::Token {
            users: users(),
            public: vec!["public/".into()],
        },
    )
    .await;
    let address = registry.address.clone();
    registry
        .push_image(
            "public/guest",
            "v1",
            &[("disk/disk.img", AMD64_DISK)],
            "amd64",
        )
        .await;
    registry
        .push_image(
            "private/guest",
            "v1",
            &[("disk/disk.img", AMD64_DISK)],
            "amd64",
        )
        .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &address);
    let always = with(vec![], PullPolicy::Always);

    // Anonymous token flow for a public repository; the token is reused.
    let public = format!("{address}/public/guest:v1");
    assert_eq!(disk(&puller, &public, &always).await.unwrap(), AMD64_DISK);
    assert_eq!(registry.token_requests(), 1);
    assert_eq!(disk(&puller, &public, &always).await.unwrap(), AMD64_DISK);
    assert_eq!(
        registry.token_requests(),
        1,
        "a second pull asked for a new token"
    );
    assert_eq!(
        registry.token_log()[0],
        (None, None),
        "an anonymous token request"
    );

    // A private repository: an anonymous token has no access.
    let private = format!("{address}/private/guest:v1");
    let anonymous = disk(&puller, &private, &always).await.unwrap_err();
    assert!(
        matches!(anonymous, PullError::Unauthorized { .. }),
        "{anonymous:?}"
    );
    assert_words(
        &anonymous.to_string(),
        &[
            "unauthorized: authentication required",
            &address,
            &private,
            "pull access denied",
        ],
    );
    // Wrong credentials: the token service refuses them.
    let wrong = with(
        from_secret(&address, "alice", "nope", &private),
        PullPolicy::Always,
    );
    let refused = disk(&puller, &private, &wrong).await.unwrap_err();
    assert_words(
        &refused.to_string(),
        &[
            "unauthorized: authentication required",
            &private,
            "\"alice\"",
            "token service",
            "401",
            "incorrect username or password",
        ],
    );
    let right = with(
        from_secret(&address, "alice", "s3cret", &private),
        PullPolicy::Always,
    );
    let before = registry.token_requests();
    assert_eq!(disk(&puller, &private, &right).await.unwrap(), AMD64_DISK);
    assert_eq!(registry.token_requests(), before + 1);
    let last = registry.token_log().last().cloned().unwrap();
    assert_eq!(
        last,
        (Some("alice".into()), Some("Basic".into())),
        "credentials go to the realm"
    );
    // The anonymous token for this repository is not the user's: a pull without
    // credentials is still refused.
    assert!(disk(&puller, &private, &always).await.is_err());

    // A token lives as long as `expires_in` says.
    registry.set_token_lifetime(2);
    let short = format!("{address}/public/short:v1");
    registry
        .push_image(
            "public/short",
            "v1",
            &[("disk/disk.img", AMD64_DISK)],
            "amd64",
        )
        .await;
    let before = registry.token_requests();
    disk(&puller, &short, &always).await.unwrap();
    disk(&puller, &short, &always).await.unwrap();
    assert_eq!(registry.token_requests(), before + 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    disk(&puller, &short, &always).await.unwrap();
    assert_eq!(
        registry.token_requests(),
        before + 2,
        "an expired token was reused"
    );
    registry.set_token_lifetime(300);

    // A cached token the registry refuses (its signing key was rotated) is replaced.
    registry.rotate_signing_key().await;
    let before = registry.token_requests();
    assert_eq!(disk(&puller, &public, &always).await.unwrap(), AMD64_DISK);
    assert_eq!(
        registry.token_requests(),
        before + 1,
        "the refused token was not replaced"
    );

    let missing = format!("{address}/public/guest:nope");
    let unknown = disk(&puller, &missing, &always).await.unwrap_err();
    assert_words(
        &unknown.to_string(),
        &["manifest unknown", &missing, "tag \"nope\""],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_arch_indexes() {
    let Some(binary) = registry_or_skip("multi_arch_indexes") else {
        return;
    };
    let registry = AuthRegistry::start(
        &binary,
        Auth::Token {
            users: users(),
            public: vec![],
        },
    )
    .await;
    let address = registry.address.clone();
    let amd = registry
        .push_image("multi/guest", "", &[("disk/disk.img", AMD64_DISK)], "amd64")
        .await;
    let arm = registry
        .push_image("multi/guest", "", &[("disk/disk.img", ARM64_DISK)], "arm64")
        .await;
    registry
        .push_index("multi/guest", "both", &[(&arm, "arm64"), (&amd, "amd64")])
        .await;
    registry
        .push_index("multi/guest", "arm-only", &[(&arm, "arm64")])
        .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &address);
    let image = format!("{address}/multi/guest:both");
    let options = with(
        from_secret(&address, "alice", "s3cret", &image),
        PullPolicy::Always,
    );

    let pulled = puller.pull_disk(&image, &options, None).await.unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), AMD64_DISK);
    assert_eq!(
        pulled.digest, amd.digest,
        "the amd64 manifest, not the index"
    );
    assert_eq!(
        pulled.image_id,
        format!("{address}/multi/guest@{}", amd.digest)
    );

    let arm_only = format!("{address}/multi/guest:arm-only");
    let wrong_arch = disk(&puller, &arm_only, &options).await.unwrap_err();
    assert!(
        matches!(wrong_arch, PullError::Platform { .. }),
        "{wrong_arch:?}"
    );
    assert_eq!(
        wrong_arch.to_string(),
        format!("{address}/multi/guest:arm-only: the image index has no entry for linux/amd64 (it has linux/arm64)")
    );
    // An arm64 node takes the other entry.
    let arm_cache = tempfile::tempdir().unwrap();
    let arm_puller = Puller::new(Config {
        platform: Platform::new("linux", "arm64"),
        ..Config::new(arm_cache.path().to_path_buf(), vec![address.clone()])
    });
    assert_eq!(
        disk(&arm_puller, &image, &options).await.unwrap(),
        ARM64_DISK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_are_pinned_after_the_first_pull() {
    let Some(binary) = registry_or_skip("digests_are_pinned_after_the_first_pull") else {
        return;
    };
    let registry = AuthRegistry::start(&binary, Auth::Basic { users: users() }).await;
    let address = registry.address.clone();
    let first = registry
        .push_image(
            "pinned/guest",
            "v1",
            &[("disk/disk.img", b"first")],
            "amd64",
        )
        .await;
    let cache = tempfile::tempdir().unwrap();
    let puller = puller(cache.path(), &address);
    let image = format!("{address}/pinned/guest:v1");
    let credentials = from_secret(&address, "alice", "s3cret", &image);
    let if_not_present = with(credentials.clone(), PullPolicy::IfNotPresent);
    let pulled = puller
        .pull_disk(&image, &if_not_present, None)
        .await
        .unwrap();
    assert_eq!(pulled.digest, first.digest);

    // The tag moves on; this node stays on what it pulled until asked to pull Always.
    let second = registry
        .push_image(
            "pinned/guest",
            "v1",
            &[("disk/disk.img", b"second")],
            "amd64",
        )
        .await;
    let again = puller
        .pull_disk(&image, &if_not_present, None)
        .await
        .unwrap();
    assert_eq!(
        (again.digest.as_str(), std::fs::read(&again.path).unwrap()),
        (first.digest.as_str(), b"first".to_vec())
    );
    let always = puller
        .pull_disk(&image, &with(credentials.clone(), PullPolicy::Always), None)
        .await
        .unwrap();
    assert_eq!(always.digest, second.digest);

    // The recorded image ID pulls exactly that image, from the cache, with the registry
    // gone.
    drop(registry);
    let pinned = puller
        .pull_disk(&pulled.image_id, &if_not_present, None)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&pinned.path).unwrap(), b"first");
    let never = with(vec![], PullPolicy::Never);
    let absent = format!("{address}/pinned/other:v1");
    let error = puller.pull_disk(&absent, &never, None).await.unwrap_err();
    assert_eq!(error.reason(), "ErrImageNeverPull");
    // Gone: a connection refused, tried again, then reported.
    let gone = puller
        .pull_disk(&image, &with(credentials, PullPolicy::Always), None)
        .await
        .unwrap_err();
    assert!(matches!(gone, PullError::Transport { .. }), "{gone:?}");
    assert_words(&gone.to_string(), &[&image, "after 3 tries"]);
}

/// A registry whose certificate comes from a private CA: trusted when the pull brings
/// the CA (as a DataVolume's certConfigMap does), refused with what to do otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_registry_with_a_ca_of_its_own() {
    let Some(binary) = registry_or_skip("https_registry_with_a_ca_of_its_own") else {
        return;
    };
    let registry = AuthRegistry::start_tls(&binary, Auth::Basic { users: users() }).await;
    let address = registry.address.clone();
    registry
        .push_image(
            "private/guest",
            "v1",
            &[("disk/disk.img", AMD64_DISK)],
            "amd64",
        )
        .await;
    let cache = tempfile::tempdir().unwrap();
    // Not an insecure registry: its certificate is checked.
    let puller = Puller::new(Config {
        platform: Platform::new("linux", "amd64"),
        ..Config::new(cache.path().to_path_buf(), vec![])
    });
    let image = format!("{address}/private/guest:v1");
    let mut options = with(
        from_secret(&address, "alice", "s3cret", &image),
        PullPolicy::Always,
    );
    let untrusted = disk(&puller, &image, &options).await.unwrap_err();
    assert_words(
        &untrusted.to_string(),
        &[&image, "certificate is not trusted", "SSL_CERT_FILE"],
    );
    options.ca_bundle = registry.ca_pem.clone().map(String::into_bytes);
    assert_eq!(disk(&puller, &image, &options).await.unwrap(), AMD64_DISK);
}
