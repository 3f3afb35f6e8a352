//! `detafs serve`: a real gateway on 127.0.0.1 over TLS, its clients curl
//! and Python's requests (which checks the self-signed certificate).

mod common;

use common::gateway::{
    Gateway, bearer, cert, curl, json_of, key, model_side, post_json, s3_curl, s3_key, serve,
    serve_with, set_policy_and_wait, through, two_gateways,
};
use common::{Env, two_versions, within};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_seeds_workflow_through_python_requests_checking_the_certificate() {
    let env = Env::empty();
    env.ok(&["init"]);
    let k = key(&env, "alice", "read,commit,create");
    let g = serve(&env);
    let script = r#"
import json, requests, sys
base, key, cert = sys.argv[1], sys.argv[2], sys.argv[3]
h = {"Authorization": "Bearer " + key}
r = requests.post(base + "/datasets", json={"name": "ds-123"}, headers=h, verify=cert)
assert r.status_code == 201, r.text
ds = r.json()["id"]
r = requests.post(base + "/datasets/" + ds + "/commit", headers={**h, "Content-Type": "application/json"},
    data=r'{"delta": "{\"added\": [\"row1\"], \"removed\": []}", "commit_message": "Add first row"}', verify=cert)
assert r.status_code == 201, r.text
r = requests.get(base + "/datasets/" + ds + "/versions", headers=h, verify=cert)
assert r.status_code == 200, r.text
print(json.dumps(r.json()))
"#;
    let out = common::run_ok(
        Command::new("python3")
            .args(["-c", script, &g.url, &k])
            .arg(cert(&env)),
    );
    let versions = json_of(out.as_bytes());
    let v = versions.as_array().unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["version_id"], "v1");
    assert_eq!(v[0]["author"], "key:alice");
    assert!(v[0]["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(v[0]["delta_size"].as_u64().unwrap() > 0);
    // The row is in the table, as the CLI sees it.
    assert_eq!(env.ok(&["cat", "ds-123", "v1", "data.jsonl"]), "\"row1\"\n");
    // A client that does not trust the certificate is refused by its own
    // check: TLS is real.
    let out = Command::new("python3")
        .args([
            "-c",
            "import requests,sys; requests.get(sys.argv[1] + '/health')",
            &g.url,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SSL"));
}

#[test]
fn credentials_and_the_policy_decide_401_and_403() {
    let env = Env::new();
    env.ok(&["dataset", "create", "other"]);
    let admin = key(&env, "admin", "admin");
    let ro = key(&env, "ro", "read");
    let scoped = key(&env, "scoped", "read,commit");
    let g = serve(&env);
    let commit = |k: &str, ds: &str| {
        let url = format!("{}/datasets/{ds}/commit", g.url);
        let body = json!({"files": {"a.txt": "aGVsbG8="}, "commit_message": "m"}).to_string();
        post_json(&url, k, &body)
    };
    // No credentials, a made-up key, a key with a wrong secret: 401.
    let (s, b) = curl(&[&format!("{}/datasets", g.url)]);
    assert_eq!(s, 401);
    assert_eq!(json_of(&b)["error"]["code"], "unauthenticated");
    assert_eq!(
        curl(&[&format!("{}/datasets", g.url), "-H", &bearer("dtfs_0_x")]).0,
        401
    );
    let wrong = format!("{}x", &ro[..ro.len() - 1]);
    assert_eq!(
        curl(&[&format!("{}/datasets", g.url), "-H", &bearer(&wrong)]).0,
        401
    );
    // A read-only key may not commit.
    let (s, b) = commit(&ro, "ds");
    assert_eq!(s, 403, "{}", String::from_utf8_lossy(&b));
    assert!(
        json_of(&b)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dataset:commit")
    );
    assert_eq!(commit(&scoped, "ds").0, 201);
    // A policy: the scoped key commits to `other` only, sees `ds` not at all.
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\", \"key:admin\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: scoped, effect: allow, principals: [\"key:scoped\"], actions: [\"dataset:*\"], resources: [\"datasets/other\"]}\n",
    );
    let (s, b) = commit(&scoped, "ds");
    assert_eq!(s, 403, "{}", String::from_utf8_lossy(&b));
    assert!(String::from_utf8_lossy(&b).contains("denied by default"));
    assert_eq!(commit(&scoped, "other").0, 201);
    let (s, b) = curl(&[&format!("{}/datasets", g.url), "-H", &bearer(&scoped)]);
    assert_eq!(s, 200);
    assert_eq!(json_of(&b), json!([{"id": "other", "name": "other"}]));
    // A version it may not see is a 404, as one that does not exist.
    let (s, _) = curl(&[
        &format!("{}/datasets/ds/versions/v1", g.url),
        "-H",
        &bearer(&scoped),
    ]);
    assert_eq!(s, 404);
    assert_eq!(
        curl(&[
            &format!("{}/datasets/ds/versions/v1", g.url),
            "-H",
            &bearer(&admin)
        ])
        .0,
        200
    );
    // A revoked key is refused from the next request on (a gateway
    // trusts what it read for 2 s; none in tests).
    env.ok(&["apikey", "revoke", "admin"]);
    assert_eq!(
        curl(&[&format!("{}/datasets", g.url), "-H", &bearer(&admin)]).0,
        401
    );
    assert!(env.ok(&["apikey", "list"]).contains("(revoked)"));
    // Plain HTTP to the TLS port gets no answer.
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(g.url.replace("https://", "http://") + "/health")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000");
}

#[test]
fn files_ranges_etags_limits_conflicts_and_missing_objects() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("d/big.bin"), &big).unwrap();
    std::fs::write(src.join("t.csv"), "city,temp\nOslo,3\n").unwrap();
    std::fs::write(
        src.join("never-read.txt"),
        "read by no one before its pack goes",
    )
    .unwrap();
    env.commit(&src, "v1");
    let k = key(&env, "k", "read,commit");
    let g = serve(&env);
    let file = format!("{}/datasets/ds/versions/v1/files/d/big.bin", g.url);
    let (s, body) = curl(&[&file, "-H", &bearer(&k)]);
    assert_eq!(s, 200);
    assert!(body == big, "the whole file, {} bytes", body.len());

    let (s, body) = curl(&[
        &file,
        "-H",
        &bearer(&k),
        "-H",
        "Range: bytes=1000000-1000099",
    ]);
    assert_eq!(s, 206);
    assert_eq!(body, &big[1_000_000..1_000_100]);
    let (s, body) = curl(&[&file, "-H", &bearer(&k), "-H", "Range: bytes=-10"]);
    assert_eq!((s, &body[..]), (206, &big[big.len() - 10..]));
    assert_eq!(
        curl(&[&file, "-H", &bearer(&k), "-H", "Range: bytes=9000000-"]).0,
        416
    );
    let (s, body) = curl(&[
        &file,
        "-H",
        &bearer(&k),
        "-H",
        "Range: bytes=0-18446744073709551615",
    ]);
    assert!(s == 206 && body == big, "{s}: a range to the end of u64");
    // ETag, then 304.
    let out = Command::new("curl")
        .args([
            "-sk",
            "-D",
            "-",
            "-o",
            "/dev/null",
            &file,
            "-H",
            &bearer(&k),
        ])
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let etag = headers
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .unwrap()
        .trim()
        .to_string();
    let (s, body) = curl(&[
        &file,
        "-H",
        &bearer(&k),
        "-H",
        &format!("If-None-Match: {etag}"),
    ]);
    assert_eq!((s, body.len()), (304, 0));
    // A folder lists as JSON.
    let (s, body) = curl(&[
        &format!("{}/datasets/ds/versions/v1/files/d", g.url),
        "-H",
        &bearer(&k),
    ]);
    assert_eq!(s, 200);
    assert_eq!(json_of(&body)[0]["name"], "big.bin");
    // 10 MB + 1 byte: 413, naming the limit and the other way.
    let huge = env.path("huge.json");
    std::fs::write(&huge, vec![b' '; 10_000_001]).unwrap();
    let url = format!("{}/datasets/ds/commit", g.url);
    let (s, body) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        &bearer(&k),
        "--data-binary",
        &format!("@{}", huge.display()),
    ]);
    assert_eq!(s, 413);
    let msg = json_of(&body)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("10000000 bytes") && msg.contains("uploads"),
        "{msg}"
    );
    // Two commits from v1: disjoint paths are rebased, the same path is 409.
    let post = |body: Value| post_json(&url, &k, &body.to_string());
    let (s, b) = post(
        json!({"parent": "v1", "commit_message": "a row", "delta": {"path": "t.csv", "added": [{"city": "Lima", "temp": 19}]}}),
    );
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    let (s, b) =
        post(json!({"parent": "v1", "commit_message": "other file", "files": {"n.txt": "bmV3"}}));
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["version_id"], "v3");
    let (s, b) = post(
        json!({"parent": "v1", "commit_message": "same table", "delta": {"path": "t.csv", "removed": [["Oslo", "3"]]}}),
    );
    assert_eq!(s, 409, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["error"]["details"]["paths"], json!(["t.csv"]));
    assert_eq!(
        env.ok(&["cat", "ds", "v3", "t.csv"]),
        "city,temp\nOslo,3\nLima,19\n"
    );
    assert_eq!(env.ok(&["cat", "ds", "v3", "n.txt"]), "new");
    // An object deleted from the store by hand (and from the cache): 404
    // naming it. (Its folder's tree is in the gateway's memory already.)
    let (s, _) = curl(&[
        &format!("{}/datasets/ds/versions/v1/files", g.url),
        "-H",
        &bearer(&k),
    ]);
    assert_eq!(s, 200);
    for dir in [
        std::path::PathBuf::from(&env.store).join("packs"),
        env.cache.clone(),
    ] {
        for e in common::files_under(&dir)
            .into_iter()
            .filter(|p| p.to_string_lossy().contains("/blobs/") || dir.ends_with("packs"))
        {
            std::fs::remove_file(e).unwrap();
        }
    }
    let (s, body) = curl(&[
        &format!("{}/datasets/ds/versions/v1/files/never-read.txt", g.url),
        "-H",
        &bearer(&k),
    ]);
    let err = json_of(&body);
    assert_eq!(s, 404, "{err}");
    assert_eq!(err["error"]["code"], "missing_object");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing from the store"),
        "{err}"
    );
}

/// An RSA key made by openssl, and its public half as a JWK.
fn rsa_key(dir: &std::path::Path, kid: &str) -> (Vec<u8>, Value) {
    let pem = dir.join(format!("{kid}.pem"));
    common::run_ok(
        Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&pem)
            .arg("2048"),
    );
    let out = common::run_ok(
        Command::new("openssl")
            .args(["rsa", "-noout", "-modulus", "-in"])
            .arg(&pem),
    );
    let modulus = hex::decode(out.trim().strip_prefix("Modulus=").unwrap()).unwrap();
    let b64 =
        |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b);
    let jwk = json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64(&modulus), "e": "AQAB"});
    (std::fs::read(pem).unwrap(), jwk)
}

/// A P-256 key made by openssl (PKCS#8), and its public half as a JWK.
fn ec_key(dir: &std::path::Path, kid: &str) -> (Vec<u8>, Value) {
    let pem = dir.join(format!("{kid}.pem"));
    common::run_ok(Command::new("sh").arg("-c").arg(format!(
        "openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out {}",
        pem.display()
    )));
    let der = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&pem)
        .output()
        .unwrap()
        .stdout;
    // The DER ends with the uncompressed point: 0x04, x, y.
    let point = &der[der.len() - 65..];
    assert_eq!(point[0], 4);
    let b64 =
        |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b);
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig", "x": b64(&point[1..33]), "y": b64(&point[33..])});
    (std::fs::read(pem).unwrap(), jwk)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(pem: &[u8], kid: &str, claims: Value) -> String {
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(
        &h,
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(pem).unwrap(),
    )
    .unwrap()
}

fn es256_token(pem: &[u8], kid: &str, claims: Value) -> String {
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    h.kid = Some(kid.into());
    jsonwebtoken::encode(
        &h,
        &claims,
        &jsonwebtoken::EncodingKey::from_ec_pem(pem).unwrap(),
    )
    .unwrap()
}

/// `curl` with cookie jar `jar`: the status.
fn web(jar: &std::path::Path, args: &[&str]) -> String {
    let jar = jar.to_str().unwrap();
    let out = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-c",
            jar,
            "-b",
            jar,
        ])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The web page's sign-in with `credential` (a key or a token), cookies
/// in `jar`: its status (303 signed in, 401 refused).
fn web_sign_in(jar: &std::path::Path, url: &str, credential: &str) -> String {
    web(jar, &[&format!("{url}/ui/login")]);
    let cookies = std::fs::read_to_string(jar).unwrap();
    let line = cookies
        .lines()
        .find(|l| l.contains("detafs_login"))
        .unwrap();
    let csrf = line.rsplit('\t').next().unwrap();
    web(
        jar,
        &[
            "--data-urlencode",
            &format!("key={credential}"),
            "--data",
            &format!("csrf={csrf}"),
            &format!("{url}/ui/login"),
        ],
    )
}

#[test]
fn oauth2_bearer_tokens_are_checked_against_the_jwks() {
    let env = Env::new();
    let (k1, jwk1) = rsa_key(env.dir.path(), "k1");
    let (other, _) = rsa_key(env.dir.path(), "other");
    let (e1, ejwk1) = ec_key(env.dir.path(), "e1");
    let (other_ec, _) = ec_key(env.dir.path(), "other-ec");
    let jwks = env.path("jwks.json");
    std::fs::write(
        &jwks,
        json!({"keys": [jwk1.clone(), ejwk1.clone()]}).to_string(),
    )
    .unwrap();
    let g = serve_with(
        &env,
        &[
            "--jwks",
            jwks.to_str().unwrap(),
            "--issuer",
            "https://idp.test",
            "--audience",
            "detafs",
        ],
    );
    let claims = |sub: &str, scope: &str| json!({"sub": sub, "iss": "https://idp.test", "aud": "detafs", "exp": now() + 600, "nbf": now() - 5, "scope": scope});
    let url = format!("{}/datasets/ds/commit", g.url);
    let body = json!({"delta": {"added": ["r"]}, "commit_message": "by token"}).to_string();
    let post = |t: &str| post_json(&url, t, &body);
    // Good token with commit scope: committed, authored by its subject.
    let (s, b) = post(&token(&k1, "k1", claims("ci-pipeline", "read commit")));
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["author"], "token:ci-pipeline");
    // ES256 as well. (A delta reads the file it changes: it takes the read
    // scope too; a commit-only token is refused before anything is read.)
    let (s, b) = post(&es256_token(&e1, "e1", claims("ec-pipeline", "commit")));
    assert_eq!(s, 403, "{}", String::from_utf8_lossy(&b));
    let (s, b) = post(&es256_token(
        &e1,
        "e1",
        claims("ec-pipeline", "read commit"),
    ));
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["author"], "token:ec-pipeline");
    // Only read: 403.
    assert_eq!(post(&token(&k1, "k1", claims("reader", "read"))).0, 403);
    // Expired, not yet valid, another audience or issuer, signed by another
    // key under k1's id, HS256: all 401.
    let mut expired = claims("ci", "commit");
    expired["exp"] = json!(now() - 300);
    let mut early = claims("ci", "commit");
    early["nbf"] = json!(now() + 300);
    let mut aud = claims("ci", "commit");
    aud["aud"] = json!("someone-else");
    let mut iss = claims("ci", "commit");
    iss["iss"] = json!("https://evil.test");
    let mut hs = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    hs.kid = Some("k1".into());
    let hs256 = jsonwebtoken::encode(
        &hs,
        &claims("ci", "commit"),
        &jsonwebtoken::EncodingKey::from_secret(b"guess"),
    )
    .unwrap();
    for (what, t) in [
        ("expired", token(&k1, "k1", expired)),
        ("not yet valid", token(&k1, "k1", early)),
        ("audience", token(&k1, "k1", aud)),
        ("issuer", token(&k1, "k1", iss)),
        ("signature", token(&other, "k1", claims("ci", "commit"))),
        (
            "EC signature",
            es256_token(&other_ec, "e1", claims("ci", "commit")),
        ),
        // An EC-signed token naming the RSA key, and the reverse.
        ("EC on RSA", es256_token(&e1, "k1", claims("ci", "commit"))),
        ("RSA on EC", token(&k1, "e1", claims("ci", "commit"))),
        ("HS256", hs256),
        ("alg none", {
            let b64 = |v: Value| {
                base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    v.to_string(),
                )
            };
            let head = b64(json!({"alg": "none", "typ": "JWT", "kid": "k1"}));
            format!("{head}.{}.", b64(claims("ci", "commit")))
        }),
        ("garbage", "not.a.token".to_string()),
    ] {
        let (s, b) = post(&t);
        assert_eq!(s, 401, "{what}: {}", String::from_utf8_lossy(&b));
    }
    // The web page signs in with a token as with a key: a good one opens a
    // session whose pages the REST API answers as the token's caller; an
    // expired one is refused at the form.
    let jar = env.path("jar");
    let sign_in = |t: &str| web_sign_in(&jar, &g.url, t);
    let mut late = claims("web-reader", "read");
    late["exp"] = json!(now() - 300);
    assert_eq!(sign_in(&token(&k1, "k1", late)), "401");
    assert_eq!(
        sign_in(&token(&k1, "k1", claims("web-reader", "read"))),
        "303"
    );
    assert_eq!(web(&jar, &[&format!("{}/ui/datasets/ds", g.url)]), "200");
    // A key the set does not hold yet: refused, then taken once the set
    // has it (the gateway reads it again).
    let (k2, jwk2) = rsa_key(env.dir.path(), "k2");
    let t2 = token(&k2, "k2", claims("rotated", "commit read"));
    assert_eq!(post(&t2).0, 401);
    // (A gateway reads the set again for an unknown key at most every 2 s;
    // in tests at once.)
    std::fs::write(&jwks, json!({"keys": [jwk1, ejwk1, jwk2]}).to_string()).unwrap();
    let (s, b) = post(&t2);
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    // The CLI through the gateway with a token file, read at each request:
    // a token another key signed is refused, naming the credentials.
    let token_file = env.path("token");
    let log = || {
        env.command()
            .args(["--store", &g.url, "--token-file"])
            .arg(&token_file)
            .arg("--ca-cert")
            .arg(cert(&env))
            .args(["log", "ds"])
            .output()
            .unwrap()
    };
    std::fs::write(&token_file, token(&k1, "k1", claims("cli", "read"))).unwrap();
    let out = log();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("token:ci-pipeline"));
    std::fs::write(&token_file, token(&other, "k1", claims("cli", "read"))).unwrap();
    let out = log();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused the credentials"));
    // The policy sees token:SUBJECT and the token's claims.
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: ci, effect: allow, principals: [\"claim:team=data\"], actions: [\"dataset:commit\"], resources: [\"datasets/ds\"]}\n",
    );
    let mut team = claims("someone", "commit");
    team["team"] = json!("data");
    // (Files: a delta would read its table, which this policy does not allow.)
    let body2 = json!({"files": {"t.txt": "dA=="}, "commit_message": "team"}).to_string();
    let (s, b) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        &bearer(&token(&k1, "k1", team)),
        "-d",
        &body2,
    ]);
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    let (s, _) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        &bearer(&token(&k1, "k1", claims("ci-pipeline", "commit"))),
        "-d",
        &body2,
    ]);
    assert_eq!(s, 403);
}

#[test]
fn a_large_file_goes_in_through_an_upload_and_is_committed_with_others_at_once() {
    let env = Env::new();
    let k = key(&env, "k", "read,commit");
    // The file goes in and out in windows: what stays in memory is what
    // the gateway is told to keep of what it read.
    let g = serve_with(&env, &["--cache-memory", "64MiB"]);
    // 1 GiB, beyond the body limit, streamed (curl sends it from the file).
    let big = env.path("big.bin");
    common::run_ok(Command::new("sh").arg("-c").arg(format!(
        "head -c 1073741824 /dev/urandom > {}",
        big.display()
    )));
    let want = common::run_ok(Command::new("sha256sum").arg(&big));
    let put = format!("{}/datasets/ds/uploads/data/big.bin", g.url);
    let (s, b) = curl(&[
        "-X",
        "PUT",
        &put,
        "-H",
        &bearer(&k),
        "-T",
        big.to_str().unwrap(),
    ]);
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    let up = json_of(&b);
    assert_eq!(up["size"], 1_073_741_824);
    // The body went to disk as it came, never into memory whole.
    assert!(
        g.peak_rss() < 400 << 20,
        "peak RSS {} MiB",
        g.peak_rss() >> 20
    );
    // Nothing is a version until the commit names it.
    assert!(env.ok(&["log", "ds"]).is_empty());
    let url = format!("{}/datasets/ds/commit", g.url);
    let body = json!({"commit_message": "big and small", "uploads": [up["upload"]], "files": {"note.txt": "c21hbGw="}});
    let (s, b) = post_json(&url, &k, &body.to_string());
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["files_added"], 2);
    // Read back through the gateway, by hash.
    let got = env.path("got.bin");
    let file = format!("{}/datasets/ds/versions/v1/files/data/big.bin", g.url);
    let out = Command::new("curl")
        .args([
            "-sk",
            "-o",
            got.to_str().unwrap(),
            "-w",
            "%{http_code}",
            &file,
            "-H",
            &bearer(&k),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let got_sum = common::run_ok(Command::new("sha256sum").arg(&got));
    assert_eq!(got_sum.split(' ').next(), want.split(' ').next());
    assert!(
        g.peak_rss() < 400 << 20,
        "peak RSS {} MiB",
        g.peak_rss() >> 20
    );
    // Clients that hang up mid-file (a reset or a close, a few KiB in) end
    // their own request only, not the gateway (writes to them fail with
    // EPIPE, which must not be a signal that ends the process).
    let hang_up = r#"
import socket, ssl, struct, sys
host, port = sys.argv[1].rsplit("/", 1)[-1].split(":")
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
for i in range(20):
    raw = socket.create_connection((host, int(port)))
    s = ctx.wrap_socket(raw)
    s.sendall(f"GET {sys.argv[2]} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {sys.argv[3]}\r\n\r\n".encode())
    s.recv(4096)
    if i % 2:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        s.shutdown(socket.SHUT_RDWR)
    s.close()
"#;
    common::run_ok(Command::new("python3").args([
        "-c",
        hang_up,
        &g.url,
        "/datasets/ds/versions/v1/files/data/big.bin",
        &k,
    ]));
    // Every hung-up connection ended (its writes failed), and the
    // gateway lives.
    within(
        Duration::from_secs(30),
        "the hung-up connections' end",
        || g.connections() == 0,
    );
    assert_eq!(
        curl(&[&format!("{}/health", g.url)]).0,
        200,
        "the gateway lives"
    );
    // An upload is for its dataset; a made-up one is refused.
    env.ok(&["dataset", "create", "other"]);
    let other = format!("{}/datasets/other/commit", g.url);
    let (s, b) = curl(&[
        "-X",
        "POST",
        &other,
        "-H",
        &bearer(&k),
        "-d",
        &json!({"commit_message": "m", "uploads": [up["upload"]]}).to_string(),
    ]);
    assert_eq!(s, 400, "{}", String::from_utf8_lossy(&b));
    let (s, _) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        &bearer(&k),
        "-d",
        &json!({"commit_message": "m", "uploads": ["00ff"]}).to_string(),
    ]);
    assert_eq!(s, 400);
}

/// Objects crafted by someone with write access to the bucket (a format 1
/// store, objects in the clear): a key object that does not decode, names
/// another id, or claims an unknown scope is no key, and the others keep
/// working; an upload manifest naming a tree that is not there, or a
/// "tree" that is a file's chunk, is refused with an error; the gateway
/// stays up throughout.
#[test]
fn crafted_key_and_upload_objects_are_refused_not_obeyed() {
    let env = Env::empty_local();
    env.ok(&["init", "--plaintext"]);
    env.ok(&["dataset", "create", "ds"]);
    let k = key(&env, "k", "read,commit");
    let id = k.split('_').nth(1).unwrap().to_string();
    let theirs = json_of(&env.objects.read(&format!("apikeys/{id}.json")));
    let mut forged = theirs.clone();
    forged["scopes"] = json!(["dataset:everything"]);
    env.objects
        .write("apikeys/00ff.json", b"{not json".to_vec());
    env.objects
        .write("apikeys/0aaa.json", theirs.to_string().into_bytes());
    env.objects.write("apikeys/0bbb.json", vec![b' '; 2 << 20]);
    let g = serve(&env);
    let url = format!("{}/datasets/ds/commit", g.url);
    let body = json!({"commit_message": "m", "files": {"a.txt": "eA=="}}).to_string();
    let (s, b) = post_json(&url, &k, &body);
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    // The real key made to claim an unknown scope: refused, as no key.
    env.objects.write(
        &format!("apikeys/{id}.json"),
        forged.to_string().into_bytes(),
    );
    common::within(
        Duration::from_secs(10),
        "the forged key to be dropped",
        || post_json(&url, &k, &body).0 == 401,
    );
    env.objects.write(
        &format!("apikeys/{id}.json"),
        theirs.to_string().into_bytes(),
    );
    common::within(Duration::from_secs(10), "the key to work again", || {
        curl(&[&format!("{}/datasets", g.url), "-H", &bearer(&k)]).0 == 200
    });
    // Upload manifests naming what is not an upload's tree.
    let (s, b) = curl(&[
        "-X",
        "PUT",
        &format!("{}/datasets/ds/uploads/u.bin", g.url),
        "-H",
        &bearer(&k),
        "--data-binary",
        "upload bytes",
    ]);
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    let up = json_of(&b)["upload"].as_str().unwrap().to_string();
    let manifest = json_of(&env.objects.read(&format!("uploads/{up}.json")));
    let tree = manifest["tree"].clone();
    let versions = env.log().len();
    for (name, tree) in [
        (
            "missing",
            json!({"id": "00".repeat(32), "pack": "11".repeat(32), "offset": 8, "len": 100}),
        ),
        // In the upload's own pack, beyond its end or longer than any
        // object may be (an id not seen yet, so it must be read).
        ("out of its pack", {
            let mut t = tree.clone();
            t["id"] = json!("22".repeat(32));
            t["offset"] = json!(1u64 << 40);
            t
        }),
        ("too long", {
            let mut t = tree.clone();
            t["id"] = json!("33".repeat(32));
            t["len"] = json!(u32::MAX);
            t
        }),
    ] {
        let mut m = manifest.clone();
        m["tree"] = tree;
        env.objects
            .write(&format!("uploads/{up}.json"), m.to_string().into_bytes());
        let body = json!({"commit_message": name, "uploads": [up]}).to_string();
        let (s, b) = post_json(&url, &k, &body);
        assert!((400..600).contains(&s), "{name}: {s}");
        assert!(json_of(&b)["error"]["message"].is_string(), "{name}");
    }
    assert_eq!(env.log().len(), versions, "nothing committed");
    assert_eq!(curl(&[&format!("{}/health", g.url)]).0, 200);
}

/// `serve --policy FILE` narrows the store's policy (here none: every key
/// may do what its scopes allow): a request must pass both. A file that
/// does not check is refused at start with its line and column.
#[test]
fn a_gateways_own_policy_narrows_the_stores() {
    let env = Env::new();
    let k = key(&env, "k", "read,commit");
    let file = env.path("gateway-policy.yaml");
    std::fs::write(&file, "policies:\n  - {name: read-only, effect: allow, principals: [\"*\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"*\"]}\n").unwrap();
    let commit = |g: &Gateway| {
        let body = json!({"commit_message": "m", "files": {"a.txt": "eA=="}}).to_string();
        post_json(&format!("{}/datasets/ds/commit", g.url), &k, &body)
    };
    {
        let open = serve(&env);
        assert_eq!(commit(&open).0, 201);
    }
    let g = serve_with(&env, &["--policy", file.to_str().unwrap()]);
    let (s, b) = commit(&g);
    assert_eq!(s, 403, "{}", String::from_utf8_lossy(&b));
    assert!(String::from_utf8_lossy(&b).contains("this gateway's policy"));
    let (s, got) = curl(&[
        &format!("{}/datasets/ds/versions/v1/files/a.txt", g.url),
        "-H",
        &bearer(&k),
    ]);
    assert_eq!((s, &got[..]), (200, &b"x"[..]));
    std::fs::write(
        &file,
        "policies:\n  - {name: x, effect: allow, actions: [\"dataset:fly\"], resources: [\"*\"]}\n",
    )
    .unwrap();
    let (code, err) = env.fails(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--policy",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("dataset:fly"), "{err}");
}

/// Slow clients, all at once: one that never finishes its headers is cut
/// off; one that stops in the middle of a body gets 408; one that stops
/// reading a large file has its response ended. Meanwhile others are served.
#[test]
fn slow_clients_time_out() {
    let env = Env::new();
    let big = env.path("src/big.bin");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::write(&big, vec![7u8; 64 << 20]).unwrap();
    env.commit(&env.path("src"), "v1");
    let k = key(&env, "k", "read,commit");
    let g = serve(&env);
    let slow = r#"
import socket, ssl, sys, threading, time
host, port = sys.argv[1].rsplit("/", 1)[-1].split(":")
key = sys.argv[2]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
def conn():
    s = ctx.wrap_socket(socket.create_connection((host, int(port))))
    s.settimeout(60)
    return s
def until_closed(s):
    got = b""
    while True:
        try:
            b = s.recv(1 << 16)
        except (ConnectionResetError, ssl.SSLError):
            return got
        if not b:
            return got
        got += b
out = {}
def headers():
    s = conn(); t = time.time()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    got = until_closed(s)
    out["headers"] = (round(time.time() - t), got[:12])
def body():
    s = conn(); t = time.time()
    s.sendall(f'POST /datasets/ds/commit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: 100\r\n\r\n{{"commit'.encode())
    got = until_closed(s)
    out["body"] = (round(time.time() - t), got[:12])
def reader():
    s = conn(); t = time.time()
    s.sendall(f"GET /datasets/ds/versions/v1/files/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    first = s.recv(4096)
    time.sleep(45)
    got = first + until_closed(s)
    out["reader"] = (round(time.time() - t), len(got))
ts = [threading.Thread(target=f) for f in (headers, body, reader)]
[t.start() for t in ts]; [t.join() for t in ts]
print(out["headers"][0], out["headers"][1].decode(errors="replace"))
print(out["body"][0], out["body"][1].decode(errors="replace"))
print(out["reader"][0], out["reader"][1])
"#;
    let probe = {
        let (url, k) = (format!("{}/datasets/ds/versions", g.url), k.clone());
        let connections = g.connections_probe();
        std::thread::spawn(move || {
            // Once the three slow clients hold their connections.
            within(Duration::from_secs(30), "the slow clients", || {
                connections() >= 3
            });
            curl(&[&url, "-H", &bearer(&k)]).0
        })
    };
    let report = common::run_ok(Command::new("python3").args(["-c", slow, &g.url, &k]));
    let lines: Vec<&str> = report.lines().collect();
    let seconds = |l: &str| l.split(' ').next().unwrap().parse::<u64>().unwrap();
    // Headers: cut off after the 10 s allowed, without an answer.
    assert!((9..=20).contains(&seconds(lines[0])), "{report}");
    // A body that stops: 408 after the 30 s allowed.
    assert!(lines[1].contains("HTTP/1.1 408"), "{report}");
    assert!((29..=45).contains(&seconds(lines[1])), "{report}");
    // A reader that stops: its response is ended, far short of 64 MiB.
    let read: u64 = lines[2].split(' ').nth(1).unwrap().parse().unwrap();
    assert!(read < 32 << 20, "{report}");
    assert_eq!(probe.join().unwrap(), 200, "others are served meanwhile");
}

#[test]
fn health_metrics_openapi_and_the_periodic_audit() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "a").unwrap();
    env.commit(&src, "v1");
    let k = key(&env, "k", "read");
    let g = serve_with(&env, &["--audit-interval", "1s"]);
    let health = || {
        let (s, b) = curl(&[&format!("{}/health", g.url)]);
        (s, json_of(&b))
    };
    common::within(Duration::from_secs(20), "a first audit", || {
        !health().1["audit"].is_null()
    });
    let (s, h) = health();
    assert_eq!(s, 200);
    assert_eq!(h["status"], "ok");
    assert_eq!(h["store"]["reachable"], true);
    assert_eq!(h["audit"]["ok"], true, "{h}");
    assert_eq!(h["audit"]["versions"], 1);
    // Requests are counted by route, not by path.
    assert_eq!(
        curl(&[
            &format!("{}/datasets/ds/versions", g.url),
            "-H",
            &bearer(&k)
        ])
        .0,
        200
    );
    assert_eq!(curl(&[&format!("{}/datasets/ds/versions", g.url)]).0, 401);
    // A file read twice: a miss in memory, then a hit.
    let file = format!("{}/datasets/ds/versions/v1/files/a.txt", g.url);
    for _ in 0..2 {
        assert_eq!(curl(&[&file, "-H", &bearer(&k)]), (200, b"a".to_vec()));
    }
    let (_, m) = curl(&[&format!("{}/metrics", g.url)]);
    let m = String::from_utf8(m).unwrap();
    let count = |name: &str| -> u64 {
        let line = m
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let gets = |from: &str| {
        count(&format!(
            "detafs_file_gets_total{{answered_from=\"{from}\"}}"
        ))
    };
    assert_eq!((gets("read"), gets("memory")), (1, 1), "{m}");
    assert!(
        count("detafs_store_requests_total{result=\"answered\"}") > 0,
        "{m}"
    );
    assert!(
        m.contains("detafs_requests_total{route=\"GET /datasets/{id}/versions\",status=\"200\"} 1"),
        "{m}"
    );
    assert!(m.contains("status=\"401\"} 1"), "{m}");
    assert!(
        m.contains("detafs_store_reachable 1") && m.contains("detafs_audit_ok 1"),
        "{m}"
    );
    let (s, doc) = curl(&[&format!("{}/openapi.json", g.url)]);
    assert_eq!(s, 200);
    assert!(json_of(&doc)["paths"]["/datasets/{id}/commit"]["post"].is_object());
    // A pack deleted by hand: the next audit says so, in /health and /metrics.
    for p in common::files_under(&std::path::PathBuf::from(&env.store).join("packs")) {
        std::fs::remove_file(p).unwrap();
    }
    common::within(Duration::from_secs(20), "the audit to see it", || {
        health().1["audit"]["ok"] == false
    });
    let (s, h) = health();
    assert_eq!((s, h["status"].as_str()), (200, Some("inconsistent")));
    assert!(
        h["audit"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("missing"),
        "{h}"
    );
    let (_, m) = curl(&[&format!("{}/metrics", g.url)]);
    assert!(String::from_utf8(m).unwrap().contains("detafs_audit_ok 0"));
}

#[test]
fn two_gateways_on_one_bucket_take_fifty_commits_each_at_once() {
    let env = Env::empty_s3();
    env.ok(&["--sse", "aes256", "init"]);
    env.ok(&["--sse", "aes256", "dataset", "create", "ds"]);
    let k = key(&env, "k", "read,commit");
    let other = env.other_host();
    let (a, b) = (
        serve_with(&env, &["--sse", "aes256"]),
        serve_with(&other, &["--sse", "aes256"]),
    );
    // Each commit is read back at once through the other gateway, by its
    // number and as `latest` (which may be newer by then).
    let commits = |g: &Gateway, there: &Gateway, side: &'static str| {
        let (url, k) = (format!("{}/datasets/ds/commit", g.url), k.clone());
        let there = format!("{}/datasets/ds/versions", there.url);
        std::thread::spawn(move || {
            for i in 0..50 {
                let body = json!({"commit_message": format!("{side} {i}"), "files": {format!("{side}/{i}.txt"): "eA=="}});
                let (s, b) = post_json(&url, &k, &body.to_string());
                assert_eq!(s, 201, "{side} {i}: {}", String::from_utf8_lossy(&b));
                let v = json_of(&b)["version_id"].as_str().unwrap().to_string();
                for spec in [v.as_str(), "latest"] {
                    let file = format!("{there}/{spec}/files/{side}/{i}.txt");
                    let (s, got) = curl(&[&file, "-H", &bearer(&k)]);
                    assert_eq!((s, &got[..]), (200, &b"x"[..]), "{side} {i} as {spec}");
                }
            }
        })
    };
    let (ta, tb) = (commits(&a, &b, "a"), commits(&b, &a, "b"));
    ta.join().unwrap();
    tb.join().unwrap();
    // 100 consecutive versions, the last holding all 100 files.
    let log = env.log();
    assert_eq!(log.len(), 100);
    let mut numbers: Vec<u64> = log.iter().map(|e| e["version"].as_u64().unwrap()).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=100).collect::<Vec<_>>());
    let (s, listing) = curl(&[
        &format!("{}/datasets/ds/versions/latest/files/a", b.url),
        "-H",
        &bearer(&k),
    ]);
    assert_eq!(s, 200);
    assert_eq!(json_of(&listing).as_array().unwrap().len(), 50);
    assert_eq!(env.ok(&["ls", "ds", "latest", "b"]).lines().count(), 50);
    // Every object the gateways wrote carries the SSE header.
    let seen = common::objects::sse_of_objects(&env);
    assert!(seen.len() > 100, "{}", seen.len());
    assert!(seen.iter().all(|s| s == "AES256"), "{seen:?}");
}

#[test]
fn sixty_four_clients_at_once_are_all_answered() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..64u8 {
        std::fs::write(src.join(format!("f{i}")), vec![i; 4096]).unwrap();
    }
    env.commit(&src, "v1");
    let k = key(&env, "k", "read");
    let g = serve(&env);
    // More clients than the blocking pool has threads: each must be
    // answered (a request's store calls need threads of that pool too).
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let (url, k) = (
                format!("{}/datasets/ds/versions/v1/files/f{i}", g.url),
                k.clone(),
            );
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| curl(&["--max-time", "30", &url, "-H", &bearer(&k)]))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        for (s, body) in t.join().unwrap() {
            assert_eq!((s, body.len()), (200, 4096), "client {i}");
            assert!(body.iter().all(|&b| usize::from(b) == i));
        }
    }
}

/// A store with `raw/pii/secret.csv` denied to reading by `key:analyst`
/// (allowed the rest), served; (env, gateway, the analyst's key).
fn pii_denied() -> (Env, Gateway, String) {
    let (env, g, analyst, _) = pii_denied_with_s3();
    (env, g, analyst)
}

/// `pii_denied`'s store and policy, served with an S3 endpoint too, and
/// an S3 key (`key:analyst-s3`) under the same policy as `key:analyst`.
fn pii_denied_with_s3() -> (Env, Gateway, String, (String, String)) {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("raw/pii")).unwrap();
    std::fs::write(src.join("raw/pii/secret.csv"), "ssn\n123\n").unwrap();
    std::fs::write(src.join("raw/ok.csv"), "a\n1\n").unwrap();
    env.commit(&src, "v1");
    env.ok(&["tag", "ds", "v1", "pub"]);
    let analyst = key(&env, "analyst", "read,commit");
    let s3 = s3_key(&env, "analyst-s3", "read,commit");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: read, effect: allow, principals: [\"key:analyst\", \"key:analyst-s3\"], actions: [\"dataset:*\"], resources: [\"datasets/ds\"]}\n  - {name: no_pii, effect: deny, principals: [\"key:analyst\", \"key:analyst-s3\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/raw/pii/*\"]}\n",
    );
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    (env, g, analyst, s3)
}

/// `curl --path-as-is` (no client-side clean-up of `.` and `..`).
fn get_as_is(g: &Gateway, k: &str, rest: &str) -> (u16, Vec<u8>) {
    curl(&[
        "--path-as-is",
        &format!("{}/datasets/ds/versions/{rest}", g.url),
        "-H",
        &bearer(k),
    ])
}

#[test]
fn a_path_has_one_spelling_for_lookup_and_policy() {
    let (_env, g, analyst) = pii_denied();
    // The denied file answers as a missing one does, by either name of
    // its version, and its folder is neither listed nor found.
    let missing = get_as_is(&g, &analyst, "v1/files/raw/pii/none.csv");
    assert_eq!(missing.0, 404);
    for v in ["v1", "pub", "latest"] {
        let (s, b) = get_as_is(&g, &analyst, &format!("{v}/files/raw/pii/secret.csv"));
        assert_eq!(s, 404, "{}", String::from_utf8_lossy(&b));
        assert_eq!(
            json_of(&b)["error"]["code"],
            json_of(&missing.1)["error"]["code"]
        );
        assert_eq!(
            get_as_is(&g, &analyst, &format!("{v}/files/raw/pii")).0,
            404
        );
    }
    let (s, b) = get_as_is(&g, &analyst, "v1/files/raw");
    assert_eq!(s, 200);
    let names: Vec<Value> = json_of(&b)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(names, [json!("ok.csv")]);
    // Spellings a lookup could reinterpret are refused, never served.
    for rest in [
        "v1/files/raw/./pii/secret.csv",
        "v1/files/./raw/pii/secret.csv",
        "v1/files/raw/%2e/pii/secret.csv",
        "v1/files/raw/%2E/pii/secret.csv",
        "v1/files/raw//pii/secret.csv",
        "v1/files/raw/pii/../pii/secret.csv",
        "v1/files/raw/x/%2e%2e/pii/secret.csv",
        "pub/files/raw/./pii/secret.csv",
        "v1/files/raw/./pii",
        "v1/files/raw/./pii/",
    ] {
        let (s, b) = get_as_is(&g, &analyst, rest);
        assert!(
            s == 400 || s == 404,
            "{rest}: {s} {}",
            String::from_utf8_lossy(&b)
        );
        assert!(!String::from_utf8_lossy(&b).contains("123"), "{rest}");
    }
    // What the caller may see is served by its one spelling.
    let (s, b) = get_as_is(&g, &analyst, "v1/files/raw/ok.csv");
    assert_eq!((s, b), (200, b"a\n1\n".to_vec()));
}

/// A path element as users and attackers spell it: names of the pii
/// fixture, dot segments, empty ones, and their percent-encodings.
fn spelling_part() -> impl proptest::strategy::Strategy<Value = &'static str> {
    use proptest::prelude::*;
    prop_oneof![
        Just("raw"),
        Just("pii"),
        Just("secret.csv"),
        Just("ok.csv"),
        Just("."),
        Just(".."),
        Just(""),
        Just("%2e"),
        Just("%2E%2e"),
        Just("%2F"),
        Just("%2fpii"),
        Just("raw%2Fpii%2Fsecret.csv"),
        Just("ok%2ecsv"),
        Just("%00"),
    ]
}

/// For any spelling of a path, the answer is the one its canonical path
/// gets: a denied file's bytes never come back under any spelling, and
/// only a spelling that is its own canonical path is served.
#[test]
fn any_spelling_gets_what_its_canonical_path_gets() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let (_env, g, analyst) = pii_denied();
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner
        .run(&prop::collection::vec(spelling_part(), 1..7), |parts| {
            let spelled = parts.join("/");
            let (s, b) = get_as_is(&g, &analyst, &format!("v1/files/{spelled}"));
            let body = String::from_utf8_lossy(&b);
            prop_assert!(!body.contains("123"), "{spelled}: {s} {body}");
            if s == 200 {
                // A listing never names what is hidden.
                prop_assert!(!body.contains("pii"), "{spelled}: {s} {body}");
                let decoded = spelled.replace("%2F", "/").to_ascii_lowercase();
                prop_assert!(
                    !decoded
                        .split('/')
                        .any(|p| matches!(p, "." | ".." | "%2e" | "%2e%2e")),
                    "{spelled}: {s} {body}"
                );
            }
            Ok(())
        })
        .unwrap();
}

/// The REST API and the S3 endpoint keep one read rule: for any spelling
/// of a version and a path, what S3 serves the REST API serves alike, a
/// file the REST API serves S3 serves alike or refuses, and neither ever
/// sends a denied file's bytes.
#[test]
fn rest_and_s3_answer_every_spelling_alike() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let (_env, g, analyst, s3) = pii_denied_with_s3();
    let endpoint = g.s3.clone().unwrap();
    let version = prop_oneof![
        Just("v1"),
        Just("pub"),
        Just("latest"),
        Just("1"),
        Just("v01"),
        Just("%76%31"),
        Just("latest~0"),
    ];
    let answers = |v: &str, spelled: &str| {
        let rest = get_as_is(&g, &analyst, &format!("{v}/files/{spelled}"));
        let over_s3 = s3_curl(&endpoint, &s3, &[], &format!("ds/{v}/{spelled}"));
        let shown = |(s, b): &(u16, Vec<u8>)| format!("{s} {}", String::from_utf8_lossy(b));
        let said = format!(
            "{v}/{spelled}: REST {} S3 {}",
            shown(&rest),
            shown(&over_s3)
        );
        (rest, over_s3, said)
    };
    // The canonical spellings: the file served alike, the denied one by
    // neither.
    for v in ["v1", "pub", "latest"] {
        let (rest, over_s3, said) = answers(v, "raw/ok.csv");
        assert_eq!(rest, (200, b"a\n1\n".to_vec()), "{said}");
        assert_eq!(rest, over_s3, "{said}");
        let (rest, over_s3, said) = answers(v, "raw/pii/secret.csv");
        assert_eq!((rest.0, over_s3.0), (404, 404), "{said}");
    }
    let mut runner = TestRunner::new(Config::with_cases(96));
    runner
        .run(
            &(version, prop::collection::vec(spelling_part(), 1..6)),
            |(v, parts)| {
                let (rest, over_s3, said) = answers(v, &parts.join("/"));
                for (_, body) in [&rest, &over_s3] {
                    prop_assert!(!String::from_utf8_lossy(body).contains("123"), "{said}");
                }
                if over_s3.0 == 200 {
                    prop_assert_eq!(&rest, &over_s3, "{}", said);
                }
                if rest == (200, b"a\n1\n".to_vec()) {
                    prop_assert!(over_s3.0 == 200 || over_s3.0 >= 400, "{said}");
                }
                Ok(())
            },
        )
        .unwrap();
}

/// A query value as SigV4 signs it: every byte but the unreserved ones
/// percent-encoded.
fn query_value(v: &[u8]) -> String {
    v.iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The keys and common prefixes an S3 listing names.
fn listed(xml: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [
        ("<Key>", "</Key>"),
        ("<CommonPrefixes><Prefix>", "</Prefix>"),
    ] {
        let mut rest = xml;
        while let Some(at) = rest.find(open) {
            let tail = &rest[at + open.len()..];
            let end = tail.find(close).unwrap();
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// Listings under forged continuation tokens, `start-after` values and
/// `max-keys`: the token is only a place to resume, never trusted to
/// widen what is listed. No answer names what the policy hides, none is
/// a server error.
#[test]
fn forged_listing_parameters_list_nothing_hidden() {
    use base64::Engine;
    let (_env, g, _, s3) = pii_denied_with_s3();
    let endpoint = g.s3.clone().unwrap();
    let token = |k: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k);
    let mut tokens: Vec<Vec<u8>> = [
        &b"v1/raw/pii/"[..],
        b"v1/raw/pii/secret.cs",
        b"v1/raw/",
        b"v1/raw/ok.csv",
        b"v1/raw/pii/../ok.csv",
        b"",
        b"\0",
        b"\xff\xfe",
    ]
    .iter()
    .map(|k| token(k).into_bytes())
    .collect();
    tokens.extend([
        b"!!not base64!!".to_vec(),
        b"a".repeat(10_000),
        token(&[0xff; 3000]).into_bytes(),
    ]);
    // (name, value) of the parameter under test.
    let mut asked: Vec<(&str, String)> = tokens
        .iter()
        .map(|t| ("continuation-token", query_value(t)))
        .collect();
    for after in [
        "v1/raw/pii/",
        "v1/raw/pii/secret.cs",
        "v1/raw/pii/secret.csv\u{0}",
        "v1/raw/.",
    ] {
        asked.push(("start-after", query_value(after.as_bytes())));
    }
    for max in ["-1", "0", "1", "1000000", "x"] {
        asked.push(("max-keys", max.to_string()));
    }
    let mut listed_ok = 0;
    for (name, value) in &asked {
        for prefix in ["", "v1/", "v1/raw/", "v1/raw/pii/", "pub/raw/p"] {
            for delimiter in [None, Some("%2F")] {
                // In name order: what SigV4 signs (curl 7 does not sort).
                let mut params = vec![
                    ("list-type", "2".to_string()),
                    ("prefix", query_value(prefix.as_bytes())),
                    (name, value.clone()),
                ];
                params.extend(delimiter.map(|d| ("delimiter", d.to_string())));
                params.sort();
                let query: Vec<String> = params.iter().map(|(n, v)| format!("{n}={v}")).collect();
                let query = query.join("&");
                let (status, body) = s3_curl(&endpoint, &s3, &[], &format!("ds?{query}"));
                let text = String::from_utf8_lossy(&body);
                assert!(status == 200 || status == 400, "{query}: {status} {text}");
                let named = listed(&text);
                // (The answer echoes what was asked; it names nothing more.)
                assert!(
                    !named
                        .iter()
                        .any(|k| k.contains("pii") || k.contains("secret")),
                    "{query}: {text}"
                );
                listed_ok += usize::from(status == 200 && text.contains("ok.csv"));
            }
        }
    }
    assert!(listed_ok > 0, "some listings name what may be seen");
}

/// What `any_spelling_gets_what_its_canonical_path_gets` once found and
/// shrank (tests/gateway.proptest-regressions): a denied file's name alone
/// under `files/`, which is no path of the version, is not found and
/// serves none of its bytes.
#[test]
fn shrunk_a_denied_file_name_alone_is_not_served() {
    let (_env, g, analyst) = pii_denied();
    let (s, b) = get_as_is(&g, &analyst, "v1/files/secret.csv");
    assert_eq!(s, 404, "{}", String::from_utf8_lossy(&b));
    assert!(!String::from_utf8_lossy(&b).contains("123"));
}

/// A commit reaches nothing its caller may not see: a hidden version as
/// `parent` (by number or tag), a hidden path to delete; a delta, which
/// reads its table, takes `dataset:read` there, decided before the table
/// is looked up (no answer tells whether a row is in it).
#[test]
fn a_commit_reaches_nothing_its_caller_may_not_see() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("raw/pii")).unwrap();
    std::fs::write(src.join("raw/pii/secret.csv"), "ssn\n123\n").unwrap();
    std::fs::write(src.join("data.jsonl"), "\"row1\"\n").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("data.jsonl"), "\"row1\"\n\"row2\"\n").unwrap();
    env.commit(&src, "v2");
    env.ok(&["tag", "ds", "v2", "hidden-tag"]);
    std::fs::write(src.join("more.txt"), "m").unwrap();
    env.commit(&src, "v3");
    let analyst = key(&env, "analyst", "read,commit");
    let committer = key(&env, "committer", "commit");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: use, effect: allow, principals: [\"key:analyst\", \"key:committer\"], actions: [\"dataset:*\"], resources: [\"datasets/ds\"]}\n  - {name: not_v2, effect: deny, principals: [\"key:analyst\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v2\"]}\n  - {name: no_pii, effect: deny, principals: [\"key:analyst\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/raw/pii/*\"]}\n",
    );
    let g = serve(&env);
    let url = format!("{}/datasets/ds/commit", g.url);
    let commit = |k: &str, body: Value| post_json(&url, k, &body.to_string());
    // A hidden version as parent, by tag or number, is as a missing one.
    let missing = commit(
        &analyst,
        json!({"commit_message": "m", "parent": "v99", "files": {"x": "eA=="}}),
    );
    assert_eq!(missing.0, 404);
    for parent in ["hidden-tag", "v2", "2", "latest~1"] {
        let (s, b) = commit(
            &analyst,
            json!({"commit_message": "m", "parent": parent, "delta": {"added": ["r"]}}),
        );
        assert_eq!(s, 404, "{parent}: {}", String::from_utf8_lossy(&b));
        assert_eq!(
            json_of(&b)["error"]["code"],
            json_of(&missing.1)["error"]["code"]
        );
    }
    // A commit-only key's delta is refused before the table is read:
    // the same answer whether the row it removes is there or not.
    let present = commit(
        &committer,
        json!({"commit_message": "m", "delta": {"removed": ["row1"]}}),
    );
    let absent = commit(
        &committer,
        json!({"commit_message": "m", "delta": {"removed": ["nope"]}}),
    );
    assert_eq!(present.0, 403, "{}", String::from_utf8_lossy(&present.1));
    assert_eq!(present, absent);
    // A hidden path is not there to delete; nothing was committed.
    let none = commit(
        &analyst,
        json!({"commit_message": "m", "delete": ["raw/pii/none.csv"]}),
    );
    let hidden = commit(
        &analyst,
        json!({"commit_message": "m", "delete": ["raw/pii/secret.csv"]}),
    );
    assert_eq!(none.0, 404);
    assert_eq!(hidden.0, 404, "{}", String::from_utf8_lossy(&hidden.1));
    assert_eq!(
        json_of(&hidden.1)["error"]["code"],
        json_of(&none.1)["error"]["code"]
    );
    assert_eq!(env.log().len(), 3, "nothing was committed");
    // What the caller may see still commits.
    let (s, b) = commit(
        &analyst,
        json!({"commit_message": "m", "delta": {"removed": ["row1"]}}),
    );
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
}

/// A store with v1 (`a.csv`, `keep.csv`) and an S3 key that may commit.
fn s3_writable() -> (Env, (String, String)) {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), "a\n1\n").unwrap();
    std::fs::write(src.join("keep.csv"), "k\n").unwrap();
    env.commit(&src, "v1");
    let key = s3_key(&env, "writer", "read,commit");
    (env, key)
}

/// `s3_writable`, served with an S3 endpoint: its address last.
fn s3_served() -> (Env, (String, String), Gateway, String) {
    let (env, key) = s3_writable();
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let at = g.s3.clone().unwrap();
    (env, key, g, at)
}

/// Commits what is staged through S3 and finds `b.csv` (`b\n`) in v2.
fn commits_b_as_v2(env: &Env, at: &str, key: &(String, String)) {
    let (s, b) = s3_put(env, at, key, "staging/.detafs-commit", "again");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    assert_eq!(s3_curl(at, key, &[], "ds/v2/b.csv"), (200, b"b\n".to_vec()));
}

/// `PUT endpoint/ds/KEY` of `body` through S3: (status, answer).
fn s3_put(
    env: &Env,
    endpoint: &str,
    key: &(String, String),
    at: &str,
    body: &str,
) -> (u16, Vec<u8>) {
    let file = env.path(&format!("body-{}", at.replace('/', "_")));
    std::fs::write(&file, body).unwrap();
    s3_curl(
        endpoint,
        key,
        &["-T", file.to_str().unwrap()],
        &format!("ds/{at}"),
    )
}

/// The `staging/` keys an S3 listing names.
fn staged_keys(endpoint: &str, key: &(String, String)) -> Vec<String> {
    let (s, b) = s3_curl(endpoint, key, &[], "ds?list-type=2&prefix=staging%2F");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    listed(&String::from_utf8_lossy(&b))
}

/// What is staged through S3 is kept in the store: a gateway killed
/// after the PUTs loses none of them, another gateway of the store lists
/// (a page at a time) and commits them, a deletion drops a staged file or
/// deletes a path of the version, and a commit of nothing that changes
/// anything is refused and changes nothing. A staging area is its
/// key's: another key neither lists nor commits it.
#[test]
fn s3_staging_outlives_its_gateway_and_is_shared() {
    let (env, key) = s3_writable();
    let first = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let at = first.s3.clone().unwrap();
    assert_eq!(s3_put(&env, &at, &key, "staging/b.csv", "b\n").0, 200);
    assert_eq!(s3_put(&env, &at, &key, "staging/c/d.csv", "d\n").0, 200);
    drop(first); // killed (SIGKILL)
    let second = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let at = second.s3.clone().unwrap();
    assert_eq!(staged_keys(&at, &key), ["staging/b.csv", "staging/c/d.csv"]);
    let page = |q: &str| {
        let (s, b) = s3_curl(&at, &key, &[], &format!("ds?{q}"));
        assert_eq!(s, 200);
        String::from_utf8_lossy(&b).into_owned()
    };
    let first_page = page("list-type=2&max-keys=1&prefix=staging%2F");
    assert_eq!(listed(&first_page), ["staging/b.csv"]);
    let token = first_page
        .split("<NextContinuationToken>")
        .nth(1)
        .and_then(|t| t.split('<').next())
        .unwrap()
        .to_string();
    assert_eq!(
        listed(&page(&format!(
            "continuation-token={token}&list-type=2&max-keys=1&prefix=staging%2F"
        ))),
        ["staging/c/d.csv"]
    );
    assert_eq!(
        listed(&page("delimiter=%2F&list-type=2&prefix=staging%2F")),
        ["staging/b.csv", "staging/c/"]
    );
    let other = s3_key(&env, "other", "read,commit");
    assert_eq!(staged_keys(&at, &other), Vec::<String>::new());
    let (s, _) = s3_put(&env, &at, &other, "staging/.detafs-commit", "not mine");
    assert_eq!(s, 400);
    assert_eq!(env.log().len(), 1);
    // A deletion of a staged file drops it; of a path of v1 deletes it.
    for gone in ["staging/b.csv", "staging/a.csv"] {
        let (s, b) = s3_curl(&at, &key, &["-X", "DELETE"], &format!("ds/{gone}"));
        assert_eq!(s, 204, "{}", String::from_utf8_lossy(&b));
    }
    assert_eq!(staged_keys(&at, &key), ["staging/c/d.csv"]);
    assert_eq!(
        s3_put(&env, &at, &key, "staging/.detafs-commit", "two").0,
        200
    );
    assert_eq!(staged_keys(&at, &key), Vec::<String>::new());
    let out = env.path("v2");
    env.ok(&["export", "ds", "v2", out.to_str().unwrap()]);
    let mut names: Vec<String> = walk_names(&out);
    names.sort();
    assert_eq!(names, ["c/d.csv", "keep.csv"]);
    assert_eq!(env.log().last().unwrap()["message"], "two");
    // Deleting what no version has, then committing: refused, no version.
    let (s, _) = s3_curl(&at, &key, &["-X", "DELETE"], "ds/staging/never.csv");
    assert_eq!(s, 204);
    let (s, b) = s3_put(&env, &at, &key, "staging/.detafs-commit", "none");
    assert_eq!(s, 400, "{}", String::from_utf8_lossy(&b));
    assert!(String::from_utf8_lossy(&b).contains("InvalidRequest"));
    assert_eq!(env.log().len(), 2);
    env.ok(&["verify"]);
}

/// Every file's path under `root`, relative.
fn walk_names(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_owned();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// A gateway killed in the middle of an S3 commit (its record not yet
/// made) commits nothing and loses nothing: another gateway finds the
/// changes still staged and commits them.
#[test]
fn an_s3_commit_killed_before_its_record_is_made_again_elsewhere() {
    let (env, key) = s3_writable();
    let hold = common::Hold::new(&env, "before-record");
    let first = common::gateway::serve_failing(&env, &["--s3-listen", "127.0.0.1:0"], &hold.spec);
    let at = first.s3.clone().unwrap();
    assert_eq!(s3_put(&env, &at, &key, "staging/b.csv", "b\n").0, 200);
    let committing = {
        let (env_dir, at, key) = (env.path("m"), at.clone(), key.clone());
        std::fs::write(&env_dir, "killed").unwrap();
        std::thread::spawn(move || {
            s3_curl(
                &at,
                &key,
                &["-T", env_dir.to_str().unwrap()],
                "ds/staging/.detafs-commit",
            )
        })
    };
    hold.reached();
    drop(first);
    let _ = committing.join().unwrap(); // no answer: the gateway died
    assert_eq!(env.log().len(), 1, "nothing committed");
    let second = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let at = second.s3.clone().unwrap();
    assert_eq!(staged_keys(&at, &key), ["staging/b.csv"]);
    commits_b_as_v2(&env, &at, &key);
    env.ok(&["verify"]);
}

/// An S3 commit while another commit is on its way (held before its
/// record): each lands as its own version, the later one on the earlier,
/// and the newest version holds both.
#[test]
fn an_s3_commit_beside_a_cli_commit_keeps_both() {
    let (env, key, _g, at) = s3_served();
    let src = env.path("src");
    std::fs::write(src.join("cli.csv"), "cli\n").unwrap();
    let hold = common::Hold::new(&env, "before-record");
    let cli = env
        .commit_command(&src, "from the CLI", &hold.spec)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    hold.reached();
    assert_eq!(s3_put(&env, &at, &key, "staging/s3.csv", "s3\n").0, 200);
    let (s, b) = s3_put(&env, &at, &key, "staging/.detafs-commit", "from S3");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    hold.release();
    let out = cli.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = env.log();
    assert_eq!(log.len(), 3);
    for (file, body) in [
        ("s3.csv", "s3\n"),
        ("cli.csv", "cli\n"),
        ("a.csv", "a\n1\n"),
    ] {
        assert_eq!(
            s3_curl(&at, &key, &[], &format!("ds/latest/{file}")),
            (200, body.as_bytes().to_vec()),
            "{file}"
        );
    }
    env.ok(&["verify"]);
}

/// A gc that may have deleted data a staged upload reuses: the S3 commit
/// names the path to send again and commits nothing; sent again, it
/// commits.
#[test]
fn an_s3_commit_after_a_gc_names_the_path_to_send_again() {
    let (env, key, _g, at) = s3_served();
    assert_eq!(s3_put(&env, &at, &key, "staging/b.csv", "b\n").0, 200);
    env.ok(&["dataset", "create", "old"]);
    env.ok(&["dataset", "delete", "old"]);
    env.ok(&["gc", "--grace", "0s"]);
    let (s, b) = s3_put(&env, &at, &key, "staging/.detafs-commit", "after gc");
    let said = String::from_utf8_lossy(&b);
    assert_eq!(s, 400, "{said}");
    assert!(
        said.contains("staging/b.csv") && said.contains("upload it again"),
        "{said}"
    );
    assert_eq!(env.log().len(), 1);
    assert_eq!(s3_put(&env, &at, &key, "staging/b.csv", "b\n").0, 200);
    commits_b_as_v2(&env, &at, &key);
}

/// `CopyObject` into `staging/`: an object staged under another name (the
/// first half of a rename, as S3 file systems commit their output) and a
/// file of a version, neither sent again; a file the policy hides is not
/// there to copy, and nothing is copied into a version. (A bucket name S3
/// accepts: s3s checks `x-amz-copy-source` by S3's bucket rule.)
#[test]
fn s3_copies_into_staging_what_its_key_may_read() {
    let env = Env::new();
    let src = env.path("sales-src");
    std::fs::create_dir_all(src.join("pub")).unwrap();
    std::fs::create_dir_all(src.join("private")).unwrap();
    std::fs::write(src.join("pub/a.csv"), "a\n").unwrap();
    std::fs::write(src.join("private/secret.csv"), "ssn\n123\n").unwrap();
    env.ok(&["dataset", "create", "sales"]);
    env.ok(&[
        "commit",
        "sales",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "v1",
    ]);
    let key = s3_key(&env, "writer", "read,commit");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: use, effect: allow, principals: [\"key:writer\"], actions: [\"dataset:*\"], resources: [\"datasets/sales\"]}\n  - {name: no_private, effect: deny, principals: [\"key:writer\"], actions: [\"dataset:read\"], resources: [\"datasets/sales/versions/*/files/private/*\"]}\n",
    );
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let at = g.s3.clone().unwrap();
    let copy = |to: &str, from: &str| {
        let source = format!("x-amz-copy-source: {from}");
        s3_curl(&at, &key, &["-X", "PUT", "-H", &source], to)
    };
    let part = env.path("part");
    std::fs::write(&part, "p0\n").unwrap();
    let put = s3_curl(
        &at,
        &key,
        &["-T", part.to_str().unwrap()],
        "sales/staging/out/_tmp/p0",
    );
    assert_eq!(put.0, 200);
    let (s, b) = copy("sales/staging/out/p0", "sales/staging/out/_tmp/p0");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let (s, _) = s3_curl(&at, &key, &["-X", "DELETE"], "sales/staging/out/_tmp/p0");
    assert_eq!(s, 204);
    let (s, b) = copy("sales/staging/a-copy.csv", "sales/v1/pub/a.csv");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let (s, b) = copy("sales/staging/s.csv", "sales/v1/private/secret.csv");
    assert_eq!(s, 404, "{}", String::from_utf8_lossy(&b));
    assert!(!String::from_utf8_lossy(&b).contains("123"));
    assert_eq!(copy("sales/v1/x.csv", "sales/v1/pub/a.csv").0, 403);
    let message = env.path("message");
    std::fs::write(&message, "copied").unwrap();
    let commit = ["-T", message.to_str().unwrap()];
    assert_eq!(
        s3_curl(&at, &key, &commit, "sales/staging/.detafs-commit").0,
        200
    );
    for (file, body) in [("out/p0", "p0\n"), ("a-copy.csv", "a\n")] {
        let got = s3_curl(&at, &key, &[], &format!("sales/v2/{file}"));
        assert_eq!(got, (200, body.as_bytes().to_vec()), "{file}");
    }
    assert_eq!(s3_curl(&at, &key, &[], "sales/v2/out/_tmp/p0").0, 404);
    assert_eq!(s3_curl(&at, &key, &[], "sales/v2/s.csv").0, 404);
    env.ok(&["verify"]);
}

/// What a policy hides answers, through REST, S3 and the CLI through the
/// gateway, as the same request
/// does on a store that never held it (tests/py/hidden_model.py): two
/// stores, one where the caller's policy hides two folders' files and a
/// whole dataset, one holding only what the caller may see; every request
/// of an enumeration is sent to both and the answers compared. (It found
/// version figures counting hidden files: they are withheld from such a
/// caller now, `Record::log_entry_seen`.)
#[test]
fn what_a_policy_hides_answers_as_a_store_without_it_would() {
    let (hiding_env, _g1, hiding) = model_side(true);
    let (_without_env, _g2, without) = model_side(false);
    let file = hiding_env.path("model.json");
    let setup =
        json!({"hiding": hiding, "without": without, "detafs": env!("CARGO_BIN_EXE_detafs")});
    std::fs::write(&file, setup.to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/hidden_model.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A host without the store: `--store https://GATEWAY` with an API key
/// file and the gateway's certificate runs `dataset list`, `log`, `cat`,
/// `ls`, `tag`, `diff` and `export` as on the store (the same output),
/// seeing what the policy shows the key; a hidden file is missing; a
/// missing key or certificate is named.
#[test]
fn the_cli_reads_through_a_gateway_as_from_the_store() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("private")).unwrap();
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/x.txt"), "x\n").unwrap();
    std::fs::write(src.join("a.csv"), "1\n").unwrap();
    std::fs::write(src.join("private/s.csv"), "secret\n").unwrap();
    std::os::unix::fs::symlink("a.csv", src.join("link")).unwrap();
    // A name that is not UTF-8: listed and exported as on the store.
    use std::os::unix::ffi::OsStrExt;
    std::fs::write(src.join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt")), "x\n").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("a.csv"), "2\n").unwrap();
    env.commit(&src, "v2");
    env.ok(&["tag", "ds", "v1", "first"]);
    let all = key(&env, "all", "read");
    let limited = key(&env, "limited", "read");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: read, effect: allow, principals: [\"key:all\", \"key:limited\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}\n  - {name: no_private, effect: deny, principals: [\"key:limited\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n",
    );
    let g = serve(&env);
    let key_file = |k: &str, name: &str| {
        let f = env.path(name);
        std::fs::write(&f, format!("{k}\n")).unwrap();
        f
    };
    let (all_file, limited_file) = (key_file(&all, "all.key"), key_file(&limited, "limited.key"));
    let remote = |key: &std::path::Path, args: &[&str]| through(&env, &g.url, key, args);
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    for args in [
        &["dataset", "list"][..],
        &["dataset", "list", "--json"],
        &["log", "ds"],
        &["log", "ds", "--json"],
        &["cat", "ds", "v1", "a.csv"],
        &["cat", "ds", "first", "private/s.csv"],
        &["ls", "ds", "v1"],
        &["ls", "ds", "v2", "--json"],
        &["ls", "ds", "latest", "private"],
        &["ls", "ds", "v2", "a.csv"],
        &["ls", "ds", "v2", "link"],
        &["tag", "ds"],
        &["tag", "ds", "--json"],
        &["log", "ds", "--", "a.csv"],
        &["log", "ds", "--json", "--", "private"],
        &["diff", "ds", "v1", "v2"],
        &["diff", "ds", "first", "latest", "--stat"],
        &["diff", "ds", "v1", "v2", "--patch"],
        &["diff", "ds", "v2", "v1", "--json"],
    ] {
        let through = remote(&all_file, args);
        assert!(
            through.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&through.stderr)
        );
        assert_eq!(text(&through), env.ok(args), "{args:?}");
    }
    // An export: the same tree, bytes, modes and mtimes as from the store.
    let (here, there) = (env.path("exported-here"), env.path("exported-there"));
    env.ok(&["export", "ds", "first", here.to_str().unwrap()]);
    let out = remote(
        &all_file,
        &["export", "ds", "first", there.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(common::fingerprint(&there), common::fingerprint(&here));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exported ds v1 to"));
    // The limited key: the hidden file is missing, as a missing one is;
    // the figures that would count it are withheld.
    let hidden = remote(&limited_file, &["cat", "ds", "v2", "private/s.csv"]);
    let missing = remote(&limited_file, &["cat", "ds", "v2", "private/none.csv"]);
    assert_eq!(hidden.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&hidden.stderr).replace("s.csv", "X"),
        String::from_utf8_lossy(&missing.stderr).replace("none.csv", "X")
    );
    let listed = text(&remote(&limited_file, &["ls", "ds", "v2"]));
    assert!(
        listed.contains("a.csv") && !listed.contains("private"),
        "{listed}"
    );
    let hidden = remote(&limited_file, &["ls", "ds", "v2", "private"]);
    let missing = remote(&limited_file, &["ls", "ds", "v2", "nowhere"]);
    assert_eq!(hidden.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&hidden.stderr).replace("private", "X"),
        String::from_utf8_lossy(&missing.stderr).replace("nowhere", "X")
    );
    let log = text(&remote(&limited_file, &["log", "ds"]));
    assert!(
        log.contains("+? ~? -?") && log.contains("v1 ") && log.contains("(first)"),
        "{log}"
    );
    // Without the certificate, without a key, and a command not there yet.
    let out = env
        .command()
        .args(["--store", &g.url, "--api-key-file"])
        .arg(&all_file)
        .args(["log", "ds"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = env
        .command()
        .args(["--store", &g.url, "log", "ds"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key-file"));
    // A name a URL parser would take as a step is refused, asking nothing
    // (`ls` says it as the store does).
    for args in [&["log", ".."][..], &["cat", "ds", "..", "a.csv"]] {
        let out = remote(&all_file, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("names no dataset or version"));
    }
    let out = remote(&all_file, &["ls", ".", "v1"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .map(str::to_string)
        ),
        (
            Some(1),
            env.fails(&["ls", ".", "v1"])
                .1
                .lines()
                .last()
                .map(str::to_string)
        )
    );
    // A path's log for a key from which paths may be hidden: the same
    // versions as for one from which none are, a file's or a folder's.
    for path in ["a.csv", "link", "d"] {
        let args = ["log", "ds", "--", path];
        let (limited, all) = (remote(&limited_file, &args), remote(&all_file, &args));
        assert!(
            limited.status.success(),
            "{}",
            String::from_utf8_lossy(&limited.stderr)
        );
        assert_eq!(text(&limited), text(&all), "{path}");
    }
    // What needs the store itself says so, changing nothing.
    for args in [&["gc"][..], &["audit", "ds"], &["apikey", "list"]] {
        let out = remote(&all_file, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("through a gateway"));
    }
}

/// `detafs tag NAME VERSION TAG` through the gateway: made as on the
/// store, for a version the caller may see; a hidden version is missing,
/// a name taken by a hidden version's tag says nothing of it, and a key
/// without the tag scope is denied (exit 5).
#[test]
fn tags_are_made_through_the_gateway() {
    let env = Env::new();
    two_versions(&env);
    let tagger = key(&env, "tagger", "read,tag");
    let reader = key(&env, "reader", "read");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: use, effect: allow, principals: [\"key:tagger\", \"key:reader\"], actions: [\"dataset:*\"], resources: [\"datasets/ds\"]}\n  - {name: not_v2, effect: deny, principals: [\"key:tagger\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v2\"]}\n",
    );
    env.ok(&["tag", "ds", "v2", "secret"]);
    let g = serve(&env);
    let remote = |key: &str, args: &[&str]| {
        let file = env.path("key");
        std::fs::write(&file, key).unwrap();
        through(&env, &g.url, &file, args)
    };
    let said = |o: &std::process::Output| {
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = said(&remote(&tagger, &["tag", "ds", "latest~1", "first"]));
    assert_eq!((code, out.as_str()), (Some(0), "first v1\n"), "{err}");
    assert!(env.ok(&["tag", "ds"]).contains("first v1"));
    // Hidden v2 is missing; its tag's name is taken, and only that is said.
    let (hidden, missing) = (
        said(&remote(&tagger, &["tag", "ds", "v2", "x"])),
        said(&remote(&tagger, &["tag", "ds", "v9", "x"])),
    );
    assert_eq!(hidden.0, Some(1));
    assert_eq!(hidden.2.replace("v2", "vN"), missing.2.replace("v9", "vN"));
    let (code, _, err) = said(&remote(&tagger, &["tag", "ds", "v1", "secret"]));
    assert_eq!(code, Some(1));
    assert!(
        err.contains("tag secret already exists") && !err.contains("v2"),
        "{err}"
    );
    let (code, _, err) = said(&remote(&tagger, &["tag", "ds", "v1", "first"]));
    assert_eq!(code, Some(1));
    assert!(err.contains("already names v1"), "{err}");
    // No tag scope: denied.
    let (code, _, err) = said(&remote(&reader, &["tag", "ds", "v1", "other"]));
    assert_eq!(code, Some(5), "{err}");
    assert!(!env.ok(&["tag", "ds"]).contains("other"));
}

/// `detafs verify` through the gateway reads every file the key may read
/// of every version it sees, and names each one that does not arrive
/// whole (a flipped byte in the store).
#[test]
fn verify_through_the_gateway_reads_what_the_key_may_read() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.bin"), common::noise(3 << 20, 3)).unwrap();
    std::fs::write(src.join("a.csv"), "1\n").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("a.csv"), "2\n").unwrap();
    env.commit(&src, "v2");
    let k = key(&env, "k", "read");
    let key_file = env.path("k.key");
    std::fs::write(&key_file, &k).unwrap();
    let g = serve(&env);
    let verify = |args: &[&str]| through(&env, &g.url, &key_file, &[&["verify"], args].concat());
    let out = verify(&["ds", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&report["versions"], &report["files"]),
        (&json!(2), &json!(4))
    );
    let pack = env.objects.largest("packs");
    let mut bytes = env.objects.read(&pack);
    let n = bytes.len() / 2;
    bytes[n] ^= 0x40;
    env.objects.write(&pack, bytes);
    let out = verify(&[]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ds v1/big.bin: ") && said.contains("ds v2/big.bin: "),
        "{said}"
    );
    assert!(!said.contains("a.csv"), "{said}");
}

/// Several gateways of one store (`--store https://A,https://B`): one
/// that is down is passed over, and one killed in the middle of a file
/// hands over to the next, which sends the rest (no wrong byte).
#[test]
fn the_cli_moves_to_the_next_gateway() {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let env = Env::new();
    let g = two_gateways(&env);
    let (big, k, bundle) = (&g.big, &g.key, &g.bundle);
    let both = format!("{},{}", g.first.url, g.second.url);
    let key_file = env.path("k.key");
    std::fs::write(&key_file, k).unwrap();
    let cli = |stores: &str| {
        let mut c = env.command();
        c.args(["--store", stores, "--api-key-file"])
            .arg(&key_file)
            .arg("--ca-cert")
            .arg(bundle);
        c
    };
    // Killed mid-file: the reader takes 1 MiB, the first gateway goes,
    // the rest comes from the second.
    let mut reading = cli(&both)
        .args(["cat", "ds", "latest", "big.bin"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = reading.stdout.take().unwrap();
    let mut got = vec![0; 1 << 20];
    out.read_exact(&mut got).unwrap();
    drop(g.first);
    out.read_to_end(&mut got).unwrap();
    let mut said = String::new();
    reading
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    let status = reading.wait().unwrap();
    assert!(status.success(), "{said}");
    assert!(said.contains("the next gateway sends the rest"), "{said}");
    assert_eq!(got.len(), big.len());
    assert_eq!(Sha256::digest(&got), Sha256::digest(big), "a wrong byte");
    // The first is down now: passed over.
    let out = cli(&both).args(["log", "ds"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("v1 "));
}

/// Upload URLs are read from the request's own bytes: a name that is not
/// UTF-8 is taken as its bytes, and every malformed spelling (an unknown
/// or repeated parameter, a size that is not a number, half a patch, a
/// path that climbs) is a 400 that stores nothing.
#[test]
fn malformed_upload_urls_store_nothing() {
    let env = Env::new();
    two_versions(&env);
    let k = key(&env, "w", "read,commit");
    let g = serve(&env);
    let put = |rest: &str| {
        curl(&[
            "-X",
            "PUT",
            "--path-as-is",
            &format!("{}/datasets/ds/uploads/{rest}", g.url),
            "-H",
            &bearer(&k),
            "--data-binary",
            "bytes",
        ])
    };
    let stored = || env.objects.list("uploads/").len();
    let before = stored();
    for bad in [
        "a.csv?colour=red",
        "a.csv?size=3&size=3",
        "a.csv?version=v1&from=a.csv&size=x",
        "a.csv?version=v1&size=5",
        "a.csv?from=a.csv",
        "d/../../a.csv",
        "%2e%2e/a.csv",
        "a.csv?version=%ff&from=a.csv&size=5",
    ] {
        let (s, b) = put(bad);
        assert_eq!(s, 400, "{bad}: {}", String::from_utf8_lossy(&b));
        assert_eq!(stored(), before, "{bad} stored something");
    }
    let (s, b) = put("caf%E9.txt");
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
}

/// A tag made through a gateway lost before it answered: the next gateway
/// finds it made, and the command says so (exit 0), once; asked again,
/// the name is taken, as on a store.
#[test]
fn a_tag_whose_answer_was_lost_is_made_once() {
    let env = Env::new();
    two_versions(&env);
    let k = key(&env, "tagger", "read,tag");
    let hold = common::Hold::new(&env, "tag-made");
    let first = common::gateway::serve_failing(&env, &[], &hold.spec);
    let other = env.other_host();
    let second = serve(&other);
    let bundle = env.path("gateways.pem");
    let pems = [cert(&env), cert(&other)].map(|c| std::fs::read_to_string(c).unwrap());
    std::fs::write(&bundle, pems.concat()).unwrap();
    let key_file = env.path("k.key");
    std::fs::write(&key_file, format!("{k}\n")).unwrap();
    let both = format!("{},{}", first.url, second.url);
    let tag = |tag: &str| {
        env.command()
            .args(["--store", &both, "--api-key-file"])
            .arg(&key_file)
            .arg("--ca-cert")
            .arg(&bundle)
            .args(["tag", "ds", "latest~1", tag])
            .output()
            .unwrap()
    };
    let tagging = std::thread::scope(|s| {
        let tagging = s.spawn(|| tag("first"));
        hold.reached();
        drop(first);
        tagging.join().unwrap()
    });
    let said = String::from_utf8_lossy(&tagging.stderr);
    assert!(tagging.status.success(), "{said}");
    assert_eq!(String::from_utf8_lossy(&tagging.stdout), "first v1\n");
    assert_eq!(env.ok(&["tag", "ds"]).matches("first").count(), 1);
    let again = tag("first");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already"));
}

/// `commit --from DIR` through the gateway by a key from which a folder
/// is hidden: the version it makes is, on the store, the folder as it is
/// (modes, times, symlinks, empty and deleted folders, a file become a
/// folder) with what the key cannot see kept; a file changed in 64 KiB
/// sends about that, not the file; nothing new commits nothing (exit 4);
/// names and link targets that are not UTF-8 commit as on the store.
#[test]
fn commit_from_through_the_gateway_is_the_commit_on_the_store() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let src = env.path("src");
    for d in ["private", "d/e", "keep"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    std::fs::write(src.join("a.csv"), "1\n").unwrap();
    std::fs::write(src.join("big.bin"), common::noise(4 << 20, 7)).unwrap();
    std::fs::write(src.join("private/s.csv"), "secret\n").unwrap();
    std::fs::write(src.join("d/x.txt"), "x\n").unwrap();
    std::fs::write(src.join("f"), "a file\n").unwrap();
    std::fs::write(src.join("keep/k.txt"), "k\n").unwrap();
    std::os::unix::fs::symlink("a.csv", src.join("link")).unwrap();
    env.commit(&src, "v1");
    let w = key(&env, "w", "read,commit");
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: w, effect: allow, principals: [\"key:w\"], actions: [\"dataset:read\", \"dataset:versions\", \"dataset:commit\"], resources: [\"datasets/ds\"]}\n  - {name: no_private, effect: deny, principals: [\"key:w\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n",
    );
    let g = serve(&env);
    let key_file = env.path("w.key");
    std::fs::write(&key_file, format!("{w}\n")).unwrap();
    let remote = |args: &[&str]| through(&env, &g.url, &key_file, args);
    let work = env.path("work");
    let commit_from = |message: &str| {
        let args = [
            "commit",
            "ds",
            "--from",
            work.to_str().unwrap(),
            "-m",
            message,
        ];
        remote(&args)
    };
    let out = remote(&["export", "ds", "latest", work.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!work.join("private/s.csv").exists());
    // The changes.
    let big = work.join("big.bin");
    let mut bytes = std::fs::read(&big).unwrap();
    bytes[1 << 20..(1 << 20) + (64 << 10)].fill(0xAB);
    std::fs::write(&big, &bytes).unwrap();
    std::fs::set_permissions(work.join("a.csv"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(work.join("new/empty")).unwrap();
    std::fs::write(work.join("new/n.txt"), "new\n").unwrap();
    std::fs::remove_dir_all(work.join("d")).unwrap();
    std::fs::remove_file(work.join("link")).unwrap();
    std::os::unix::fs::symlink("keep/k.txt", work.join("link")).unwrap();
    std::fs::remove_file(work.join("f")).unwrap();
    std::fs::create_dir(work.join("f")).unwrap();
    std::fs::write(work.join("f/g.txt"), "g\n").unwrap();
    let out = commit_from("through");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "v2"),
        "{said}"
    );
    let sent: u64 = said
        .split_whitespace()
        .skip_while(|w| *w != "sent")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        sent < 100 << 10,
        "sent {sent} bytes for a 64 KiB change: {said}"
    );
    // On the store: the folder as it is, and what the key cannot see.
    let there = env.path("there");
    env.ok(&["export", "ds", "v2", there.to_str().unwrap()]);
    let mut expected = common::fingerprint(&work);
    let got = common::fingerprint(&there);
    for (path, desc) in &got {
        if path.starts_with(b"private") {
            expected.insert(path.clone(), desc.clone());
        }
    }
    assert_eq!(got, expected);
    assert_eq!(
        std::fs::read(there.join("private/s.csv")).unwrap(),
        b"secret\n"
    );
    let log = env.log();
    let v2 = log.iter().find(|r| r["version"] == 2).unwrap();
    assert_eq!(v2["author"], "key:w");
    // Nothing new: nothing committed.
    let out = commit_from("again");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Names and a link's target that are not UTF-8, a small file (sent
    // in a bundle) and a large one (an upload named in its URL): as on
    // the store.
    use std::os::unix::ffi::OsStrExt;
    let odd = |name: &[u8]| work.join(std::ffi::OsStr::from_bytes(name));
    std::fs::write(odd(b"caf\xe9"), "x").unwrap();
    std::fs::create_dir(odd(b"d\xff")).unwrap();
    std::fs::write(odd(b"d\xff/big\xfe.bin"), common::noise(3 << 20, 9)).unwrap();
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(b"to\xe9"), odd(b"l\xe9")).unwrap();
    let out = commit_from("odd names");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let there = env.path("there3");
    env.ok(&["export", "ds", "v3", there.to_str().unwrap()]);
    let mut got = common::fingerprint(&there);
    got.retain(|p, _| !p.starts_with(b"private"));
    assert_eq!(got, common::fingerprint(&work));
    // A key that may only read: denied (exit 5), nothing committed.
    std::fs::write(work.join("a.csv"), "3\n").unwrap();
    let reader = env.path("r.key");
    std::fs::write(&reader, format!("{}\n", key(&env, "r", "read,commit"))).unwrap();
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: r, effect: allow, principals: [\"key:r\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}\n",
    );
    let args = [
        "commit",
        "ds",
        "--from",
        work.to_str().unwrap(),
        "-m",
        "denied",
    ];
    let out = through(&env, &g.url, &reader, &args);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.log().len(), 3);
}
