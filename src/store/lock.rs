//! S3 Object Lock in compliance mode (`--object-lock D`): every object
//! detafs never rewrites (packs, version records, tags, lifecycle entries,
//! policy records) is written with a retention date D from now, which no
//! one, root of the account included, can shorten or remove. The bucket's
//! own lock configuration is read before the first such write (a bucket
//! without one is refused, as an upload the service would not encrypt is),
//! and each locked upload is signed with the lock's headers in it
//! (object_store's own SigV4 signer: the headers join the signature).

#[cfg(feature = "cloud")]
use object_store::aws::{AwsAuthorizer, AwsCredentialProvider};
#[cfg(feature = "cloud")]
use object_store::client::{HttpClient, HttpError, HttpErrorKind, HttpRequest};
#[cfg(feature = "cloud")]
use std::sync::OnceLock;
#[cfg(feature = "cloud")]
use std::time::{Duration, SystemTime};

/// Marks an upload to be locked: the key as the store names it.
#[derive(Clone, Debug)]
pub struct Locked(pub String);

/// Whether an object at `key` is written once and never replaced nor
/// deleted but by gc: what a lock may hold.
pub fn lockable(key: &str) -> bool {
    use super::keys::Kind;
    match Kind::of(key) {
        Some(Kind::Pack | Kind::PolicyRecord) => true,
        Some(Kind::Dataset) => {
            key.ends_with("/dataset.json")
                || key.contains("/records/")
                || key.contains("/tags/")
                || key.contains("/lifecycle/")
        }
        _ => false,
    }
}

/// What a store's client needs to lock uploads: the span, the signer's
/// credentials (known once the client is built), and the bucket's answer.
#[cfg(feature = "cloud")]
#[derive(Debug)]
pub struct Lock {
    pub span: Duration,
    pub region: String,
    /// The store's prefix in its bucket (keys are under it).
    pub prefix: String,
    pub credentials: OnceLock<AwsCredentialProvider>,
    /// The bucket's lock configuration, read once: Ok, or why not.
    checked: tokio::sync::OnceCell<Result<(), String>>,
}

#[cfg(feature = "cloud")]
impl Lock {
    pub fn new(span: Duration, region: String, prefix: String) -> Lock {
        Lock {
            span,
            region,
            prefix,
            credentials: OnceLock::new(),
            checked: tokio::sync::OnceCell::new(),
        }
    }

    /// Puts the lock's headers on upload `req` of `key` and signs it anew;
    /// first (once) reads the bucket's lock configuration through `client`.
    pub async fn apply(
        &self,
        client: &HttpClient,
        req: &mut HttpRequest,
        key: &str,
    ) -> Result<(), HttpError> {
        let root = self.bucket_root(req, key)?;
        let checked = self.checked.get_or_init(|| self.check(client, root)).await;
        if let Err(why) = checked {
            return Err(refused(why.clone()));
        }
        let until = SystemTime::now() + self.span;
        let headers = req.headers_mut();
        headers.insert(
            "x-amz-object-lock-mode",
            http::HeaderValue::from_static("COMPLIANCE"),
        );
        let until = humantime::format_rfc3339_seconds(until).to_string();
        headers.insert(
            "x-amz-object-lock-retain-until-date",
            http::HeaderValue::from_str(&until).map_err(|e| refused(e.to_string()))?,
        );
        self.sign(req).await
    }

    /// The bucket's URL: the upload's, without the object's path.
    fn bucket_root(&self, req: &HttpRequest, key: &str) -> Result<String, HttpError> {
        let object = match self.prefix.is_empty() {
            true => format!("/{key}"),
            false => format!("/{}/{key}", self.prefix),
        };
        let uri = req.uri();
        let path = uri.path();
        let root_path = path
            .strip_suffix(&object)
            .ok_or_else(|| refused(format!("cannot tell the bucket from {uri}")))?;
        let scheme = uri.scheme_str().unwrap_or("https");
        let host = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        Ok(format!("{scheme}://{host}{root_path}"))
    }

    async fn check(&self, client: &HttpClient, root: String) -> Result<(), String> {
        let url = format!("{root}?object-lock");
        let mut req = http::Request::builder()
            .method(http::Method::GET)
            .uri(&url)
            .body(bytes::Bytes::new().into())
            .map_err(|e| e.to_string())?;
        self.sign(&mut req).await.map_err(|e| e.to_string())?;
        let resp = client.execute(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp.into_body().bytes().await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&body);
        if status.is_success() && text.contains("<ObjectLockEnabled>Enabled</ObjectLockEnabled>") {
            return Ok(());
        }
        Err(format!(
            "--object-lock asks every object to be locked, but the bucket at {root} has no Object Lock enabled (it answered {status}); create the bucket with Object Lock (it needs versioning) or leave out --object-lock"
        ))
    }

    /// Signs `req` as object_store would, its headers as they are now.
    async fn sign(&self, req: &mut HttpRequest) -> Result<(), HttpError> {
        let provider = self
            .credentials
            .get()
            .ok_or_else(|| refused("no credentials to sign with".into()))?;
        let credential = provider
            .get_credential()
            .await
            .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        let headers = req.headers_mut();
        headers.remove(http::header::AUTHORIZATION);
        // The payload's digest as object_store gave it, not computed again.
        let given = headers
            .get("x-amz-content-sha256")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| hex::decode(v).ok());
        let signer = AwsAuthorizer::new(&credential, "s3", &self.region)
            .with_sign_payload(given.is_some() || req.body().is_empty());
        signer
            .try_authorize(req, given.as_deref())
            .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))
    }
}

/// A locked upload that will not be made as asked (final: never retried).
#[cfg(feature = "cloud")]
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotLocked(String);

#[cfg(feature = "cloud")]
fn refused(why: String) -> HttpError {
    HttpError::new(HttpErrorKind::Unknown, NotLocked(why))
}
