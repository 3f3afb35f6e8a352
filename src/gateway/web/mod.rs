//! The web page `detafs serve` serves at `/ui/` (and `/`), on the same
//! listener as the REST API, for people who do not use a shell: datasets,
//! their logs, versions' folders and files (with previews), diffs, a
//! path's history, the audit trail and health.
//!
//! The page decides nothing about what a caller may see: each page is
//! made from the REST API's own answers to requests made in this process
//! with the signed-in caller's credential (`Web::ask`), so the one read
//! rule (`Caller::readable`, `Api::visible_version`) and the REST API's
//! errors apply as they are. Pages are server-side templates (minijinja,
//! every value HTML-escaped), with a stylesheet and a small script
//! embedded in the binary; every answer carries a Content-Security-Policy
//! that lets nothing run but that script and loads nothing from
//! elsewhere. Sign-in and sessions: `session.rs`.

mod session;

use axum::Router;
use axum::body::Body;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use minijinja::Environment;
use serde_json::{Value, json};
use session::{COOKIE, LOGIN_COOKIE, Session, Sessions};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// Rows of a log, entries of a folder and changes of a diff per page.
const LOG_PAGE: usize = 50;
const FOLDER_PAGE: usize = 200;
const DIFF_PAGE: usize = 200;
/// Most bytes of a REST answer a page reads (a folder of 100,000 entries
/// is a few MiB of JSON), and of an image it shows.
const MAX_ANSWER: usize = 64 << 20;
const MAX_IMAGE: usize = 32 << 20;

/// What every page answer carries: nothing runs but the page's own script,
/// nothing is loaded from elsewhere, no other site frames it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

struct Web {
    /// The REST API, asked in this process.
    rest: Router,
    sessions: Sessions,
    pages: Environment<'static>,
}

/// The web page's routes over `rest` (the REST API's router).
pub(super) fn router(rest: Router) -> Router {
    let web = Arc::new(Web {
        rest,
        sessions: Sessions::default(),
        pages: environment(),
    });
    let files = |r| format!("/ui/datasets/{{id}}/versions/{{v}}/{r}");
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(datasets))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/health", get(health))
        .route("/ui/assets/{name}", get(asset))
        .route("/ui/datasets/{id}", get(log))
        .route(&files("files"), get(folder_or_file))
        .route(&files("files/{*path}"), get(folder_or_file))
        .route(&files("download/{*path}"), get(download))
        .route(&files("image/{*path}"), get(image))
        .route("/ui/datasets/{id}/diff", get(diff_form))
        .route("/ui/datasets/{id}/diff/{range}", get(diff))
        .route(
            "/ui/datasets/{id}/diff/{range}/files/{*path}",
            get(file_diff),
        )
        .route("/ui/datasets/{id}/history", get(history))
        .route("/ui/datasets/{id}/audit", get(audit))
        .layer(axum::middleware::from_fn(guarded))
        .with_state(web)
}

/// Every answer of the page: its security headers.
async fn guarded(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}

// ---- templates ----------------------------------------------------------

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("pager.html", include_str!("templates/pager.html")),
    ("login.html", include_str!("templates/login.html")),
    ("error.html", include_str!("templates/error.html")),
    ("datasets.html", include_str!("templates/datasets.html")),
    ("log.html", include_str!("templates/log.html")),
    ("folder.html", include_str!("templates/folder.html")),
    ("file.html", include_str!("templates/file.html")),
    ("diff.html", include_str!("templates/diff.html")),
    ("filediff.html", include_str!("templates/filediff.html")),
    ("history.html", include_str!("templates/history.html")),
    ("audit.html", include_str!("templates/audit.html")),
    ("health.html", include_str!("templates/health.html")),
];

/// What a URL's path segment may hold as it is (RFC 3986 unreserved).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// A path in a dataset as a URL's path: each name escaped.
fn path_url(p: &str) -> String {
    p.split('/').map(seg).collect::<Vec<_>>().join("/")
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // Every value in an .html template is HTML-escaped (the default for
    // the .html names below); nothing is marked safe.
    for (name, source) in TEMPLATES {
        env.add_template(name, source).expect("templates parse");
    }
    env.add_filter("seg", |s: String| seg(&s));
    env.add_filter("path", |s: String| path_url(&s));
    env.add_filter("urlencode", |s: String| seg(&s));
    env.add_filter("bytes", |n: Option<u64>| match n {
        Some(n) => bytesize::ByteSize::b(n).display().si().to_string(),
        None => String::new(),
    });
    env.add_filter("mode", |m: Option<u32>| {
        m.map_or(String::new(), |m| format!("{:04o}", m & 0o7777))
    });
    env.add_filter("time", |secs: Option<i64>| {
        secs.and_then(|s| u64::try_from(s).ok())
            .map(|s| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(s))
                    .to_string()
            })
            .unwrap_or_default()
    });
    env.add_filter("cell", |v: minijinja::Value| match v.as_str() {
        Some(s) => s.to_string(),
        None if v.is_none() || v.is_undefined() => String::new(),
        None => serde_json::to_string(&v).unwrap_or_default(),
    });
    env.add_filter("lines", |s: String| {
        s.lines().map(str::to_string).collect::<Vec<_>>()
    });
    env.add_filter("patchclass", |l: String| {
        match l.as_bytes().first() {
            Some(b'+') if !l.starts_with("+++") => "add",
            Some(b'-') if !l.starts_with("---") => "del",
            Some(b'@') => "hunk",
            _ => "",
        }
        .to_string()
    });
    env
}

// ---- answers ------------------------------------------------------------

/// A page that ends a request early (sign-in, an error), in place of
/// what it was to show.
type Stop = Box<Response>;

/// A signed-in visit: its session and the session's token.
struct Visit {
    session: Session,
}

impl Web {
    /// A page made of template `name` with `ctx`.
    fn page(
        &self,
        status: StatusCode,
        name: &str,
        visit: Option<&Visit>,
        mut ctx: Value,
    ) -> Response {
        ctx["signed_in"] = json!(visit.is_some());
        if let Some(v) = visit {
            ctx["csrf"] = json!(v.session.csrf);
        }
        let html = self.pages.get_template(name).and_then(|t| t.render(&ctx));
        match html {
            Ok(html) => (
                status,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                html,
            )
                .into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the page could not be made: {e}"),
            )
                .into_response(),
        }
    }

    fn error(&self, visit: Option<&Visit>, status: StatusCode, message: &str) -> Response {
        self.page(
            status,
            "error.html",
            visit,
            json!({"status": status.as_u16(), "message": message}),
        )
    }

    /// The signed-in visit of a request, or the sign-in page to go to.
    fn visit(&self, headers: &HeaderMap) -> Result<Visit, Stop> {
        session::cookie(headers, COOKIE)
            .and_then(|t| self.sessions.get(t))
            .map(|session| Visit { session })
            .ok_or_else(|| Box::new(Redirect::to("/ui/login").into_response()))
    }

    /// The REST API's answer to `GET uri` (already escaped) asked as the
    /// visit's caller, with `headers` of the page's request passed on.
    async fn ask(&self, bearer: &str, uri: &str, pass: &[(header::HeaderName, &str)]) -> Response {
        let mut req = http::Request::builder()
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {bearer}"));
        for (k, v) in pass {
            req = req.header(k, *v);
        }
        let req = req.body(Body::empty()).expect("a request");
        match self.rest.clone().oneshot(req).await {
            Ok(res) => res,
            Err(never) => match never {},
        }
    }

    /// The REST API's JSON answer to `GET uri`, or the page that says why
    /// there is none (the API's own status and message; signed out if it
    /// refused the credential).
    async fn json(&self, visit: &Visit, uri: &str) -> Result<Value, Stop> {
        let res = self.ask(&visit.session.bearer, uri, &[]).await;
        self.json_of(visit, res).await
    }

    async fn json_of(&self, visit: &Visit, res: Response) -> Result<Value, Stop> {
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), MAX_ANSWER)
            .await
            .map_err(|e| {
                Box::new(self.error(Some(visit), StatusCode::BAD_GATEWAY, &e.to_string()))
            })?;
        if status == StatusCode::UNAUTHORIZED {
            return Err(Box::new(Redirect::to("/ui/login").into_response()));
        }
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = v["error"]["message"]
                .as_str()
                .unwrap_or("the request was refused");
            return Err(Box::new(self.error(Some(visit), status, message)));
        }
        Ok(v)
    }
}

// ---- sign-in ------------------------------------------------------------

async fn login_form(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    login_page(&web, &headers, None)
}

/// The sign-in form, with a CSRF token of its own (a cookie and a field
/// that must agree).
fn login_page(web: &Web, headers: &HeaderMap, problem: Option<&str>) -> Response {
    let token = session::cookie(headers, LOGIN_COOKIE)
        .filter(|t| session::is_token(t))
        .map_or_else(session::token, str::to_string);
    let status = match problem {
        Some(_) => StatusCode::UNAUTHORIZED,
        None => StatusCode::OK,
    };
    let mut res = web.page(
        status,
        "login.html",
        None,
        json!({"login_csrf": token, "problem": problem}),
    );
    session::set_cookie(
        &mut res,
        LOGIN_COOKIE,
        &token,
        "/ui/login",
        Duration::from_secs(3600),
    );
    res
}

async fn login(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let expected = session::cookie(&headers, LOGIN_COOKIE);
    if expected.is_none() || expected != form.get("csrf").map(String::as_str) {
        return login_page(&web, &headers, Some("the form expired: sign in again"));
    }
    let key = form.get("key").map(|k| k.trim()).unwrap_or_default();
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return login_page(&web, &headers, Some("give an API key or a token"));
    }
    // The REST API decides whether the credential stands for a caller.
    let res = web.ask(key, "/datasets", &[]).await;
    if res.status() == StatusCode::UNAUTHORIZED {
        return login_page(
            &web,
            &headers,
            Some("unknown or revoked key, or an invalid token"),
        );
    }
    let token = web.sessions.open(key.to_string());
    let mut out = Redirect::to("/ui/").into_response();
    session::set_cookie(&mut out, COOKIE, &token, "/ui", session::TTL);
    session::set_cookie(&mut out, LOGIN_COOKIE, "", "/ui/login", Duration::ZERO);
    out
}

async fn logout(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let visit = match web.visit(&headers) {
        Ok(v) => v,
        Err(to_login) => return *to_login,
    };
    if form.get("csrf") != Some(&visit.session.csrf) {
        return web.error(
            Some(&visit),
            StatusCode::FORBIDDEN,
            "the form expired: sign out again",
        );
    }
    if let Some(t) = session::cookie(&headers, COOKIE) {
        web.sessions.close(t);
    }
    let mut out = Redirect::to("/ui/login").into_response();
    session::set_cookie(&mut out, COOKIE, "", "/ui", Duration::ZERO);
    out
}

async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.css" => (include_str!("assets/app.css"), "text/css; charset=utf-8"),
        "app.js" => (
            include_str!("assets/app.js"),
            "text/javascript; charset=utf-8",
        ),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

// ---- pages --------------------------------------------------------------

/// The signed-in visit, or the answer that ends the request.
macro_rules! visit {
    ($web:expr, $headers:expr) => {
        match $web.visit(&$headers) {
            Ok(v) => v,
            Err(to_login) => return *to_login,
        }
    };
}

/// `Ok` of a `Result<_, Response>`, or the page it carries.
macro_rules! or_page {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(page) => return *page,
        }
    };
}

fn crumb(name: &str, href: Option<String>) -> Value {
    json!({"name": name, "href": href})
}

fn dataset_crumbs(id: &str) -> Vec<Value> {
    vec![
        crumb("datasets", Some("/ui/".into())),
        crumb(id, Some(format!("/ui/datasets/{}", seg(id)))),
    ]
}

/// Page `page` (from 1) of `total` items in pages of `per`: the items'
/// range, and the pager's context (`base` is the URL to add `page=` to).
fn paged(
    q: &HashMap<String, String>,
    total: usize,
    per: usize,
    base: String,
) -> (std::ops::Range<usize>, Value) {
    let pages = total.div_ceil(per).max(1);
    let page = q
        .get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let start = (page - 1) * per;
    (
        start..(start + per).min(total),
        json!({"page": page, "pages": pages, "total": total, "base": base}),
    )
}

fn merge(into: &mut Value, more: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), more) {
        a.extend(b);
    }
}

async fn datasets(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let visit = visit!(web, headers);
    let rows = or_page!(web.json(&visit, "/datasets").await);
    let names: Vec<&str> = rows
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    web.page(
        StatusCode::OK,
        "datasets.html",
        Some(&visit),
        json!({"datasets": names}),
    )
}

async fn log(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let visit = visit!(web, headers);
    let rows = or_page!(
        web.json(&visit, &format!("/datasets/{}/versions", seg(&id)))
            .await
    );
    let mut rows: Vec<Value> = rows.as_array().cloned().unwrap_or_default();
    // Oldest first from the API: each row's previous version for its diff.
    let mut previous = None;
    for r in &mut rows {
        r["previous"] = json!(previous);
        previous = r["version"].as_u64();
    }
    rows.reverse();
    for (n, r) in rows.iter_mut().enumerate() {
        r["name"] = json!(match n {
            0 => "latest".to_string(),
            n => format!("latest~{n}"),
        });
    }
    let base = format!("/ui/datasets/{}?", seg(&id));
    let (range, mut ctx) = paged(&q, rows.len(), LOG_PAGE, base);
    merge(
        &mut ctx,
        json!({
            "dataset": id, "versions": &rows[range], "crumbs": dataset_crumbs(&id),
            "next_label": "Older",
        }),
    );
    web.page(StatusCode::OK, "log.html", Some(&visit), ctx)
}

/// A version's number as the API names `v` (`latest~2`, a tag, `v3`).
async fn version_of(web: &Web, visit: &Visit, id: &str, v: &str) -> Result<u64, Stop> {
    let e = web
        .json(visit, &format!("/datasets/{}/versions/{}", seg(id), seg(v)))
        .await?;
    e["version"].as_u64().ok_or_else(|| {
        Box::new(web.error(Some(visit), StatusCode::BAD_GATEWAY, "no version number"))
    })
}

fn version_crumbs(id: &str, version: u64, path: &str) -> Vec<Value> {
    let mut crumbs = dataset_crumbs(id);
    let root = format!("/ui/datasets/{}/versions/v{version}/files", seg(id));
    crumbs.push(crumb(&format!("v{version}"), Some(root.clone())));
    let mut at = root;
    for name in path.split('/').filter(|n| !n.is_empty()) {
        at = format!("{at}/{}", seg(name));
        crumbs.push(crumb(name, Some(at.clone())));
    }
    crumbs
}

async fn folder_or_file(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(params): Path<HashMap<String, String>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let visit = visit!(web, headers);
    let (id, v) = (&params["id"], &params["v"]);
    let path = params.get("path").map_or("", |p| p.trim_end_matches('/'));
    let version = or_page!(version_of(&web, &visit, id, v).await);
    let at = format!("/datasets/{}/versions/v{version}", seg(id));
    // A folder answers with its listing (JSON) whatever the range; a file
    // with its first byte.
    let files = match path {
        "" => format!("{at}/files"),
        p => format!("{at}/files/{}", path_url(p)),
    };
    let res = web
        .ask(
            &visit.session.bearer,
            &files,
            &[(header::RANGE, "bytes=0-0")],
        )
        .await;
    let listing = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let here = format!("/ui/datasets/{}/versions/v{version}/files", seg(id));
    let here = match path {
        "" => here,
        p => format!("{here}/{}", path_url(p)),
    };
    let crumbs = version_crumbs(id, version, path);
    if listing {
        let entries = or_page!(web.json_of(&visit, res).await);
        let entries = entries.as_array().cloned().unwrap_or_default();
        let (range, mut ctx) = paged(&q, entries.len(), FOLDER_PAGE, format!("{here}?"));
        let up = match path.rsplit_once('/') {
            Some((parent, _)) => format!(
                "/ui/datasets/{}/versions/v{version}/files/{}",
                seg(id),
                path_url(parent)
            ),
            None => format!("/ui/datasets/{}/versions/v{version}/files", seg(id)),
        };
        merge(
            &mut ctx,
            json!({
                "dataset": id, "version": version, "path": path, "entries": &entries[range],
                "here": here, "up": up, "crumbs": crumbs,
            }),
        );
        return web.page(StatusCode::OK, "folder.html", Some(&visit), ctx);
    }
    if !res.status().is_success() {
        return or_page!(web.json_of(&visit, res).await.map(|_| Response::default()));
    }
    let preview = or_page!(
        web.json(&visit, &format!("{at}/preview/{}", path_url(path)))
            .await
    );
    let ui = format!("/ui/datasets/{}/versions/v{version}", seg(id));
    let ctx = json!({
        "dataset": id, "version": version, "path": path, "preview": preview, "crumbs": crumbs,
        "download": format!("{ui}/download/{}", path_url(path)),
        "image": format!("{ui}/image/{}", path_url(path)),
        "python": format!("detafs://{id}@v{version}/{path}"),
        "s3": format!("s3://{id}/v{version}/{path}"),
        "mount": format!("MOUNTPOINT/versions/v{version}/{path}"),
    });
    web.page(StatusCode::OK, "file.html", Some(&visit), ctx)
}

/// A file's bytes, as the REST API sends them, to be saved.
async fn download(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, v, path)): Path<(String, String, String)>,
) -> Response {
    let visit = visit!(web, headers);
    let pass: Vec<(header::HeaderName, &str)> = [header::RANGE, header::IF_NONE_MATCH]
        .into_iter()
        .filter_map(|h| Some((h.clone(), headers.get(&h)?.to_str().ok()?)))
        .collect();
    let uri = format!(
        "/datasets/{}/versions/{}/files/{}",
        seg(&id),
        seg(&v),
        path_url(&path)
    );
    let res = web.ask(&visit.session.bearer, &uri, &pass).await;
    let is_file = res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes() == b"application/octet-stream");
    if !is_file {
        return match web.json_of(&visit, res).await {
            Ok(_) => web.error(
                Some(&visit),
                StatusCode::BAD_REQUEST,
                "a folder is not downloaded",
            ),
            Err(page) => *page,
        };
    }
    let name = path.rsplit('/').next().unwrap_or("file");
    let mut res = res;
    res.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&format!("attachment; filename*=UTF-8''{}", seg(name)))
            .expect("escaped"),
    );
    res
}

/// An image file's bytes with its type, for the preview's `<img>`: only
/// the raster types its first bytes show (never SVG, which may hold
/// script), under the page's policy.
async fn image(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, v, path)): Path<(String, String, String)>,
) -> Response {
    let visit = visit!(web, headers);
    let uri = format!(
        "/datasets/{}/versions/{}/files/{}",
        seg(&id),
        seg(&v),
        path_url(&path)
    );
    let res = web.ask(&visit.session.bearer, &uri, &[]).await;
    if !res.status().is_success() {
        return res.status().into_response();
    }
    let Ok(bytes) = axum::body::to_bytes(res.into_body(), MAX_IMAGE).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    match super::sniff::image_type(&bytes) {
        Some(kind) => ([(header::CONTENT_TYPE, kind)], bytes).into_response(),
        None => StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response(),
    }
}

async fn diff_form(Path(id): Path<String>, Query(q): Query<HashMap<String, String>>) -> Response {
    let a = q.get("a").map_or("latest~1", String::as_str);
    let b = q.get("b").map_or("latest", String::as_str);
    Redirect::to(&format!(
        "/ui/datasets/{}/diff/{}",
        seg(&id),
        seg(&format!("{a}..{b}"))
    ))
    .into_response()
}

async fn diff(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, range)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let visit = visit!(web, headers);
    let page = q
        .get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let uri = format!(
        "/datasets/{}/diff/{}?offset={}&limit={DIFF_PAGE}",
        seg(&id),
        seg(&range),
        (page - 1) * DIFF_PAGE
    );
    let d = or_page!(web.json(&visit, &uri).await);
    let total = d["total"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let base = format!("/ui/datasets/{}/diff/{}?", seg(&id), seg(&range));
    let (_, mut ctx) = paged(&q, total, DIFF_PAGE, base);
    let mut crumbs = dataset_crumbs(&id);
    crumbs.push(crumb(&range, None));
    merge(
        &mut ctx,
        json!({"dataset": id, "range": range, "diff": d, "crumbs": crumbs}),
    );
    web.page(StatusCode::OK, "diff.html", Some(&visit), ctx)
}

async fn file_diff(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, range, path)): Path<(String, String, String)>,
) -> Response {
    let visit = visit!(web, headers);
    let uri = format!(
        "/datasets/{}/diff/{}/files/{}",
        seg(&id),
        seg(&range),
        path_url(&path)
    );
    let change = or_page!(web.json(&visit, &uri).await);
    let mut crumbs = dataset_crumbs(&id);
    crumbs.push(crumb(
        &range,
        Some(format!("/ui/datasets/{}/diff/{}", seg(&id), seg(&range))),
    ));
    crumbs.push(crumb(&path, None));
    let ctx =
        json!({"dataset": id, "range": range, "path": path, "change": change, "crumbs": crumbs});
    web.page(StatusCode::OK, "filediff.html", Some(&visit), ctx)
}

async fn history(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let visit = visit!(web, headers);
    let path = q.get("path").map_or("", |p| p.trim_matches('/'));
    let uri = format!("/datasets/{}/history?path={}", seg(&id), seg(path));
    let rows = or_page!(web.json(&visit, &uri).await);
    let mut crumbs = dataset_crumbs(&id);
    crumbs.push(crumb(&format!("history of {path}"), None));
    let ctx = json!({"dataset": id, "path": path, "rows": rows, "crumbs": crumbs});
    web.page(StatusCode::OK, "history.html", Some(&visit), ctx)
}

async fn audit(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let visit = visit!(web, headers);
    let audit = or_page!(
        web.json(&visit, &format!("/datasets/{}/audit", seg(&id)))
            .await
    );
    let mut crumbs = dataset_crumbs(&id);
    crumbs.push(crumb("audit", None));
    let ctx = json!({"dataset": id, "audit": audit, "crumbs": crumbs});
    web.page(StatusCode::OK, "audit.html", Some(&visit), ctx)
}

async fn health(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    let visit = visit!(web, headers);
    let health = or_page!(web.json(&visit, "/health").await);
    let ctx = json!({"health": health, "crumbs": [crumb("health", None)]});
    web.page(StatusCode::OK, "health.html", Some(&visit), ctx)
}
