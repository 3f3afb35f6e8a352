//! A real `detafs serve` on 127.0.0.1 for tests, and curl as its client.

use super::Env;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct Gateway {
    child: Child,
    pub url: String,
    /// The S3 endpoint (`--s3-listen`), if asked for.
    pub s3: Option<String>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// The gateway's peak resident memory so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        kib * 1024
    }

    /// Connections open now besides the one that asks (`detafs_connections`).
    pub fn connections(&self) -> u64 {
        self.connections_probe()()
    }

    /// `connections` as a function another thread can call.
    pub fn connections_probe(&self) -> impl Fn() -> u64 + Send + 'static {
        let url = format!("{}/metrics", self.url);
        move || {
            let (_, m) = curl(&[&url]);
            let m = String::from_utf8(m).unwrap();
            let open: u64 = m
                .lines()
                .find_map(|l| l.strip_prefix("detafs_connections "))
                .expect("detafs_connections")
                .parse()
                .unwrap();
            open - 1
        }
    }
}

/// Starts `detafs serve` on a free port; returns once it listens.
pub fn serve(env: &Env) -> Gateway {
    serve_with(env, &[])
}

pub fn serve_with(env: &Env, extra: &[&str]) -> Gateway {
    serve_failing(env, extra, "")
}

/// `serve_with`, the gateway run with FAILPOINTS `failpoints`.
pub fn serve_failing(env: &Env, extra: &[&str], failpoints: &str) -> Gateway {
    let mut command = env.command();
    if !failpoints.is_empty() {
        command.env("FAILPOINTS", failpoints);
    }
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(u) = line.strip_prefix("serving ") {
            break u.trim_end_matches('/').to_string();
        }
    };
    // Said right after, when asked for.
    let s3 = extra.contains(&"--s3-listen").then(|| {
        let line = lines.next().expect("serve exited").unwrap();
        let at = line.strip_prefix("S3 endpoint ").expect("the S3 endpoint");
        at.trim_end_matches('/').to_string()
    });
    // Keep reading its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Gateway { child, url, s3 }
}

/// The gateway's certificate, for clients that check it.
pub fn cert(env: &Env) -> std::path::PathBuf {
    let mut stack = vec![env.cache.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.file_name() == "gateway-cert.pem" {
                return e.path();
            }
        }
    }
    panic!("no certificate made");
}

/// (status, body) of `curl -k` with `args`.
pub fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sk", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .unwrap();
    let mut body = out.stdout;
    let at = body.iter().rposition(|&b| b == b'\n').unwrap();
    let status = String::from_utf8_lossy(&body[at + 1..]).parse().unwrap();
    body.truncate(at);
    (status, body)
}

pub fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

pub fn key(env: &Env, name: &str, scopes: &str) -> String {
    env.ok(&["apikey", "create", name, "--scopes", scopes])
        .trim()
        .to_string()
}

/// An S3 key (access key id, secret): `apikey create NAME --s3`.
pub fn s3_key(env: &Env, name: &str, scopes: &str) -> (String, String) {
    let out = env.ok(&["apikey", "create", name, "--scopes", scopes, "--s3"]);
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .trim()
            .to_string()
    };
    (
        field("aws_access_key_id = "),
        field("aws_secret_access_key = "),
    )
}

/// `curl --aws-sigv4` (path as is) to `endpoint/path` of an S3 endpoint:
/// (status, body).
pub fn s3_curl(
    endpoint: &str,
    key: &(String, String),
    args: &[&str],
    path: &str,
) -> (u16, Vec<u8>) {
    let user = format!("{}:{}", key.0, key.1);
    let url = format!("{endpoint}/{path}");
    let signed = [
        "--path-as-is",
        "--aws-sigv4",
        "aws:amz:us-east-1:s3",
        "-H",
        "x-amz-content-sha256: UNSIGNED-PAYLOAD",
        "--user",
        &user,
    ];
    curl(&[&signed[..], args, &[&url]].concat())
}

pub fn bearer(k: &str) -> String {
    format!("Authorization: Bearer {k}")
}

/// (status, body) of a POST of `body` (JSON) to `url` with API key `key`.
pub fn post_json(url: &str, key: &str, body: &str) -> (u16, Vec<u8>) {
    curl(&["-X", "POST", url, "-H", &bearer(key), "-d", body])
}

/// Sets the store's policy to `text` (the test's gateways read it again
/// for every request: `DETAFS_TEST_KEYS_FRESH`).
pub fn set_policy_and_wait(env: &Env, text: &str) {
    let file = env.path("policy.yaml");
    std::fs::write(&file, text).unwrap();
    env.ok(&["policy", "set", file.to_str().unwrap()]);
}

/// A store of one 64 MiB file (`big.bin`, v1) served by two gateways,
/// this host's and another's (`other`, kept while they serve), a read key,
/// and a bundle of both certificates.
pub struct TwoGateways {
    pub big: Vec<u8>,
    pub key: String,
    pub first: Gateway,
    pub second: Gateway,
    pub bundle: std::path::PathBuf,
    pub other: Env,
}

pub fn two_gateways(env: &Env) -> TwoGateways {
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let big = super::noise(64 << 20, 7);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    env.commit(&src, "v1");
    let key = key(env, "k", "read");
    let other = env.other_host();
    let (first, second) = (serve(env), serve(&other));
    let bundle = env.path("gateways.pem");
    let pems = [cert(env), cert(&other)].map(|c| std::fs::read_to_string(c).unwrap());
    std::fs::write(&bundle, pems.concat()).unwrap();
    TwoGateways {
        big,
        key,
        first,
        second,
        bundle,
        other,
    }
}

/// One side of the model of what a policy hides (tests/gateway.rs,
/// tests/remote_mount.rs): a store of two versions of `ds` whose files
/// `private/*` and `mix/secret.txt` are there (`hidden`) or not, the rest
/// alike to the byte and the time, under one policy that denies keys `k`
/// (REST) and `k3` (S3), and `w` and `w3` which may commit too, reading
/// them; with `hidden`, a dataset `other`
/// too, which they may not see. Served on TLS and S3; with what a client
/// needs to reach it.
pub fn model_side(hidden: bool) -> (Env, Gateway, Value) {
    let env = Env::new();
    let src = env.path("src");
    for v in 1..=2 {
        model_tree(&src, v, hidden);
        env.commit(&src, &format!("v{v}"));
    }
    if hidden {
        env.ok(&["dataset", "create", "other"]);
        env.commit_to("other", &src, "o");
    }
    let rest_key = key(&env, "k", "read");
    let (s3_id, s3_secret) = s3_key(&env, "k3", "read");
    let write_key = key(&env, "w", "read,commit");
    let (w3_id, w3_secret) = s3_key(&env, "w3", "read,commit");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: k, effect: allow, principals: [\"key:k\", \"key:k3\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}\n  - {name: w, effect: allow, principals: [\"key:w\", \"key:w3\"], actions: [\"dataset:read\", \"dataset:versions\", \"dataset:commit\"], resources: [\"datasets/ds\"]}\n  - {name: no_private, effect: deny, principals: [\"key:k\", \"key:k3\", \"key:w\", \"key:w3\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\", \"datasets/ds/versions/*/files/mix/secret.txt\"]}\n",
    );
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let key_file = env.path("k.key");
    std::fs::write(&key_file, &rest_key).unwrap();
    std::fs::create_dir_all(env.path("home")).unwrap();
    let setup = serde_json::json!({
        "rest": g.url, "s3": g.s3.clone().unwrap(), "ca": cert(&env),
        "rest_key": rest_key, "s3_key": s3_id, "s3_secret": s3_secret,
        "write_key": write_key, "w3_key": w3_id, "w3_secret": w3_secret,
        "key_file": key_file, "home": env.path("home"),
    });
    (env, g, setup)
}

/// Version `v` of the model's files under `root` (the hidden ones only
/// with `hidden`), with the same times on both sides.
fn model_tree(root: &std::path::Path, v: u64, hidden: bool) {
    let files = [
        ("top.txt", false),
        ("pub/a.csv", false),
        ("pub/sub/b.csv", false),
        ("mix/open.txt", false),
        ("private/s.csv", true),
        ("private/sub/t.csv", true),
        ("mix/secret.txt", true),
    ];
    let _ = std::fs::remove_dir_all(root);
    for (f, secret) in files {
        if secret && !hidden {
            continue;
        }
        let at = root.join(f);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, format!("{f} in v{v}\n")).unwrap();
        let t = filetime::FileTime::from_unix_time(1_700_000_000 + v as i64, 0);
        filetime::set_file_mtime(&at, t).unwrap();
    }
    // Deepest first: each name made in a folder moved its mtime.
    let mut dirs = vec![root.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        for e in std::fs::read_dir(&dirs[i]).unwrap().flatten() {
            if e.path().is_dir() {
                dirs.push(e.path());
            }
        }
        i += 1;
    }
    for d in dirs.iter().rev() {
        filetime::set_file_mtime(d, filetime::FileTime::from_unix_time(1_700_000_000, 0)).unwrap();
    }
}

/// `detafs` of `env` through gateway `url` with the API key in
/// `key_file`, trusting `env`'s certificate: `args` run, their output.
pub fn through(
    env: &Env,
    url: &str,
    key_file: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    env.command()
        .args(["--store", url, "--api-key-file"])
        .arg(key_file)
        .arg("--ca-cert")
        .arg(cert(env))
        .args(args)
        .output()
        .unwrap()
}
