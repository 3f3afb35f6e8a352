//! Remote object stores (`s3://`, `gs://`, `az://`), configured the way their
//! own tools are: from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).

use super::classify::Connector;
use super::retry::Policy;
use super::sse::Sse;
use crate::error::{Error, Result};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};
use std::sync::Arc;
use std::time::Duration;

/// Opens `scheme://bucket/prefix`. Nothing is requested from the store yet.
pub(super) fn open(
    url: &str,
    scheme: &str,
    rest: &str,
    policy: &Policy,
    sse: Option<&Sse>,
    lock: Option<Duration>,
) -> Result<Arc<dyn ObjectStore>> {
    if lock.is_some() && !matches!(scheme, "s3" | "s3a") {
        return Err(Error::InvalidInput(format!(
            "{url}: --object-lock is S3 Object Lock: it is asked of S3 stores only"
        )));
    }
    if sse.is_some() && !matches!(scheme, "s3" | "s3a") {
        return Err(Error::InvalidInput(format!(
            "{url}: server-side encryption (SSE) is asked of S3 stores only (GCS and Azure encrypt every object themselves)"
        )));
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/');
    if bucket.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{url}: no bucket; use {scheme}://BUCKET/PREFIX"
        )));
    }
    let bucket_url = format!("{scheme}://{bucket}");
    let timeout = humantime::format_duration(policy.request_timeout()).to_string();
    let connect = humantime::format_duration(CONNECT_TIMEOUT).to_string();
    // The same client settings for every service; each builder names them
    // with its own key type.
    // Every answer is classified (`classify`); S3 uploads are also checked
    // for the encryption asked.
    let lock = lock.map(|span| {
        let region = std::env::var("AWS_REGION")
            .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|_| "us-east-1".into());
        Arc::new(super::lock::Lock::new(span, region, prefix.to_string()))
    });
    let connector = Connector {
        sse: sse.map(Sse::header),
        lock: lock.clone(),
    };
    macro_rules! build {
        ($builder:expr, $key:path) => {
            Arc::new(
                $builder
                    .with_http_connector(connector)
                    .with_config($key(ClientConfigKey::Timeout), &timeout)
                    .with_config($key(ClientConfigKey::ConnectTimeout), &connect)
                    .with_retry(http_retry(policy))
                    .build()
                    .map_err(|e| super::failed(url, e))?,
            )
        };
    }
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env().with_url(bucket_url);
            // Plain http only when the configured endpoint asks for it.
            if b.get_config_value(&AmazonS3ConfigKey::Endpoint)
                .is_some_and(|e| e.starts_with("http://"))
            {
                b = b.with_allow_http(true);
            }
            if let Some(sse) = sse {
                let key = |k: &str| k.parse::<AmazonS3ConfigKey>().expect("a known key");
                b = b.with_config(key("aws_server_side_encryption"), sse.header());
                if let Sse::Kms(Some(id)) = sse {
                    b = b.with_config(key("aws_sse_kms_key_id"), id);
                }
            }
            let Some(lock) = lock else {
                return Ok(prefixed(build!(b, AmazonS3ConfigKey::Client), prefix));
            };
            // S3 asks a locked upload for its checksum.
            let s3 = b
                .with_checksum_algorithm(object_store::aws::Checksum::SHA256)
                .with_http_connector(connector)
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                    &timeout,
                )
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                    &connect,
                )
                .with_retry(http_retry(policy))
                .build()
                .map_err(|e| super::failed(url, e))?;
            let _ = lock.credentials.set(s3.credentials().clone());
            Arc::new(s3)
        }
        "gs" => build!(
            GoogleCloudStorageBuilder::from_env().with_url(bucket_url),
            GoogleConfigKey::Client
        ),
        "az" | "azure" | "abfs" | "abfss" => build!(
            MicrosoftAzureBuilder::from_env().with_url(bucket_url),
            AzureConfigKey::Client
        ),
        _ => {
            return Err(Error::InvalidInput(format!(
                "{url}: unsupported store scheme {scheme:?} (use a local path, file://, s3://, gs:// or az://)"
            )));
        }
    };
    Ok(prefixed(store, prefix))
}

fn prefixed(store: Arc<dyn ObjectStore>, prefix: &str) -> Arc<dyn ObjectStore> {
    match prefix.is_empty() {
        true => store,
        false => Arc::new(PrefixStore::new(store, prefix)),
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// object_store retries each HTTP request briefly (5xx, 429 SlowDown,
/// connection errors); longer outages are retried by `retry::Policy`, up to
/// the caller's deadline.
fn http_retry(policy: &Policy) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: policy.request_timeout(),
    }
}
