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
