//! `virtplane image-upload`: virtctl's image-upload against virtplane. Creates a
//! DataVolume with an upload source (or takes an existing one), waits until it is
//! UploadReady, asks for an upload token (`UploadTokenRequest`), streams the image to the
//! upload proxy with a progress bar, and waits until the DataVolume is imported,
//! printing what virtctl prints.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use kube::api::PostParams;
use kube::Api;
use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::cdi::Phase;
use serde_json::{json, Value};

/// virtctl's `uploadReadyWaitInterval`/`processingWaitInterval`, shortened.
const POLL: Duration = Duration::from_millis(500);
/// virtctl's `processingWaitTotal`.
const PROCESSING_WAIT: Duration = Duration::from_secs(24 * 3600);
const ASYNC_PATH: &str = "/v1beta1/upload-async";
const SYNC_PATH: &str = "/v1beta1/upload";
/// How many times an expired token is replaced during retries (virtctl's).
const TOKEN_REFRESHES: u32 = 3;
const READ_CHUNK: usize = 256 << 10;

#[derive(clap::Args)]
pub struct ImageUploadArgs {
    /// `dv`: upload into a DataVolume, created unless `--no-create` (`pvc`, a bare claim,
    /// is not supported: virtplane fills claims through DataVolumes).
    kind: String,
    /// The DataVolume's name (its claim has the same one).
    name: String,
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The size of the DataVolume to create (ex. 10Gi, 500Mi).
    #[arg(long)]
    size: Option<String>,
    /// Path to the local VM image (raw or qcow2, plain, .gz or .xz).
    #[arg(long)]
    image_path: Option<PathBuf>,
    /// Path to a local archive (refused: virtplane has no archive uploads).
    #[arg(long)]
    archive_path: Option<PathBuf>,
    /// The storage class of the claim.
    #[arg(long)]
    storage_class: Option<String>,
    /// The access mode of the claim (ReadWriteOnce, ReadWriteMany).
    #[arg(long)]
    access_mode: Option<String>,
    /// `block` or `filesystem` (default: the StorageProfile's).
    #[arg(long)]
    volume_mode: Option<String>,
    /// Don't create the DataVolume: upload into an existing one.
    #[arg(long)]
    no_create: bool,
    /// Don't verify the upload proxy's certificate.
    #[arg(long)]
    insecure: bool,
    /// The URL of the upload proxy (default: CDIConfig config's, else the API server).
    #[arg(long = "uploadproxy-url")]
    uploadproxy_url: Option<String>,
    /// Seconds to wait for the DataVolume to be ready for the upload.
    #[arg(long, default_value_t = 300)]
    wait_secs: u64,
    /// How many times a transfer that broke off is tried again.
    #[arg(long, default_value_t = 5)]
    retry: u32,
    /// Bind the claim now even if its storage class waits for a first consumer.
    #[arg(long)]
    force_bind: bool,
}

fn data_volumes(client: kube::Client, namespace: &str) -> Api<DataVolume> {
    Api::namespaced(client, namespace)
}

/// virtctl's argument checks, then the upload.
pub async fn run(args: ImageUploadArgs) -> anyhow::Result<()> {
    match args.kind.to_ascii_lowercase().as_str() {
        "dv" => {}
        "pvc" => bail!(
            "image-upload pvc: virtplane fills claims through DataVolumes; use `image-upload dv {}` (its claim gets the same name)",
            args.name
        ),
        other => bail!("invalid resource type {other}"),
    }
    if args.archive_path.is_some() {
        if args.image_path.is_some() {
            bail!("cannot handle both image-path and archive-path, provide only one");
        }
        bail!("--archive-path: virtplane does not support archive uploads; upload a disk image with --image-path");
    }
    let Some(image_path) = args.image_path.clone() else {
        bail!("either image-path or archive-path must be provided");
    };
    let volume_mode = match args.volume_mode.as_deref() {
        None | Some("") => None,
        Some("block") => Some("Block"),
        Some("filesystem") => Some("Filesystem"),
        Some(other) => {
            bail!("Invalid volume mode '{other}'. Valid values are 'block' and 'filesystem'.")
        }
    };
    if args.access_mode.as_deref() == Some("ReadOnlyMany") {
        bail!("cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany if supported");
    }
    let file = tokio::fs::File::open(&image_path)
        .await
        .with_context(|| format!("cannot open {}", image_path.display()))?;
    let length = file
        .metadata()
        .await
        .with_context(|| format!("cannot read {}", image_path.display()))?
        .len();
    drop(file);

    let config = crate::admin::config(args.kubeconfig.as_deref()).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config.clone()).context("cannot build an API client")?;
    let dvs = data_volumes(client.clone(), &namespace);
    let name = args.name.as_str();
    match dvs
        .get_opt(name)
        .await
        .with_context(|| format!("reading DataVolume {namespace}/{name}"))?
    {
        Some(dv) => {
            if !dv.is_upload() {
                bail!("DataVolume {namespace}/{name} is not available for upload: its source is not upload");
            }
            match dv.phase() {
                Phase::Succeeded => bail!(
                    "DataVolume {namespace}/{name} already successfully imported/cloned/updated"
                ),
                Phase::Failed => bail!(
                    "DataVolume {namespace}/{name} failed: {}",
                    dv.failure_message()
                ),
                _ => {}
            }
            println!("Using existing DataVolume {namespace}/{name}");
        }
        None if args.no_create => {
            bail!("DataVolume {namespace}/{name} not found (--no-create uploads into an existing one)")
        }
        None => {
            let Some(size) = args.size.as_deref() else {
                bail!("when creating a resource, the size must be specified");
            };
            let dv = data_volume(name, size, &args, volume_mode);
            let dv: DataVolume = serde_json::from_value(dv)?;
            match dvs.create(&PostParams::default(), &dv).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) => {
                    bail!("creating DataVolume {namespace}/{name}: {}", status.message)
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating DataVolume {namespace}/{name}"))
                }
            }
            println!("DataVolume {namespace}/{name} created");
        }
    }
    wait_upload_ready(&dvs, &namespace, name, &args).await?;

    let proxy = match &args.uploadproxy_url {
        Some(url) => url.clone(),
        None => configured_proxy(&client)
            .await?
            .unwrap_or_else(|| config.cluster_url.to_string()),
    };
    let proxy = if proxy.contains("://") {
        proxy
    } else {
        format!("https://{proxy}")
    };
    let proxy = proxy.trim_end_matches('/').to_string();
    println!("Uploading data to {proxy}");
    let http = upload_client(&config, args.insecure)?;
    let token = upload_token(&client, &namespace, name).await?;
    transfer(
        &http,
        &proxy,
        &client,
        &namespace,
        name,
        token,
        &image_path,
        length,
        args.retry,
    )
    .await?;
    println!("Uploading data completed successfully, waiting for processing to complete, you can hit ctrl-c without interrupting the progress");
    wait_processed(&dvs, &namespace, name).await?;
    println!("Uploading {} completed successfully", image_path.display());
    Ok(())
}

/// The DataVolume virtctl creates: an upload source and `spec.storage` with the size.
fn data_volume(name: &str, size: &str, args: &ImageUploadArgs, volume_mode: Option<&str>) -> Value {
    let mut storage = json!({"resources": {"requests": {"storage": size}}});
    if let Some(class) = &args.storage_class {
        storage["storageClassName"] = json!(class);
    }
    if let Some(mode) = &args.access_mode {
        storage["accessModes"] = json!([mode]);
    }
    if let Some(mode) = volume_mode {
        storage["volumeMode"] = json!(mode);
    }
    let mut annotations = json!({});
    if args.force_bind {
        annotations["cdi.kubevirt.io/storage.bind.immediate.requested"] = json!("");
    }
    json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"source": {"upload": {}}, "contentType": "kubevirt", "storage": storage},
    })
}

async fn wait_upload_ready(
    dvs: &Api<DataVolume>,
    namespace: &str,
    name: &str,
    args: &ImageUploadArgs,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(args.wait_secs);
    let mut told = false;
    loop {
        let dv = dvs
            .get_opt(name)
            .await
            .with_context(|| format!("reading DataVolume {namespace}/{name}"))?;
        let phase = dv.as_ref().map_or(Phase::Unset, DataVolume::phase);
        match phase {
            Phase::UploadReady => {
                if told {
                    println!("DataVolume {name} is ready for upload");
                }
                return Ok(());
            }
            Phase::WaitForFirstConsumer | Phase::PendingPopulation if !args.force_bind => bail!(
                "cannot upload to DataVolume in {phase} phase, make sure the PVC is Bound, or use force-bind flag"
            ),
            Phase::Succeeded => bail!("DataVolume {namespace}/{name} already successfully imported/cloned/updated"),
            Phase::Failed => {
                let why = dv.as_ref().map(DataVolume::failure_message).unwrap_or_default();
                bail!("DataVolume {namespace}/{name} failed: {why}")
            }
            _ => {}
        }
        if !told {
            println!("Waiting for DataVolume {name} to be ready for upload...");
            told = true;
        }
        if Instant::now() >= deadline {
            bail!(
                "DataVolume {namespace}/{name} was not ready for upload within {}s (phase {})",
                args.wait_secs,
                if phase == Phase::Unset {
                    "none yet"
                } else {
                    phase.as_str()
                }
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Where CDIConfig `config` says the upload proxy is, if anywhere.
async fn configured_proxy(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let request =
        http::Request::get("/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config").body(Vec::new())?;
    let config: Value = match client.request(request).await {
        Ok(config) => config,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(e) => return Err(e).context("reading CDIConfig config"),
    };
    let url = |pointer| {
        config
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
    };
    Ok(url("/spec/uploadProxyURLOverride").or_else(|| url("/status/uploadProxyURL")))
}

/// An HTTPS client that trusts the kubeconfig's CA (the server's certificate is signed by
/// the cluster CA) besides the system's.
fn upload_client(config: &kube::Config, insecure: bool) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder();
    let cas = config
        .root_cert
        .iter()
        .flatten()
        .map(|der| reqwest::Certificate::from_der(der))
        .collect::<Result<Vec<_>, _>>()
        .context("the kubeconfig's certificate-authority-data is not a certificate")?;
    if !cas.is_empty() {
        builder = builder.tls_certs_merge(cas);
    }
    if insecure || config.accept_invalid_certs {
        builder = builder.danger_accept_invalid_certs(true);
    }
    builder.build().context("cannot build the upload client")
}

/// An upload token for the claim, from an UploadTokenRequest.
async fn upload_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let body = json!({"apiVersion": "upload.cdi.kubevirt.io/v1beta1", "kind": "UploadTokenRequest",
                      "metadata": {"generateName": "token-for-virtplane-"},
                      "spec": {"pvcName": name}});
    let request = http::Request::post(format!(
        "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{namespace}/uploadtokenrequests"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(serde_json::to_vec(&body)?)?;
    let answer: Value = match client.request(request).await {
        Ok(answer) => answer,
        Err(kube::Error::Api(status)) => bail!("requesting an upload token: {}", status.message),
        Err(e) => return Err(e).context("requesting an upload token"),
    };
    answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .context("the UploadTokenRequest came back without status.token")
}

/// How one attempt at the transfer ended.
enum Attempt {
    Done,
    /// The proxy answered with this status and text.
    Refused(reqwest::StatusCode, String),
    /// The connection broke: worth another try.
    Broken(reqwest::Error),
}

/// virtctl's `uploadData`: the async endpoint if the proxy has it (a HEAD answered 200),
/// the image as the body with a progress bar, tried again when the connection breaks and
/// with a fresh token when the old one expired.
#[allow(clippy::too_many_arguments)]
async fn transfer(
    http: &reqwest::Client,
    proxy: &str,
    client: &kube::Client,
    namespace: &str,
    name: &str,
    mut token: String,
    image_path: &std::path::Path,
    length: u64,
    retries: u32,
) -> anyhow::Result<()> {
    let async_url = format!("{proxy}{ASYNC_PATH}");
    let probe = http.head(&async_url).bearer_auth(&token).send().await;
    let url = match probe {
        Ok(r) if r.status() == reqwest::StatusCode::OK => async_url,
        _ => format!("{proxy}{SYNC_PATH}"),
    };
    let bar = indicatif::ProgressBar::new(length);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bytes}/{total_bytes} [{wide_bar}] {percent}% {binary_bytes_per_sec} {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let mut refreshes = TOKEN_REFRESHES;
    let attempts = retries.max(1);
    let mut attempt = 0;
    loop {
        bar.set_position(0);
        let outcome = send(http, &url, &token, image_path, length, &bar).await?;
        attempt += 1;
        match outcome {
            Attempt::Done => break,
            Attempt::Refused(code, text) if code == reqwest::StatusCode::UNAUTHORIZED => {
                // On the first try a 401 is not an expired token.
                if attempt == 1 || refreshes == 0 || attempt >= attempts {
                    end(&bar, false);
                    bail!(
                        "authentication failed: unexpected return value {}, {text}",
                        code.as_u16()
                    );
                }
                token = upload_token(client, namespace, name).await?;
                refreshes -= 1;
            }
            Attempt::Refused(code, text) => {
                end(&bar, false);
                bail!("unexpected return value {}, {text}", code.as_u16());
            }
            Attempt::Broken(e) if attempt >= attempts => {
                end(&bar, false);
                return Err(anyhow::Error::new(e))
                    .with_context(|| format!("error uploading image after {attempts} retries"));
            }
            Attempt::Broken(e) => {
                tracing::debug!("upload attempt {attempt} broke off: {e}");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
        }
    }
    end(&bar, true);
    Ok(())
}

/// Leaves the bar as it stands, on a line of its own.
fn end(bar: &indicatif::ProgressBar, done: bool) {
    if done {
        bar.finish();
    } else {
        bar.abandon();
    }
    if !bar.is_hidden() {
        eprintln!();
    }
}

async fn send(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    image_path: &std::path::Path,
    length: u64,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Attempt> {
    let file = tokio::fs::File::open(image_path)
        .await
        .with_context(|| format!("cannot open {}", image_path.display()))?;
    let progress = bar.clone();
    let stream =
        tokio_util::io::ReaderStream::with_capacity(file, READ_CHUNK).inspect(move |chunk| {
            if let Ok(bytes) = chunk {
                progress.inc(bytes.len() as u64);
            }
        });
    let response = http
        .post(url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .header(reqwest::header::CONTENT_LENGTH, length)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    Ok(match response {
        Ok(r) if r.status() == reqwest::StatusCode::OK => Attempt::Done,
        Ok(r) => {
            let code = r.status();
            let text = r.text().await.unwrap_or_default();
            Attempt::Refused(code, text)
        }
        Err(e) => Attempt::Broken(e),
    })
}

/// Waits until the DataVolume is imported; a failure is an error with its reason.
async fn wait_processed(dvs: &Api<DataVolume>, namespace: &str, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PROCESSING_WAIT;
    loop {
        let dv = dvs
            .get_opt(name)
            .await
            .with_context(|| format!("reading DataVolume {namespace}/{name}"))?;
        let Some(dv) = dv else {
            bail!("DataVolume {namespace}/{name} was deleted before its upload was processed");
        };
        match dv.phase() {
            Phase::Succeeded => {
                println!("Processing completed successfully");
                return Ok(());
            }
            Phase::Failed => bail!(
                "Processing failed: DataVolume {namespace}/{name} failed: {}",
                dv.failure_message()
            ),
            _ => {}
        }
        if Instant::now() >= deadline {
            bail!("Timed out waiting for post upload processing to complete, please check DataVolume {namespace}/{name}");
        }
        tokio::time::sleep(POLL).await;
    }
}
