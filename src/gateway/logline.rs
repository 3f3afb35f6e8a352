//! A request's line in the request log, for the REST API and the S3
//! endpoint alike: who asked, the action and resource asked for (as the
//! policy names them), the decision and the answer.
//!
//! What the policy hides answers as missing (404, the same as a path or
//! version that does not exist), yet the log says it was refused. That
//! decision is made deep in a request (a lookup, a commit's check) and
//! logged at its end: a flag in the request's task, which the caller made
//! for the request carries.

use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

tokio::task_local! {
    static REFUSED: Arc<AtomicBool>;
}

/// Runs a request, `request`; with its output, whether the policy hid
/// something it asked for.
pub async fn judged<F: Future>(request: F) -> (F::Output, bool) {
    let flag = Arc::new(AtomicBool::new(false));
    let out = REFUSED.scope(flag.clone(), request).await;
    (out, flag.load(Ordering::Relaxed))
}

/// The flag of the request running now (None outside one).
pub fn current() -> Option<Arc<AtomicBool>> {
    REFUSED.try_with(Arc::clone).ok()
}

/// Notes a refusal in `flag`'s request.
pub fn refuse(flag: Option<&Arc<AtomicBool>>) {
    if let Some(f) = flag {
        f.store(true, Ordering::Relaxed);
    }
}

/// What a request asked for, read from its method and path, and when.
pub struct Line {
    /// When it came: the line says how long its answer took to begin
    /// (a body then streams for as long as the client reads).
    came: std::time::Instant,
    protocol: &'static str,
    principal: Option<String>,
    request: String,
    action: &'static str,
    resource: String,
}

impl Line {
    /// A REST request (`principal`: the key id its bearer names).
    pub fn rest(method: &http::Method, path: &str, principal: Option<String>) -> Line {
        let parts: Vec<&str> = path.trim_start_matches('/').splitn(6, '/').collect();
        let (action, resource) = match (method.as_str(), parts.as_slice()) {
            ("GET", ["datasets"]) => ("dataset:versions", "datasets/*".to_string()),
            ("POST", ["datasets"]) => ("dataset:create", "datasets/*".to_string()),
            ("GET", ["datasets", id, "versions"]) => ("dataset:versions", format!("datasets/{id}")),
            ("GET", ["datasets", id, "versions", v]) => {
                ("dataset:versions", format!("datasets/{id}/versions/{v}"))
            }
            ("GET", ["datasets", id, "versions", v, "files", rest @ ..]) => (
                "dataset:read",
                format!("datasets/{id}/versions/{v}/files/{}", rest.join("/")),
            ),
            (
                "GET",
                [
                    "datasets",
                    id,
                    "versions",
                    v,
                    "tree" | "small-files",
                    rest @ ..,
                ],
            ) => (
                "dataset:read",
                format!("datasets/{id}/versions/{v}/files/{}", rest.join("/")),
            ),
            ("POST", ["datasets", id, "tags"]) => ("dataset:tag", format!("datasets/{id}")),
            ("POST", ["datasets", id, "commit"]) => ("dataset:commit", format!("datasets/{id}")),
            ("PUT", ["datasets", id, "bundles"]) => ("dataset:commit", format!("datasets/{id}")),
            ("PUT", ["datasets", id, "uploads", rest @ ..]) => (
                "dataset:commit",
                format!("datasets/{id}/uploads/{}", rest.join("/")),
            ),
            _ => ("none", path.to_string()),
        };
        Line {
            came: std::time::Instant::now(),
            protocol: "rest",
            principal,
            request: format!("{method} {path}"),
            action,
            resource,
        }
    }

    /// An S3 request: its bucket from the path, or from the host under
    /// `domain` (virtual-host addressing); its key (access key id) from
    /// the signature.
    pub fn s3(req: &http::Request<hyper::body::Incoming>, domain: Option<&str>) -> Line {
        let path = req.uri().path();
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|h| h.rsplit_once(':').map_or(h, |(h, _)| h));
        let hosted = domain.zip(host).and_then(|(d, h)| {
            let d = d.rsplit_once(':').map_or(d, |(d, _)| d);
            h.strip_suffix(d)?.strip_suffix('.')
        });
        let trimmed = path.trim_start_matches('/');
        let (bucket, key) = match hosted {
            Some(b) => (b, trimmed),
            None => trimmed.split_once('/').unwrap_or((trimmed, "")),
        };
        let writes = !matches!(req.method().as_str(), "GET" | "HEAD");
        let (action, resource) = match (bucket, key) {
            ("", _) => ("dataset:versions", "datasets/*".to_string()),
            (b, "") if !writes => ("dataset:versions", format!("datasets/{b}")),
            (b, k) if writes || k.starts_with("staging/") => {
                ("dataset:commit", format!("datasets/{b}/{k}"))
            }
            (b, k) => {
                let (v, file) = k.split_once('/').unwrap_or((k, ""));
                (
                    "dataset:read",
                    format!("datasets/{b}/versions/{v}/files/{file}"),
                )
            }
        };
        Line {
            came: std::time::Instant::now(),
            protocol: "s3",
            principal: access_key(req).map(|k| format!("s3 key {k}")),
            request: format!("{} {path}", req.method()),
            action,
            resource,
        }
    }

    /// The line: `refused` if the policy hid something asked for.
    pub fn json(self, status: u16, refused: bool, bytes: u64) -> Value {
        let decision = match status {
            401 => "unauthenticated",
            403 => "refused",
            _ if refused => "refused",
            _ => "allowed",
        };
        json!({
            "protocol": self.protocol,
            "principal": self.principal,
            "request": self.request,
            "action": self.action,
            "resource": self.resource,
            "decision": decision,
            "allowed": decision == "allowed",
            "status": status,
            "bytes": bytes,
            "ms": self.came.elapsed().as_secs_f64() * 1000.0,
        })
    }
}

/// The access key id a SigV4 (header or presigned) or SigV2 request names.
fn access_key<B>(req: &http::Request<B>) -> Option<String> {
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Some((_, rest)) = auth.split_once("Credential=") {
        return rest.split('/').next().map(str::to_string);
    }
    if let Some(rest) = auth.strip_prefix("AWS ") {
        return rest.split(':').next().map(str::to_string);
    }
    let query = req.uri().query().unwrap_or_default();
    query.split('&').find_map(|kv| {
        let v = kv
            .strip_prefix("X-Amz-Credential=")
            .or_else(|| kv.strip_prefix("AWSAccessKeyId="))?;
        Some(v.split("%2F").next().unwrap_or(v).to_string())
    })
}
