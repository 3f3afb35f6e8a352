//! A gateway as a store (`--store https://HOST:PORT`): a host that holds no
//! store key reaches datasets through `detafs serve`'s REST API, with an
//! API key (`--api-key-file`) or a token (`--token-file`, read again at
//! each request so an outside tool can refresh it), checking the gateway's
//! certificate against `--ca-cert` or the system's roots. It sees exactly
//! what the gateway's policy shows its principal: the gateway decides,
//! the client keeps no copy of the rule.
//!
//! The CLI reads datasets, versions and files' bytes here; a mount (and
//! `ls`, `diff`, `export`, `verify`) reads through `upstream.rs`.

mod places;
mod upstream;

use crate::error::{Error, FsError, Result};
use crate::relpath::RelPath;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The header of a version list that names what the caller was shown
/// under (the gateway's policy in force): a mount through the gateway
/// forgets what it was shown under another.
pub const VIEW: &str = "x-detafs-view";

/// How to reach a gateway.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub api_key_file: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
}

/// Whether a store URL names a gateway.
pub fn is_gateway(store: &str) -> bool {
    store.starts_with("https://")
}

pub struct Gateway {
    /// The gateways of one store, in the order given; a request goes to
    /// the one that answered last, and moves on when it cannot be reached
    /// or answers 503.
    bases: Vec<String>,
    current: std::sync::atomic::AtomicUsize,
    client: reqwest::Client,
    credentials: Credentials,
    /// The client's one runtime: sync callers cross into it here alone
    /// (on several threads: a mount's readers and read-ahead at once).
    rt: std::sync::Arc<crate::runtime::Runtime>,
    /// What a mount through it has been told (`upstream.rs`).
    told: upstream::Told,
    /// Chunks are asked for as the store holds them now, never as the
    /// gateway read them before (`fresh`).
    fresh: bool,
    /// What its latest answers were (`.detafs/health` of a mount).
    health: crate::store::health::Health,
}

enum Credentials {
    Key(String),
    Token(PathBuf),
}

/// A file's secret: its first line.
fn secret(file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::io(file.display(), e))?;
    let first = text.lines().next().unwrap_or_default().trim().to_string();
    if first.is_empty() {
        return Err(Error::InvalidInput(format!("{} is empty", file.display())));
    }
    Ok(first)
}

impl Gateway {
    /// `url`: one gateway, or several of one store separated by commas;
    /// its requests run on `rt`.
    pub fn connect(
        url: &str,
        opts: &Options,
        rt: &std::sync::Arc<crate::runtime::Runtime>,
    ) -> Result<Gateway> {
        let bases: Vec<String> = url
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .collect();
        if let Some(bad) = bases.iter().find(|b| !is_gateway(b)) {
            return Err(Error::InvalidInput(format!(
                "{bad:?}: a gateway is https://HOST:PORT (several: separated by commas)"
            )));
        }
        let credentials = match (&opts.api_key_file, &opts.token_file) {
            (Some(k), None) => Credentials::Key(secret(k)?),
            (None, Some(t)) => {
                secret(t)?;
                Credentials::Token(t.clone())
            }
            (Some(_), Some(_)) => {
                return Err(Error::InvalidInput(
                    "give an API key file or a token file, not both".into(),
                ));
            }
            (None, None) => {
                return Err(Error::InvalidInput(format!(
                    "{url} is a gateway: give --api-key-file FILE (or DETAFS_API_KEY_FILE) or --token-file FILE"
                )));
            }
        };
        // No bound on a whole answer (a large file takes what it takes):
        // on connecting, and on each wait for bytes.
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(60));
        if let Some(ca) = &opts.ca_cert {
            // One certificate, or several (one per gateway), in PEM.
            let pem = std::fs::read(ca).map_err(|e| Error::io(ca.display(), e))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::InvalidInput(format!("{}: {e}", ca.display())))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| Error::InvalidInput(format!("{url}: {e}")))?;
        Ok(Gateway {
            bases,
            current: Default::default(),
            client,
            credentials,
            rt: rt.clone(),
            told: Default::default(),
            fresh: false,
            health: Default::default(),
        })
    }

    /// Keeps what this host's names for the gateway's folders and files
    /// stand for in the file at `path`, sealed with `codec` (the host's
    /// own), so that a later process reads what staging names.
    pub fn keep_places(&self, path: &Path, codec: crate::store::codec::Codec) -> Result<()> {
        self.told.keep(places::Book::open(path, codec)?);
        Ok(())
    }

    /// This gateway, asked for every chunk as the store holds it now
    /// (`Cache-Control: no-cache`): `verify` through it.
    pub fn fresh(mut self) -> Gateway {
        self.fresh = true;
        self
    }

    fn bearer(&self) -> Result<String> {
        match &self.credentials {
            Credentials::Key(k) => Ok(k.clone()),
            Credentials::Token(file) => secret(file),
        }
    }

    /// GET `path` (already escaped), within the runtime, from `from` bytes
    /// on: the answer, or the gateway's refusal as the error a local store
    /// would give.
    async fn send(&self, path: &str, bearer: &str, from: u64) -> Result<reqwest::Response> {
        let (res, _) = self
            .send_with(reqwest::Method::GET, path, bearer, |req| match from {
                0 => req,
                from => req.header(reqwest::header::RANGE, format!("bytes={from}-")),
            })
            .await?;
        match res.status().as_u16() {
            200..300 => Ok(res),
            status => Err(refusal(status, &res.bytes().await.unwrap_or_default())),
        }
    }

    /// `method` on `path`, each request made by `make` (headers of its
    /// own): the first answer of a gateway that can be reached and does
    /// not answer 503 (each such gateway gives its turn to the next),
    /// whatever its status; and whether an earlier try may have been
    /// carried out (it was lost after it was sent).
    async fn send_with(
        &self,
        method: reqwest::Method,
        path: &str,
        bearer: &str,
        make: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, bool)> {
        use std::sync::atomic::Ordering;
        // Never on the kernel's request thread (`crate::nowait`).
        crate::nowait::check()?;
        let first = self.current.load(Ordering::Relaxed);
        let (mut last, mut again) = (None, false);
        for i in 0..self.bases.len() {
            let at = (first + i) % self.bases.len();
            let req = self
                .client
                .request(method.clone(), format!("{}{path}", self.bases[at]))
                .bearer_auth(bearer);
            let asked = std::time::Instant::now();
            let res = match make(req).send().await {
                Ok(r) if r.status().as_u16() != 503 => r,
                Ok(r) => {
                    let body = r.bytes().await.unwrap_or_default();
                    let e = refusal(503, &body);
                    self.health.failed(&e);
                    last = Some(e);
                    continue;
                }
                Err(e) => {
                    again |= !e.is_connect();
                    let e = unreachable_gateway(&self.bases[at], &e);
                    self.health.failed(&e);
                    last = Some(e);
                    continue;
                }
            };
            self.health.answered(asked.elapsed());
            self.current.store(at, Ordering::Relaxed);
            return Ok((res, again));
        }
        Err(last.unwrap_or_else(|| Error::InvalidInput("no gateway given".into())))
    }

    /// `method` on `at` with `make`'s headers, within the runtime, its
    /// body read whole: any status a gateway gave (`Answer::accepted`
    /// turns refusals into errors). A gateway lost in the middle of an
    /// answer hands over to the next (each at most once); a path names a
    /// version by number, so the next sends the same bytes (their ETag is
    /// checked where it matters).
    fn ask(
        &self,
        method: reqwest::Method,
        at: &str,
        make: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Answer> {
        let bearer = self.bearer()?;
        self.rt.block_on(async {
            let (mut handed_over, mut again) = (0, false);
            loop {
                let (res, lost) = self.send_with(method.clone(), at, &bearer, &make).await?;
                again |= lost;
                let status = res.status().as_u16();
                let header = |name| {
                    res.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                let (etag, view) = (header(reqwest::header::ETAG.as_str()), header(VIEW));
                let url = res.url().to_string();
                match res.bytes().await {
                    Ok(body) => {
                        return Ok(Answer {
                            status,
                            etag,
                            view,
                            body,
                            again,
                        });
                    }
                    Err(e) if handed_over + 1 < self.bases.len() => {
                        (handed_over, again) = (handed_over + 1, true);
                        tracing::warn!(
                            "{}; the next gateway sends it",
                            unreachable_gateway(&url, &e)
                        );
                        self.next();
                    }
                    Err(e) => return Err(unreachable_gateway(&url, &e)),
                }
            }
        })
    }

    fn get_json(&self, path: &str) -> Result<Value> {
        self.ask(reqwest::Method::GET, path, |r| r)?
            .accepted()?
            .json(path)
    }

    /// Names version `version` of `dataset` `tag`: the tag and the
    /// version's number.
    pub fn create_tag(&self, dataset: &str, version: &str, tag: &str) -> Result<(String, u64)> {
        let at = format!("/datasets/{}/tags", segment(dataset)?);
        let body = serde_json::json!({"tag": tag, "version": version}).to_string();
        let answer = self.ask(reqwest::Method::POST, &at, |r| {
            r.header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        })?;
        // Taken by a try whose answer was lost: made, if it names the
        // version asked for (the gateway says which that is).
        if answer.status == 409
            && answer.again
            && let Some(v) = self.tagged_as_asked(dataset, version, tag)?
        {
            return Ok((tag.to_string(), v));
        }
        let made = answer.accepted()?.json(&at)?;
        match (made["tag"].as_str(), made["version"].as_u64()) {
            (Some(t), Some(v)) => Ok((t.to_string(), v)),
            _ => Err(Error::malformed(
                format!("the gateway's answer to {at}"),
                "no tag",
            )),
        }
    }

    /// The version `tag` names, if it is the one `version` names.
    fn tagged_as_asked(&self, dataset: &str, version: &str, tag: &str) -> Result<Option<u64>> {
        let at = format!(
            "/datasets/{}/versions/{}",
            segment(dataset)?,
            segment(version)?
        );
        let asked = self.get_json(&at)?["version"].as_u64();
        let named = self.versions(dataset)?.iter().find_map(|row| {
            let tags = row["tags"].as_array()?;
            tags.iter()
                .any(|t| t.as_str() == Some(tag))
                .then(|| row["version"].as_u64())?
        });
        Ok(asked.filter(|a| named == Some(*a)))
    }

    /// `GET /datasets/{dataset}/{what}` (a lifecycle resource:
    /// `retention`, `report`), its JSON answer.
    pub fn get_of(&self, dataset: &str, what: &str) -> Result<Value> {
        self.get_json(&format!("/datasets/{}/{what}", segment(dataset)?))
    }

    /// `POST` (or, `replace`, `PUT`) `body` to `/datasets/{dataset}/{what}`
    /// (`forget`, `holds`, `releases`, `erase`, `retention`), its JSON answer.
    pub fn send_to(&self, dataset: &str, what: &str, body: &Value, replace: bool) -> Result<Value> {
        let at = format!("/datasets/{}/{what}", segment(dataset)?);
        let method = match replace {
            true => reqwest::Method::PUT,
            false => reqwest::Method::POST,
        };
        let body = body.to_string();
        self.ask(method, &at, |r| {
            r.header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        })?
        .accepted()?
        .json(&at)
    }

    /// The datasets the caller may list.
    pub fn datasets(&self) -> Result<Vec<String>> {
        let rows = self.get_json("/datasets")?;
        Ok(rows
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect())
    }

    /// The number of the version `spec` names now (`latest`, a tag, ...).
    pub fn version_of(&self, dataset: &str, spec: &str) -> Result<u64> {
        let e = self.get_json(&format!(
            "/datasets/{}/versions/{}",
            segment(dataset)?,
            segment(spec)?
        ))?;
        e["version"]
            .as_u64()
            .ok_or_else(|| Error::malformed("the gateway's version entry", "no version number"))
    }

    /// The versions of `dataset` the caller may see, oldest first, as
    /// `detafs log --json` rows (with their tags).
    pub fn versions(&self, dataset: &str) -> Result<Vec<Value>> {
        let rows = self.get_json(&format!("/datasets/{}/versions", segment(dataset)?))?;
        Ok(rows.as_array().cloned().unwrap_or_default())
    }

    /// File `path` of `version` of `dataset`, streamed to `out` as it
    /// comes (never whole in memory). A gateway lost mid-way hands over to
    /// the next, which sends the rest from where it stopped: the version
    /// is named by its number (its files never change), and the rest must
    /// carry the same ETag (a hash of its content's ids), so no byte of
    /// another file is ever written.
    pub fn file(
        &self,
        dataset: &str,
        version: &str,
        path: &str,
        out: &mut dyn std::io::Write,
    ) -> Result<()> {
        let path = crate::relpath::RelPath::parse(path)?;
        // A version's own name (`vN`) needs no asking.
        let number = match crate::repo::tag::version_name(version.as_bytes()) {
            Some(n) => n,
            None => self.version_of(dataset, version)?,
        };
        let at = in_version(dataset, number, "files", &path)?;
        let bearer = self.bearer()?;
        let etag_of = |res: &reqwest::Response| {
            res.headers()
                .get(reqwest::header::ETAG)
                .map(|e| e.as_bytes().to_vec())
        };
        self.rt.block_on(async {
            let mut res = self.send(&at, &bearer, 0).await?;
            // A folder answers its listing (JSON); a file, its bytes.
            let file = res
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .is_some_and(|t| t.as_bytes() == b"application/octet-stream");
            if !file {
                return Err(Error::InvalidInput(format!("{path} is not a regular file")));
            }
            let etag = etag_of(&res);
            let mut done = 0u64;
            // Hand-overs in a row that brought no byte: at most one per gateway.
            let mut fruitless = 0;
            loop {
                match res.chunk().await {
                    Ok(Some(part)) => {
                        out.write_all(&part).map_err(|e| Error::io("output", e))?;
                        done += part.len() as u64;
                        fruitless = 0;
                    }
                    Ok(None) => return Ok(()),
                    Err(e) if fruitless < self.bases.len() - 1 => {
                        fruitless += 1;
                        tracing::warn!(
                            "{}; the next gateway sends the rest",
                            unreachable_gateway(res.url().as_str(), &e)
                        );
                        self.next();
                        res = self.send(&at, &bearer, done).await?;
                        if res.status().as_u16() != 206 || etag_of(&res) != etag {
                            return Err(Error::malformed(
                                format!("{path} of {dataset} v{number}"),
                                "the next gateway did not send the rest of the same file",
                            ));
                        }
                    }
                    Err(e) => return Err(unreachable_gateway(res.url().as_str(), &e)),
                }
            }
        })
    }

    /// The next gateway's turn (the current one was lost mid-answer).
    fn next(&self) {
        use std::sync::atomic::Ordering;
        let at = (self.current.load(Ordering::Relaxed) + 1) % self.bases.len();
        self.current.store(at, Ordering::Relaxed);
    }
}

/// How long an upload is taken again by a later commit (`Sending::resume`):
/// well within the age a commit may name one at (`store::grace`).
const RESUME_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(crate::store::grace::MAX_COMMIT_AGE.as_secs() / 2);

/// Bytes read of a local file at a time while they are sent.
const SEND_PIECE: u64 = 1 << 20;

/// An upload's body: a local file's bytes from `at`, `len` of them, each
/// run after its head (a patch's range, or nothing), read as they are sent.
fn upload_body(
    (file, sealing): (&Path, &crate::store::sealed_file::Sealing),
    runs: Vec<(Vec<u8>, u64, u64)>,
) -> Result<reqwest::Body> {
    let shown = file.display().to_string();
    let file = sealing.open(file).map_err(|e| Error::io(&shown, e))?;
    let mut runs = runs.into_iter();
    let mut run: Option<(u64, u64)> = None;
    let pieces = std::iter::from_fn(move || -> Option<std::io::Result<bytes::Bytes>> {
        loop {
            match &mut run {
                Some((_, 0)) | None => {
                    let (head, at, len) = runs.next()?;
                    run = Some((at, len));
                    if !head.is_empty() {
                        return Some(Ok(head.into()));
                    }
                }
                Some((at, len)) => {
                    let mut buf = vec![0; crate::limits::to_usize(SEND_PIECE.min(*len))];
                    return Some(match file.read_at(&mut buf, *at) {
                        Ok(0) => Err(std::io::Error::other(format!(
                            "{shown} became shorter while it was sent"
                        ))),
                        Ok(n) => {
                            buf.truncate(n);
                            (*at, *len) = (*at + n as u64, *len - n as u64);
                            Ok(buf.into())
                        }
                        Err(e) => Err(e),
                    });
                }
            }
        }
    });
    Ok(reqwest::Body::wrap_stream(futures::stream::iter(pieces)))
}

/// A gateway's answer: its status, ETag, view and body.
struct Answer {
    status: u16,
    etag: Option<String>,
    view: Option<String>,
    body: bytes::Bytes,
    /// The request was sent again after a try whose answer was lost,
    /// which may have been carried out.
    again: bool,
}

impl Answer {
    /// This answer, or the gateway's refusal as the error a local store
    /// would give (a 304 is an answer).
    fn accepted(self) -> Result<Answer> {
        match self.status {
            200..300 | 304 => Ok(self),
            status => Err(refusal(status, &self.body)),
        }
    }

    /// Its body as JSON, the answer to `at`.
    fn json(&self, at: &str) -> Result<Value> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::malformed(format!("the gateway's answer to {at}"), e))
    }
}

/// The path of `what` (`files`, `tree`, `small-files`) of `path` in
/// version `version` of `dataset`: every name escaped, bytes as they are.
fn in_version(dataset: &str, version: u64, what: &str, path: &RelPath) -> Result<String> {
    let escaped: Vec<String> = path
        .names()
        .map(|n| format!("/{}", escape_bytes(n)))
        .collect();
    Ok(format!(
        "/datasets/{}/versions/v{version}/{what}{}",
        segment(dataset)?,
        escaped.concat()
    ))
}

/// What stays as it is in a URL path's segment (RFC 3986's unreserved).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A dataset name or version as one segment of a URL path: `.`, `..`
/// and the empty name are refused (a URL parser takes them, escaped or
/// not, as steps).
fn segment(name: &str) -> Result<String> {
    match name {
        "" | "." | ".." => Err(Error::InvalidInput(format!(
            "{name:?} names no dataset or version"
        ))),
        _ => Ok(escape_bytes(name.as_bytes())),
    }
}

fn escape_bytes(name: &[u8]) -> String {
    percent_encoding::percent_encode(name, SEGMENT).to_string()
}

fn unreachable_gateway(base: &str, e: &reqwest::Error) -> Error {
    Error::io(
        format!("the gateway {base}"),
        std::io::Error::other(e.to_string()),
    )
}

/// The gateway's refusal (`{"error": {"code", "message"}}`) as the error a
/// local store gives for the same.
fn refusal(status: u16, body: &[u8]) -> Error {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    let code = v["error"]["code"].as_str().unwrap_or_default();
    let message = v["error"]["message"]
        .as_str()
        .map_or_else(|| format!("the gateway answered {status}"), str::to_string);
    let details = &v["error"]["details"];
    match (status, code) {
        (409, "conflict") => Error::Conflict {
            winner: details["winner"].as_u64().unwrap_or(0),
            paths: details["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| Some(p.as_str()?.as_bytes().to_vec()))
                .collect(),
            staged: false,
        },
        (409, "nothing_to_commit") => {
            Error::NothingToCommit(details["version"].as_u64().unwrap_or(0))
        }
        (401, _) => Error::Forbidden(format!("the gateway refused the credentials: {message}")),
        (403, _) => Error::Forbidden(message),
        (404, "no_dataset") => Error::InvalidInput(message),
        (404, _) => Error::fs(FsError::NotFound, message),
        (400 | 409 | 413 | 416, _) => Error::InvalidInput(message),
        _ => Error::io("the gateway", std::io::Error::other(message)),
    }
}
