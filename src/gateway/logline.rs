//! A request's line in the request log, for the REST API and the S3
//! endpoint alike: who asked, the action and resource asked for (as the
//! policy names them), the decision and the answer.
//!
//! What the policy hides answers as missing (404, the same as a path or
//! version that does not exist), yet the log says it was refused. That
//! decision is made deep in a request (a lookup, a commit's check) and
//! logged at its end: a flag in the request's task, which the caller made
//! for the request carries.

use crate::access::{self, policy::ALL_DATASETS};
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

/// What a REST route asks of the policy, declared where the route is
/// (`asking`): its action, and its resource with the route's parameters
/// in braces (`datasets/{id}/versions/{v}/files/{path}`).
#[derive(Clone, Copy)]
pub struct Asks(pub &'static str, pub &'static str);

/// `route` answering with what it asks of the policy, for the request
/// log to read (`Line::rest`).
pub fn asking<S: Clone + Send + Sync + 'static>(
    asks: Asks,
    route: axum::routing::MethodRouter<S>,
) -> axum::routing::MethodRouter<S> {
    route.layer(axum::middleware::map_response(
        move |mut res: axum::response::Response| async move {
            res.extensions_mut().insert(asks);
            res
        },
    ))
}

/// The parameters of `path` as route `template` names them (`{id}`, and
/// `{*path}` for the rest), as sent (still escaped).
fn params<'p>(template: &str, path: &'p str) -> Vec<(String, &'p str)> {
    let mut out = Vec::new();
    let mut rest = path.trim_start_matches('/');
    for seg in template.trim_start_matches('/').split('/') {
        if let Some(name) = seg.strip_prefix("{*").and_then(|s| s.strip_suffix('}')) {
            out.push((name.to_string(), rest));
            break;
        }
        let (here, after) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            out.push((name.to_string(), here));
        }
        rest = after;
    }
    out
}

/// `resource` with its `{name}`s replaced by `params` (a name not there: empty).
fn named(resource: &str, params: &[(String, &str)]) -> String {
    let mut out = String::new();
    let mut rest = resource;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        out.push_str(
            params
                .iter()
                .find(|(n, _)| n == name)
                .map_or("", |(_, v)| v),
        );
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
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
    /// A REST request (`principal`: the key id its bearer names) that
    /// came at `came` for `path`, answered by the route of `template`
    /// asking `asks` of the policy (none: no route, or one that asks
    /// nothing).
    pub fn rest(
        (method, path, came): (&http::Method, &str, std::time::Instant),
        (template, asks): (Option<&str>, Option<Asks>),
        principal: Option<String>,
    ) -> Line {
        let (action, resource) = match (template, asks) {
            (Some(template), Some(Asks(action, resource))) => {
                (action, named(resource, &params(template, path)))
            }
            _ => ("none", path.to_string()),
        };
        Line {
            came,
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
            ("", _) => ("dataset:versions", ALL_DATASETS.to_string()),
            (b, "") if !writes => ("dataset:versions", access::dataset_resource(b)),
            (b, k) if writes || k.starts_with("staging/") => (
                "dataset:commit",
                format!("{}/{k}", access::dataset_resource(b)),
            ),
            (b, k) => {
                let (v, file) = k.split_once('/').unwrap_or((k, ""));
                let version = access::version_resource(b, v);
                ("dataset:read", access::file_resource(&version, file))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_is_named_from_the_route_s_parameters() {
        let template = "/datasets/{id}/versions/{v}/files/{*path}";
        let path = "/datasets/ds/versions/v1/files/raw/a%20b.csv";
        let got = params(template, path);
        let want = [("id", "ds"), ("v", "v1"), ("path", "raw/a%20b.csv")];
        assert_eq!(got.len(), want.len());
        for ((n, v), (wn, wv)) in got.iter().zip(want) {
            assert_eq!((n.as_str(), *v), (wn, wv));
        }
        let resource = "datasets/{id}/versions/{v}/files/{path}";
        assert_eq!(
            named(resource, &got),
            "datasets/ds/versions/v1/files/raw/a%20b.csv"
        );
        // A route without the rest: the folder's own name is empty.
        let root = params(
            "/datasets/{id}/versions/{v}/files",
            "/datasets/ds/versions/v1/files",
        );
        assert_eq!(named(resource, &root), "datasets/ds/versions/v1/files/");
    }
}
