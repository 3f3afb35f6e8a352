//! `detafs serve --s3-listen`: S3 clients (boto3, the AWS CLI, pyarrow,
//! polars, s3fs) read versions of a dataset through it, under the keys and
//! the policy of the store (tests/py/s3_clients.py does the clients' part).

mod common;

use common::gateway::{cert, s3_key, serve_with};
use common::{Env, noise, run_ok};
use std::process::Command;

fn python(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/s3_clients.py");
    run_ok(Command::new("python3").arg(script).args(args))
}

#[test]
fn s3_clients_read_versions_under_the_keys_and_the_policy() {
    let env = Env::new();
    let src = env.path("src");
    for d in ["pub", "private"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    std::fs::write(src.join("pub/a.csv"), "a,b\n0,0\n").unwrap();
    std::fs::write(src.join("private/secret.csv"), "ssn\n123\n").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("pub/a.csv"), "a,b\n1,2\n").unwrap();
    env.commit(&src, "v2");
    env.ok(&["tag", "ds", "v2", "published"]);
    // v3: the same a.csv as v2, a large file, 20,000 small ones, a table.
    std::fs::write(src.join("big.bin"), noise(5 << 20, 1)).unwrap();
    std::fs::create_dir_all(src.join("many")).unwrap();
    let many: Vec<String> = (0..20_000).map(|i| format!("f{i}")).collect();
    for (i, name) in many.iter().enumerate() {
        std::fs::write(src.join("many").join(name), i.to_string()).unwrap();
    }
    python(&["write", src.to_str().unwrap()]);
    env.commit(&src, "v3");

    let (key, secret) = s3_key(&env, "reader", "read");
    let (writer_key, writer_secret) = s3_key(&env, "writer", "read,commit");
    let (revoked_key, revoked_secret) = s3_key(&env, "gone", "read");
    env.ok(&["apikey", "revoke", "gone"]);
    // The reader sees v2 and later, and never private/.
    common::gateway::set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: read, effect: allow, principals: [\"key:reader\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}\n  - {name: not_v1, effect: deny, principals: [\"key:reader\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v1\"]}\n  - {name: no_private, effect: deny, principals: [\"key:reader\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n  - {name: write, effect: allow, principals: [\"key:writer\"], actions: [\"dataset:*\"], resources: [\"datasets/ds\"]}\n",
    );
    let g = serve_with(
        &env,
        &["--s3-listen", "127.0.0.1:0", "--s3-domain", "s3.test"],
    );
    let endpoint = g.s3.clone().expect("the S3 endpoint");
    let port = endpoint.rsplit(':').next().unwrap().to_string();
    let setup = serde_json::json!({
        "endpoint": endpoint,
        "ca": cert(&env),
        "key": key,
        "secret": secret,
        "writer_key": writer_key,
        "writer_secret": writer_secret,
        "tmp": env.path("client-tmp"),
        "revoked_key": revoked_key,
        "revoked_secret": revoked_secret,
        "src": src,
        "many": many,
        "domain": format!("s3.test:{port}"),
    });
    std::fs::create_dir_all(env.path("client-tmp")).unwrap();
    let file = env.path("setup.json");
    std::fs::write(&file, setup.to_string()).unwrap();
    let out = python(&["check", file.to_str().unwrap()]);
    assert!(out.trim().starts_with("ok "), "{out}");
    eprintln!("{out}");
}

#[test]
fn an_s3_key_needs_an_encrypted_store() {
    let env = Env::new_plaintext();
    let (code, err) = env.fails(&["apikey", "create", "r", "--scopes", "read", "--s3"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("S3 keys need an encrypted store"), "{err}");
    assert!(!env.ok(&["apikey", "list"]).contains("r "));
}

/// Writes and keys under a policy (tests/py/s3_hidden.py): a hidden file's
/// deletion is a missing one's; a hidden dataset answers as a missing one
/// (S3 and REST); staging and uploads belong to a key's id, not its name;
/// presigned URLs beyond 7 days and wrongly named multipart parts are
/// refused, the parts kept.
#[test]
fn hidden_is_missing_for_writes_and_keys_are_their_own() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("private")).unwrap();
    std::fs::write(src.join("pub.txt"), "public\n").unwrap();
    std::fs::write(src.join("private/secret.csv"), "ssn\n").unwrap();
    env.commit(&src, "v1");
    env.ok(&["dataset", "create", "other"]);
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("x.txt"), "x").unwrap();
    env.commit_to("other", &other, "o");
    let (clerk_key, clerk_secret) = s3_key(&env, "clerk", "read,commit");
    let (reader_key, reader_secret) = s3_key(&env, "reader", "read");
    let (temp_key, temp_secret) = s3_key(&env, "temp", "read,commit");
    let rest_reader = common::gateway::key(&env, "rest-reader", "read");
    let rest_a = common::gateway::key(&env, "a", "read,commit");
    let rest_b = common::gateway::key(&env, "b", "read,commit");
    let allow = |who: &str, actions: &str, on: &str| {
        format!(
            "  - {{name: {who}-{}, effect: allow, principals: [\"key:{who}\"], actions: [{actions}], resources: [\"{on}\"]}}\n",
            on.len()
        )
    };
    let mut policy = String::from(
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n",
    );
    for who in ["clerk", "temp", "a", "b"] {
        policy += &allow(who, "\"dataset:*\"", "datasets/ds");
    }
    for who in ["reader", "rest-reader"] {
        policy += &allow(who, "\"dataset:read\", \"dataset:versions\"", "datasets/ds");
    }
    policy += "  - {name: clerk_no_private, effect: deny, principals: [\"key:clerk\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n";
    common::gateway::set_policy_and_wait(&env, &policy);
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let mut setup = serde_json::json!({
        "endpoint": g.s3.clone().unwrap(),
        "rest": g.url,
        "ca": cert(&env),
        "clerk_key": clerk_key, "clerk_secret": clerk_secret,
        "reader_key": reader_key, "reader_secret": reader_secret,
        "temp_key": temp_key, "temp_secret": temp_secret,
        "rest_reader": rest_reader, "rest_a": rest_a, "rest_b": rest_b,
    });
    let file = env.path("setup.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/s3_hidden.py");
    let run = |phase: &str, setup: &serde_json::Value| {
        std::fs::write(&file, setup.to_string()).unwrap();
        run_ok(Command::new("python3").args([script, phase, file.to_str().unwrap()]))
    };
    run("stage", &setup);
    env.ok(&["apikey", "revoke", "temp"]);
    let (temp_key, temp_secret) = s3_key(&env, "temp", "read,commit");
    (setup["temp_key"], setup["temp_secret"]) = (temp_key.into(), temp_secret.into());
    // The gateway reads keys again at most every 2 s: wait for the new one.
    let probe = (
        setup["temp_key"].as_str().unwrap().to_string(),
        setup["temp_secret"].as_str().unwrap().to_string(),
    );
    common::within(
        std::time::Duration::from_secs(10),
        "the new key known",
        || common::gateway::s3_curl(g.s3.as_ref().unwrap(), &probe, &[], "ds/v1/pub.txt").0 == 200,
    );
    let out = run("check", &setup);
    assert!(out.trim().starts_with("ok "), "{out}");
    // The hidden file the clerk deleted is still there; nothing was named.
    assert_eq!(env.ok(&["cat", "ds", "v3", "private/secret.csv"]), "ssn\n");

    // Every request of both protocols is a line of the request log, with
    // its action, resource and decision: a hidden dataset refused, a
    // missing one not (both answered 404).
    let lines = || -> Vec<serde_json::Value> {
        let mut stack = vec![env.cache.clone()];
        let mut found = Vec::new();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else if e.file_name() == "gateway-0.jsonl" {
                    let text = std::fs::read_to_string(e.path()).unwrap();
                    found.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
                }
            }
        }
        found
    };
    let line = |protocol: &str, request: &str| {
        let find = || {
            lines()
                .into_iter()
                .find(|l| l["protocol"] == protocol && l["request"] == request)
        };
        common::within(std::time::Duration::from_secs(10), request, || {
            find().is_some()
        });
        find().unwrap()
    };
    let hidden = line("s3", "GET /other/v1/x.txt");
    assert_eq!(
        (
            &hidden["decision"],
            &hidden["status"],
            &hidden["action"],
            &hidden["resource"]
        ),
        (
            &"refused".into(),
            &404.into(),
            &"dataset:read".into(),
            &"datasets/other/versions/v1/files/x.txt".into()
        ),
        "{hidden}"
    );
    assert!(
        hidden["principal"].as_str().unwrap().starts_with("s3 key "),
        "{hidden}"
    );
    let missing = line("s3", "GET /nosuch/v1/x.txt");
    assert_eq!(
        (&missing["decision"], &missing["status"]),
        (&"allowed".into(), &404.into())
    );
    let rest = line("rest", "GET /datasets/other/versions");
    assert_eq!(
        (&rest["decision"], &rest["status"], &rest["action"]),
        (&"refused".into(), &404.into(), &"dataset:versions".into()),
        "{rest}"
    );
    let put = line("s3", "PUT /ds/staging/a.txt");
    assert_eq!(
        (&put["decision"], &put["action"]),
        (&"allowed".into(), &"dataset:commit".into())
    );
    // Each line says how long its answer took to begin.
    for l in [&hidden, &missing, &rest, &put] {
        assert!(l["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{l}");
    }
}
