//! Store errors by kind: a scripted HTTP server on 127.0.0.1 answers every
//! request of `detafs init` on `s3://` the same way, and the server counts
//! what it was asked. Final answers (configuration, authorization, other
//! 4xx, 501, malformed) fail at once with the store's own message;
//! time-outs, refused connections, 408, 429 and 5xx are retried until
//! `--store-timeout`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long each command may retry.
const DEADLINE: Duration = Duration::from_secs(6);

/// A server answering every request with `answer` (None: never answers).
struct Scripted {
    port: u16,
    asked: Arc<AtomicUsize>,
}

/// Answers each request by its request line (None: never answers).
type Script = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

fn serve(answer: Option<String>) -> Scripted {
    serve_script(Arc::new(move |_: &str| answer.clone()))
}

fn serve_script(answer: Script) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (counter, answer) = (counter.clone(), answer.clone());
            std::thread::spawn(move || answer_all(conn, &*answer, &counter));
        }
    });
    Scripted { port, asked }
}

fn answer_all(conn: TcpStream, answer: &dyn Fn(&str) -> Option<String>, asked: &AtomicUsize) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        let mut request = String::new();
        let mut first = true;
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if first {
                first = false;
                request = line.clone();
                continue;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        asked.fetch_add(1, Ordering::SeqCst);
        match answer(&request) {
            Some(a) => {
                if out.write_all(a.as_bytes()).is_err() {
                    return;
                }
            }
            None => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

fn response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/xml\r\n\r\n{body}",
        body.len()
    )
}

/// `detafs init` on a store at `endpoint`: its time, exit success, stderr.
fn init_at(scheme_url: &str, env: &[(&str, String)]) -> (Duration, bool, String) {
    let home = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_detafs"))
        .args(["--store", scheme_url, "init", "--plaintext"])
        .env("HOME", home.path())
        .env("DETAFS_CACHE", home.path().join("cache"))
        .env("DETAFS_STORE_TIMEOUT", format!("{}s", DEADLINE.as_secs()))
        .env_remove("AWS_PROFILE")
        .envs(env.iter().map(|(k, v)| (k, v.as_str())))
        .output()
        .unwrap();
    (
        t.elapsed(),
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn init_s3(port: u16) -> (Duration, bool, String) {
    let env = [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
    ];
    init_at("s3://bucket/store", &env)
}

/// Fails well before the deadline, having asked each request once, with
/// `said` in its message.
fn fails_at_once(answer: &str, said: &str) {
    let s = serve(Some(answer.to_string()));
    let (took, ok, err) = init_s3(s.port);
    assert!(!ok, "{err}");
    assert!(took < DEADLINE / 2, "took {took:?}: {err}");
    // init's first request, or the one after a "no such object": nothing
    // is asked again (a retry would ask every 0.1-4 s until the deadline).
    assert!(s.asked.load(Ordering::SeqCst) <= 2, "{err}");
    assert!(err.contains(said), "{said:?} not in: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// Keeps asking until the deadline, then fails saying why.
fn retried_until_the_deadline(s: &Scripted, said: &str) {
    let (took, ok, err) = init_s3(s.port);
    assert!(!ok, "{err}");
    assert!(took >= DEADLINE * 3 / 4, "gave up after {took:?}: {err}");
    assert!(took < DEADLINE * 3, "took {took:?}");
    assert!(s.asked.load(Ordering::SeqCst) >= 3, "asked {:?}", s.asked);
    assert!(err.contains(said), "{said:?} not in: {err}");
}

#[test]
fn client_errors_fail_at_once_with_the_stores_message() {
    fails_at_once(
        &response(
            "400 Bad Request",
            "<Error><Code>InvalidArgument</Code><Message>a bad header</Message></Error>",
        ),
        "a bad header",
    );
    fails_at_once(
        &response(
            "404 Not Found",
            "<Error><Code>NoSuchBucket</Code><Message>the bucket is not there</Message></Error>",
        ),
        "bucket",
    );
}

#[test]
fn authorization_errors_fail_at_once() {
    fails_at_once(
        &response(
            "403 Forbidden",
            "<Error><Code>AccessDenied</Code><Message>no entry</Message></Error>",
        ),
        "no entry",
    );
    fails_at_once(&response("401 Unauthorized", ""), "401");
}

#[test]
fn not_implemented_fails_at_once() {
    fails_at_once(
        &response("501 Not Implemented", "no conditional writes here"),
        "no conditional writes here",
    );
}

#[test]
fn malformed_answers_fail_at_once() {
    // An empty store, whose uploads are answered without the ETag every
    // answer to one carries: the same answer again would be no better.
    let s = serve_script(Arc::new(|request: &str| {
        Some(if request.starts_with("PUT") {
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_string()
        } else if request.contains("list-type=2") {
            response(
                "200 OK",
                "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
            )
        } else {
            response("404 Not Found", "<Error><Code>NoSuchKey</Code></Error>")
        })
    }));
    let (took, ok, err) = init_s3(s.port);
    assert!(!ok, "{err}");
    assert!(err.contains("ETag"), "{err}");
    assert!(took < DEADLINE / 2, "took {took:?}: {err}");
    assert!(s.asked.load(Ordering::SeqCst) <= 6, "asked {:?}", s.asked);
}

#[test]
fn configuration_errors_fail_at_once() {
    // An Azure endpoint over plain http without AZURE_ALLOW_HTTP.
    let s = serve(Some("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".into()));
    let env = [
        ("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1".to_string()),
        ("AZURE_STORAGE_ACCOUNT_KEY", "a2V5".to_string()),
        (
            "AZURE_STORAGE_ENDPOINT",
            format!("http://127.0.0.1:{}/devstoreaccount1", s.port),
        ),
    ];
    let (took, ok, err) = init_at("az://container/store", &env);
    assert!(!ok, "{err}");
    assert!(took < DEADLINE / 2, "took {took:?}: {err}");
    assert_eq!(s.asked.load(Ordering::SeqCst), 0);
    assert!(err.contains("URL scheme is not allowed"), "{err}");
}

#[test]
fn busy_answers_are_retried_until_the_deadline() {
    for (status, said) in [
        ("503 Service Unavailable", "SlowDown"),
        ("500 Internal Server Error", "InternalError"),
        ("429 Too Many Requests", "SlowDown"),
        ("408 Request Timeout", "RequestTimeout"),
    ] {
        let body = format!("<Error><Code>{said}</Code></Error>");
        let s = serve(Some(response(status, &body)));
        retried_until_the_deadline(&s, said);
    }
}

#[test]
fn refused_connections_and_silence_are_retried_until_the_deadline() {
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (took, ok, err) = init_s3(port);
    assert!(!ok && took >= DEADLINE * 3 / 4, "{took:?}: {err}");
    // A server that takes requests and never answers.
    let s = serve(None);
    retried_until_the_deadline(&s, "deadline");
}
