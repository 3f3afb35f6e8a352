//! Which failed store requests are worth retrying, decided by kind, never
//! by message text. Every remote store's HTTP client goes through
//! `Classified`, which sees each answer: statuses that may pass (408, 429,
//! 5xx but 501) and answers that never will (501, an upload the service did
//! not encrypt as asked) become typed errors `transient` can find in an
//! error's source chain; transport failures keep object_store's own kinds.
//! Everything else (configuration, authorization, other 4xx, malformed
//! answers) is final and fails at once with the store's own message.

use super::sse;
use futures::StreamExt;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService, ReqwestConnector,
};
use std::error::Error as StdError;

/// An answer that may be different if asked again (the service is busy,
/// throttling, or failing for now).
#[derive(Debug, thiserror::Error)]
#[error("the service answered {status}{}", say(body))]
pub struct Busy {
    pub status: http::StatusCode,
    body: String,
}

/// An answer that will not change: the service does not implement the
/// request, or did not do what was asked.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn say(body: &str) -> String {
    match body.trim() {
        "" => String::new(),
        b => format!(": {b}"),
    }
}

/// Whether a failed request may succeed if retried: time-outs, connection
/// failures, interrupted transfers and `Busy` answers.
pub fn transient(e: &object_store::Error) -> bool {
    if !matches!(e, object_store::Error::Generic { .. }) {
        return false; // not found, exists, denied, precondition, ...
    }
    let mut at: Option<&(dyn StdError + 'static)> = Some(e);
    let mut kind = None;
    while let Some(err) = at {
        if err.is::<Busy>() {
            return true;
        }
        if err.is::<Refused>() {
            return false;
        }
        if let Some(h) = err.downcast_ref::<HttpError>() {
            kind = Some(h.kind());
        }
        at = err.source();
    }
    matches!(
        kind,
        Some(
            HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted
        )
    )
}

/// Connects the clients of a remote store through `Classified`.
#[derive(Debug)]
pub struct Connector {
    /// The `x-amz-server-side-encryption` every upload must come back with.
    pub sse: Option<&'static str>,
    /// The Object Lock every lockable upload gets (`lock.rs`).
    pub lock: Option<std::sync::Arc<super::lock::Lock>>,
}

impl HttpConnector for Connector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Classified {
            inner: ReqwestConnector::default().connect(options)?,
            sse: self.sse,
            lock: self.lock.clone(),
        }))
    }
}

#[derive(Debug)]
struct Classified {
    inner: HttpClient,
    sse: Option<&'static str>,
    lock: Option<std::sync::Arc<super::lock::Lock>>,
}

/// Bytes of an error answer's body kept for its message.
const BODY_SHOWN: usize = 1024;

#[async_trait::async_trait]
impl HttpService for Classified {
    async fn call(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let put = req.method() == http::Method::PUT;
        if let (true, Some(lock)) = (put, &self.lock)
            && let Some(super::lock::Locked(key)) = req.extensions().get().cloned()
        {
            lock.apply(&self.inner, &mut req, &key).await?;
        }
        let resp = self.inner.execute(req).await?;
        let status = resp.status();
        if status == http::StatusCode::NOT_IMPLEMENTED {
            let body = body_start(resp).await;
            return Err(HttpError::new(
                HttpErrorKind::Unknown,
                Refused(format!(
                    "the service does not implement this request (501){}",
                    say(&body)
                )),
            ));
        }
        if status == http::StatusCode::FORBIDDEN {
            // An object in an archive class (Glacier Flexible Retrieval,
            // Deep Archive) answers so until it is restored.
            let body = body_start(resp).await;
            if body.contains("InvalidObjectState") {
                return Err(HttpError::new(
                    HttpErrorKind::Unknown,
                    Refused(format!(
                        "the object is in an archive storage class: restore it first (S3 RestoreObject, or a class read at once such as Glacier Instant Retrieval for a colder tier){}",
                        say(&body)
                    )),
                ));
            }
            return Err(HttpError::new(
                HttpErrorKind::Unknown,
                Refused(format!(
                    "the service refused the request (403){}",
                    say(&body)
                )),
            ));
        }
        if status.is_server_error()
            || status == http::StatusCode::TOO_MANY_REQUESTS
            || status == http::StatusCode::REQUEST_TIMEOUT
        {
            let body = body_start(resp).await;
            // `Request`: object_store retries it briefly itself, as it would
            // the status; longer waits are `retry::Policy`'s.
            return Err(HttpError::new(
                HttpErrorKind::Request,
                Busy { status, body },
            ));
        }
        if let (true, true, Some(want)) = (put, status.is_success(), self.sse) {
            let got = resp
                .headers()
                .get("x-amz-server-side-encryption")
                .and_then(|v| v.to_str().ok());
            if got != Some(want) {
                return Err(HttpError::new(
                    HttpErrorKind::Unknown,
                    Refused(format!(
                        "{}: asked for {want}, the service answered {}; it may hold the object unencrypted",
                        sse::REFUSED,
                        got.map_or("nothing".to_string(), |g| format!("{g:?}"))
                    )),
                ));
            }
        }
        Ok(resp)
    }
}

/// The start of an answer's body, as text (the rest is not read).
async fn body_start(resp: HttpResponse) -> String {
    let mut stream = resp.into_body().bytes_stream();
    let mut got = Vec::new();
    while got.len() < BODY_SHOWN {
        match stream.next().await {
            Some(Ok(b)) => got.extend_from_slice(&b),
            _ => break,
        }
    }
    got.truncate(BODY_SHOWN);
    String::from_utf8_lossy(&got).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(source: impl StdError + Send + Sync + 'static) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(source),
        }
    }

    fn http(kind: HttpErrorKind, source: impl StdError + Send + Sync + 'static) -> HttpError {
        HttpError::new(kind, source)
    }

    #[test]
    fn only_kinds_that_may_pass_are_transient() {
        let io = || std::io::Error::other("x");
        for kind in [
            HttpErrorKind::Connect,
            HttpErrorKind::Request,
            HttpErrorKind::Timeout,
            HttpErrorKind::Interrupted,
        ] {
            assert!(transient(&generic(http(kind, io()))), "{kind:?}");
        }
        for kind in [HttpErrorKind::Decode, HttpErrorKind::Unknown] {
            assert!(!transient(&generic(http(kind, io()))), "{kind:?}");
        }
        let busy = Busy {
            status: http::StatusCode::SERVICE_UNAVAILABLE,
            body: "SlowDown".into(),
        };
        assert!(transient(&generic(http(HttpErrorKind::Request, busy))));
        // Refused wins over the kind it travels with.
        let refused = Refused("501".into());
        assert!(!transient(&generic(http(HttpErrorKind::Request, refused))));
        // Text is not a kind: a message that reads like a 503 is final.
        let text: Box<dyn StdError + Send + Sync> =
            "Server returned non-2xx status code: 503 Service Unavailable".into();
        assert!(!transient(&object_store::Error::Generic {
            store: "S3",
            source: text,
        }));
        assert!(!transient(&object_store::Error::NotFound {
            path: "x".into(),
            source: Box::new(http(HttpErrorKind::Connect, io())),
        }));
    }
}
