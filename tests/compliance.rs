//! A dataset's life under compliance: retention rules applied by
//! `forget`, expired versions gone from every reader while the chain stays
//! verifiable, legal holds, a locked minimum age, and gc deleting what
//! only expired versions reached once the grace has passed.

mod common;

use common::gateway::{bearer, curl, json_of, key, s3_curl, s3_key, serve, serve_with, through};
use common::{Env, Hold, within};
use std::io::Read;
use std::time::Duration;

/// Six versions, each adding `fN` (its own bytes); v2 tagged `keepme`.
fn six_versions(env: &Env) -> std::path::PathBuf {
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 1..=6 {
        let body = common::noise(100_000 + i, 40 + i as u64);
        std::fs::write(src.join(format!("f{i}")), body).unwrap();
        env.commit(&src, &format!("c{i}"));
    }
    env.ok(&["tag", "ds", "v2", "keepme"]);
    src
}

/// Who the compliance report says leases version `v` (staging on it, or
/// an open file through a gateway).
fn leased_by(env: &Env, v: u64) -> Vec<String> {
    let report = json_of(env.ok(&["report", "ds", "--json"]).as_bytes());
    let versions = report["versions"].as_array().unwrap();
    let Some(row) = versions.iter().find(|r| r["version"] == v) else {
        return Vec::new();
    };
    serde_json::from_value(row["leased_by"].clone()).unwrap()
}

/// The versions `log` lists, newest first.
fn versions_listed(env: &Env) -> Vec<u64> {
    let mut v: Vec<u64> = env
        .log()
        .iter()
        .map(|e| e["version"].as_u64().unwrap())
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

fn lifecycle_kinds(env: &Env) -> Vec<String> {
    let log: serde_json::Value =
        serde_json::from_str(&env.ok(&["retention", "log", "ds", "--json"])).unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The rules keep the newest two and the tagged version; `forget` says
/// which rule keeps each, records the expiry, and from then on the CLI,
/// the mount and the gateway agree that the expired versions are missing,
/// while `log` shows the gap, `audit` the entry with its chain, and
/// `verify` passes. A file of a version open before it expired keeps
/// reading.
#[test]
fn forget_expires_what_the_rules_do_not_keep_for_every_reader() {
    let env = Env::new();
    six_versions(&env);
    let k = key(&env, "reader", "read");
    let g = serve(&env);
    let m = env.mount(&[]);
    let mut open_v3 = std::fs::File::open(m.path("versions/v3/f3")).unwrap();
    // Through a gateway, the mount leases the version an open file reads
    // (at its next poll); the report says so.
    if common::mounts_through_gateway() {
        within(
            Duration::from_secs(20),
            "the open file's version leased",
            || leased_by(&env, 3).contains(&common::mount_author().to_string()),
        );
    }

    // No rule yet: nothing expires.
    let out = env.ok(&["forget", "ds", "--dry-run"]);
    assert!(!out.contains("expire v"), "{out}");
    env.ok(&[
        "retention",
        "set",
        "ds",
        "--keep-last",
        "2",
        "--keep-tagged",
    ]);
    let dry = env.ok(&["forget", "ds", "--dry-run"]);
    assert!(
        dry.contains("keep   v2") && dry.contains("tagged keepme"),
        "{dry}"
    );
    assert!(
        dry.contains("expire v3") && dry.contains("expire v1"),
        "{dry}"
    );
    assert_eq!(
        versions_listed(&env),
        vec![6, 5, 4, 3, 2, 1],
        "a dry run expires nothing"
    );

    let plan: serde_json::Value =
        serde_json::from_str(&env.ok(&["forget", "ds", "--json"])).unwrap();
    assert_eq!(plan["expired"], serde_json::json!([1, 3, 4]));
    assert_eq!(versions_listed(&env), vec![6, 5, 2]);
    let text = env.ok(&["log", "ds"]);
    assert!(text.contains("v3..v4  expired"), "the gap is shown: {text}");

    let (code, err) = env.fails(&["cat", "ds", "v3", "f3"]);
    assert_eq!(code, 1);
    assert!(err.contains("expired"), "{err}");
    assert_eq!(
        env.run(&["cat", "ds", "v2", "f2"]).stdout,
        common::noise(100_002, 42)
    );

    // The mount drops them within its poll; the open file still reads.
    within(Duration::from_secs(20), "v3 to leave the mount", || {
        !m.path("versions/v3").exists()
    });
    let listed: Vec<String> = std::fs::read_dir(m.path("versions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!listed.contains(&"v1".to_string()) && listed.contains(&"v2".to_string()));
    let mut bytes = Vec::new();
    open_v3.read_to_end(&mut bytes).unwrap();
    assert!(
        bytes == common::noise(100_003, 43),
        "the open file reads on"
    );

    // The gateway answers as for a version that never was.
    let v3 = format!("{}/datasets/ds/versions/v3/files/f3", g.url);
    assert_eq!(curl(&[&v3, "-H", &bearer(&k)]).0, 404);
    let (s, body) = curl(&[
        &format!("{}/datasets/ds/versions", g.url),
        "-H",
        &bearer(&k),
    ]);
    assert_eq!(s, 200);
    let shown = String::from_utf8_lossy(&body).into_owned();
    assert!(
        !shown.contains("\"v3\"") && shown.contains("\"v5\""),
        "{shown}"
    );

    let audit: serde_json::Value =
        serde_json::from_str(&env.ok(&["audit", "ds", "--json"])).unwrap();
    assert_eq!(audit["ok"], true, "{audit}");
    let entries = audit["lifecycle"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["event"]["kind"], "expire");
    assert_eq!(
        entries[1]["event"]["versions"],
        serde_json::json!([1, 3, 4])
    );
    assert_eq!(entries[1]["chained"], true);
    assert_eq!(audit["versions"][2]["expired"], true);
    env.ok(&["verify", "ds"]);

    // The numbers are never reused.
    std::fs::write(env.path("src/f7"), "7").unwrap();
    env.commit(&env.path("src"), "c7");
    assert_eq!(versions_listed(&env), vec![7, 6, 5, 2]);
}

/// A named version is expired only if it may be: never the newest, a held
/// one or one younger than the minimum age; each refusal changes nothing.
/// A locked minimum age cannot be shortened, and the attempt is on record.
#[test]
fn holds_the_newest_and_a_locked_minimum_age_keep_versions() {
    let env = Env::new();
    six_versions(&env);
    let (code, err) = env.fails(&["forget", "ds", "latest"]);
    assert_eq!(code, 1);
    assert!(err.contains("the newest version"), "{err}");
    env.ok(&["hold", "ds", "v3", "--reason", "case 7"]);
    let (_, err) = env.fails(&["forget", "ds", "v1", "v3"]);
    assert!(err.contains("held: case 7"), "{err}");
    assert_eq!(versions_listed(&env).len(), 6, "nothing expired");
    assert!(env.ok(&["hold", "ds"]).contains("v3"));

    env.ok(&["retention", "set", "ds", "--keep-last", "1"]);
    let plan: serde_json::Value =
        serde_json::from_str(&env.ok(&["forget", "ds", "--dry-run", "--json"])).unwrap();
    assert_eq!(
        plan["expired"],
        serde_json::json!([1, 2, 4, 5]),
        "v3 is held"
    );

    env.ok(&["retention", "set", "ds", "--min-age", "30d", "--lock"]);
    let (_, err) = env.fails(&["forget", "ds", "v1"]);
    assert!(err.contains("younger than the minimum age"), "{err}");
    let (code, err) = env.fails(&["retention", "set", "ds", "--min-age", "1d", "--lock"]);
    assert_eq!(code, 5, "{err}");
    let (code, _) = env.fails(&["retention", "set", "ds", "--keep-last", "1"]);
    assert_eq!(code, 5, "the lock cannot be dropped");
    env.ok(&["retention", "set", "ds", "--min-age", "60d", "--lock"]);
    assert_eq!(
        lifecycle_kinds(&env),
        [
            "retention",
            "refused",
            "refused",
            "retention",
            "retention",
            "hold"
        ]
    );
    env.ok(&["release", "ds", "v3", "--reason", "case closed"]);
    assert!(!env.ok(&["hold", "ds"]).contains("v3"));
    assert_eq!(versions_listed(&env).len(), 6);
}

/// v1 holds `first` (3 MiB of its own, returned), v2 holds `then` instead
/// (1 MiB of `noise(.., 8)`).
fn replaced(env: &Env, first: &str, then: &str, seed: u64) -> Vec<u8> {
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let bytes = common::noise(3 << 20, seed);
    std::fs::write(src.join(first), &bytes).unwrap();
    env.commit(&src, "v1");
    std::fs::remove_file(src.join(first)).unwrap();
    std::fs::write(src.join(then), common::noise(1 << 20, 8)).unwrap();
    env.commit(&src, "v2");
    bytes
}

/// What only an expired version reached stays through gc's grace after
/// the expiry, and goes with the next gc after it; every kept version
/// reads back exactly and `verify` passes.
#[test]
fn gc_deletes_what_only_expired_versions_reached_after_the_grace() {
    let env = Env::new();
    replaced(&env, "gone.bin", "kept.bin", 7);
    let packs = || env.objects.list("packs/").len();
    let before = packs();

    env.ok(&["forget", "ds", "v1"]);
    let out = env.ok(&["gc", "--grace", "1h"]);
    assert_eq!(packs(), before, "within the grace: {out}");
    common::next_second();
    env.ok(&["gc", "--grace", "0s"]);
    assert!(packs() < before, "v1's own pack went");
    let kept = env.run(&["cat", "ds", "v2", "kept.bin"]).stdout;
    assert!(kept == common::noise(1 << 20, 8), "v2 reads back exactly");
    env.ok(&["verify", "ds"]);
    let audit = json_of(env.ok(&["audit", "ds", "--json"]).as_bytes());
    assert_eq!(audit["ok"], true, "{audit}");
}

/// The files of the erasure tests: a file of its own (`people/jane.csv`,
/// its bytes marked so they can be searched for), and a file whose bytes
/// another file shares (`people/copy.txt` and `shared.txt`).
fn erasable(env: &Env) -> (std::path::PathBuf, Vec<u8>) {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("people")).unwrap();
    let mut jane = common::noise(300_000, 3);
    for at in (0..jane.len() - 32).step_by(20_000) {
        jane[at..at + 32].copy_from_slice(MARK);
    }
    std::fs::write(src.join("people/jane.csv"), &jane).unwrap();
    let shared = common::noise(50_000, 4);
    std::fs::write(src.join("people/copy.txt"), &shared).unwrap();
    std::fs::write(src.join("shared.txt"), &shared).unwrap();
    // Packs larger than small objects: an erasure rewrites them whole.
    std::fs::write(src.join("big.bin"), common::noise(3 << 20, 5)).unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("other.txt"), "o").unwrap();
    env.commit(&src, "v2");
    (src, jane)
}

const MARK: &[u8; 32] = b"JANE-DOE-1970-01-01-SSN-000-00-0";

/// Whether any object of the store holds `needle` as it is (a plaintext
/// store keeps chunks raw where compression does not pay).
fn store_holds(env: &Env, needle: &[u8]) -> bool {
    env.objects.list("").iter().any(|(key, _)| {
        env.objects
            .read(key)
            .windows(needle.len())
            .any(|w| w == needle)
    })
}

/// An erased file's bytes leave the store: no object holds them after
/// the erasure; a held version refuses it first (nothing changes); the
/// erased path reads as erased through the CLI, the mount and the
/// gateway, listings mark it, a file sharing bytes with the erased one
/// and every other file read back exactly, and `verify` and `audit` pass.
#[test]
fn an_erased_file_leaves_no_byte_in_the_store() {
    let env = Env::new_plaintext();
    let (src, _jane) = erasable(&env);
    assert!(store_holds(&env, MARK), "the file is in the store");
    let k = key(&env, "reader", "read");
    let g = serve(&env);

    env.ok(&["hold", "ds", "v1", "--reason", "litigation"]);
    let (code, err) = env.fails(&["erase", "ds", "people/jane.csv", "--reason", "GDPR"]);
    assert_eq!(code, 1);
    assert!(err.contains("held: litigation"), "{err}");
    assert!(store_holds(&env, MARK), "a refused erasure changes nothing");
    env.ok(&["release", "ds", "v1", "--reason", "settled"]);
    let (code, _) = env.fails(&["erase", "ds", "people/jane.csv"]);
    assert_eq!(code, 2, "a reason is required");

    let out = env.ok(&["erase", "ds", "people/jane.csv", "--reason", "GDPR art. 17"]);
    assert!(out.contains("from v1..v2"), "{out}");
    assert!(!store_holds(&env, MARK), "no object holds the erased bytes");

    for v in ["v1", "v2"] {
        let (code, err) = env.fails(&["cat", "ds", v, "people/jane.csv"]);
        assert_eq!(code, 1);
        assert!(err.contains("was erased"), "{err}");
        let ls = env.ok(&["ls", "ds", v, "people"]);
        assert!(ls.contains("jane.csv  (erased)"), "{ls}");
        assert_eq!(
            env.run(&["cat", "ds", v, "people/copy.txt"]).stdout,
            common::noise(50_000, 4)
        );
        assert_eq!(
            env.run(&["cat", "ds", v, "shared.txt"]).stdout,
            common::noise(50_000, 4)
        );
        let big = env.run(&["cat", "ds", v, "big.bin"]).stdout;
        assert!(big == common::noise(3 << 20, 5), "{v}: big.bin reads back");
    }
    let jane = format!("{}/datasets/ds/versions/v1/files/people/jane.csv", g.url);
    let (s, body) = curl(&[&jane, "-H", &bearer(&k)]);
    assert_eq!(s, 410, "{}", String::from_utf8_lossy(&body));
    let m = env.mount(&[]);
    let err = std::fs::read(m.path("versions/v2/people/jane.csv")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENODATA), "{err}");
    assert!(m.log().contains("was erased"), "the daemon's log says so");
    assert_eq!(
        std::fs::read(m.path("versions/v1/people/copy.txt")).unwrap(),
        common::noise(50_000, 4)
    );

    let verify = env.run(&["verify", "ds", "--json"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let report = json_of(&verify.stdout);
    assert!(report["erased"].as_u64().unwrap() >= 1, "{report}");
    let audit = json_of(env.ok(&["audit", "ds", "--json"]).as_bytes());
    assert_eq!(audit["ok"], true, "{audit}");
    let erasure = &audit["lifecycle"][2]["event"];
    assert_eq!(erasure["kind"], "erase");
    assert_eq!(erasure["reason"], "GDPR art. 17");
    assert_eq!(erasure["versions"], serde_json::json!([1, 2]));

    // Erasure is of the history: committed again from a source that still
    // has the file, it is new data (the hosts forgot where the old chunks
    // lay, so nothing refers to the zeroed ones).
    std::fs::write(src.join("later.txt"), "l").unwrap();
    env.commit(&src, "v3");
    assert_eq!(
        env.run(&["cat", "ds", "v3", "people/jane.csv"])
            .stdout
            .len(),
        300_000
    );
    assert!(
        store_holds(&env, MARK),
        "committed anew from the source, it is new data"
    );
}

/// The library opened in this process on `env`'s (local) store, afresh
/// (nothing cached from before the last command).
fn open_repo(env: &Env) -> detafs::repo::Repo {
    detafs::repo::Repo::open(&detafs::repo::Options {
        store: Some(env.store.clone()),
        cache_dir: Some(env.path("test-cache")),
        cache_size: 1 << 30,
        cache_memory: None,
        store_timeout: Duration::from_secs(30),
        key_file: Some(env.key_file.clone()),
        passphrase: None,
        sse: None,
        object_lock: None,
        runtime: detafs::runtime::Runtime::new().unwrap(),
    })
    .unwrap()
}

const PATHS: [&str; 4] = ["a.csv", "d/b.csv", "d/e/c.csv", "f.bin"];

/// Content `i` of the pool (several files may hold the same: dedup).
fn content(i: u8) -> Vec<u8> {
    common::noise(30_000 + usize::from(i) * 7_000, 100 + u64::from(i))
}

#[derive(Clone, Debug)]
enum Op {
    /// Each (path, content or none: removed).
    Commit(Vec<(usize, Option<u8>)>),
    Forget(usize),
    Erase {
        path: usize,
        from: Option<usize>,
    },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => proptest::collection::vec((0..PATHS.len(), proptest::option::weighted(0.8, 0u8..4)), 1..4)
            .prop_map(Op::Commit),
        1 => (0usize..8).prop_map(Op::Forget),
        2 => (0..PATHS.len(), proptest::option::of(0usize..8))
            .prop_map(|(path, from)| Op::Erase { path, from }),
    ]
}

/// What the store should hold: each version's files (content index), the
/// versions expired, the (version, path) erased.
#[derive(Default)]
struct Model {
    versions: Vec<(u64, std::collections::BTreeMap<usize, u8>)>,
    expired: std::collections::BTreeSet<u64>,
    erased: std::collections::BTreeSet<(u64, usize)>,
}

impl Model {
    fn served(&self) -> Vec<u64> {
        self.versions
            .iter()
            .map(|(v, _)| *v)
            .filter(|v| !self.expired.contains(v))
            .collect()
    }

    /// Whether content `c` is still held by a file not erased, in any
    /// version (an expired one's data stays until gc).
    fn keeps(&self, c: u8) -> bool {
        self.versions.iter().any(|(v, files)| {
            files
                .iter()
                .any(|(p, &x)| x == c && !self.erased.contains(&(*v, *p)))
        })
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(10),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// After any sequence of commits, forgets and erasures: the versions
    /// served are those not expired; every file of each reads back exactly
    /// or, erased, as erased; and no chunk of an erased file can be read
    /// back from the store (decrypted) unless a file not erased still
    /// holds the same bytes.
    #[test]
    fn commits_forgets_and_erasures_agree_with_the_model(ops in proptest::collection::vec(op(), 1..9)) {
        let env = Env::new_local();
        let src = env.path("src");
        let mut model = Model::default();
        let mut files = std::collections::BTreeMap::new();
        // Chunks of erased files as they lay before, with their content.
        let mut erased_refs = Vec::new();
        for op in ops {
            match op {
                Op::Commit(writes) => {
                    let before = files.clone();
                    for (p, c) in writes {
                        match c {
                            Some(c) => { files.insert(p, c); }
                            None => { files.remove(&p); }
                        }
                    }
                    if files == before && !model.versions.is_empty() {
                        continue;
                    }
                    let _ = std::fs::remove_dir_all(&src);
                    std::fs::create_dir_all(&src).unwrap();
                    for (p, c) in &files {
                        let path = src.join(PATHS[*p]);
                        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                        std::fs::write(path, content(*c)).unwrap();
                    }
                    env.commit(&src, "c");
                    let v = model.versions.last().map_or(1, |(v, _)| v + 1);
                    model.versions.push((v, files.clone()));
                }
                Op::Forget(i) => {
                    let served = model.served();
                    if served.len() < 2 {
                        continue;
                    }
                    let v = served[i % (served.len() - 1)];
                    env.ok(&["forget", "ds", &format!("v{v}")]);
                    model.expired.insert(v);
                }
                Op::Erase { path, from } => {
                    let served = model.served();
                    if served.is_empty() {
                        continue;
                    }
                    let from = from.map(|i| served[i % served.len()]);
                    let holders: Vec<u64> = model
                        .versions
                        .iter()
                        .filter(|(v, f)| {
                            from.is_none_or(|from| *v >= from)
                                && f.contains_key(&path)
                                && !model.erased.contains(&(*v, path))
                        })
                        .map(|(v, _)| *v)
                        .collect();
                    let mut args = vec!["erase", "ds", PATHS[path], "--reason", "r"];
                    let from_arg = from.map(|v| format!("v{v}"));
                    if let Some(f) = &from_arg {
                        args.extend(["--from", f]);
                    }
                    if holders.is_empty() {
                        let (code, err) = env.fails(&args);
                        proptest::prop_assert_eq!(code, 1, "{}", err);
                        continue;
                    }
                    let repo = open_repo(&env);
                    for (v, f) in &model.versions {
                        if holders.contains(v) {
                            let root = repo.chain_records("ds").unwrap()
                                .into_iter().find(|r| r.version == *v).unwrap().tree;
                            let rel = detafs::relpath::RelPath::parse(PATHS[path].as_bytes()).unwrap();
                            if let Some(detafs::snapshot::Node::File { chunks, .. }) = repo.lookup(&root, &rel).unwrap() {
                                erased_refs.extend(chunks.into_iter().map(|c| (c, f[&path])));
                            }
                        }
                    }
                    // Two versions an entry: a long erasure in several.
                    let out = env.command_for(&args).env("DETAFS_TEST_ERASE_BATCH", "2").output().unwrap();
                    proptest::prop_assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    model.erased.extend(holders.iter().map(|v| (*v, path)));
                }
            }
        }
        let listed: Vec<u64> = {
            let mut v: Vec<u64> = env.log().iter().map(|e| e["version"].as_u64().unwrap()).collect();
            v.sort_unstable();
            v
        };
        proptest::prop_assert_eq!(&listed, &model.served());
        for (v, files) in &model.versions {
            for (p, c) in files {
                let out = env.run(&["cat", "ds", &format!("v{v}"), PATHS[*p]]);
                if model.expired.contains(v) {
                    proptest::prop_assert!(!out.status.success());
                } else if model.erased.contains(&(*v, *p)) {
                    let err = String::from_utf8_lossy(&out.stderr);
                    proptest::prop_assert!(err.contains("was erased"), "v{} {}: {}", v, PATHS[*p], err);
                } else {
                    proptest::prop_assert!(out.stdout == content(*c), "v{} {} reads back", v, PATHS[*p]);
                }
            }
        }
        let repo = open_repo(&env);
        for (r, c) in erased_refs {
            if model.keeps(c) {
                continue;
            }
            let read = detafs::store::pack::read_blob(repo.store(), &r, detafs::store::pack::BlobKind::Chunk);
            proptest::prop_assert!(read.is_err(), "a chunk of erased content {} still reads", c);
        }
        env.ok(&["verify", "ds"]);
    }
}

/// An erasure killed before its record changes nothing a reader sees (the
/// file reads on, and a new erasure does it whole); killed after it, the
/// path is erased for every reader and the next `gc` zeroes what was left.
#[test]
fn an_erasure_killed_at_each_step_is_whole_or_finished_by_gc() {
    for (point, recorded) in [("erase-trees-written", false), ("erase-recorded", true)] {
        let env = Env::new_plaintext();
        let (_, jane) = erasable(&env);
        let hold = Hold::new(&env, point);
        let mut erase = env.command_for(&["erase", "ds", "people/jane.csv", "--reason", "r"]);
        let mut child = erase.env("FAILPOINTS", &hold.spec).spawn().unwrap();
        hold.reached();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(store_holds(&env, MARK), "{point}: nothing zeroed yet");
        let cat = env.run(&["cat", "ds", "v2", "people/jane.csv"]);
        if recorded {
            assert!(
                String::from_utf8_lossy(&cat.stderr).contains("was erased"),
                "{point}"
            );
            env.ok(&["gc"]);
        } else {
            assert!(cat.stdout == jane, "{point}: the file reads on");
            env.ok(&["erase", "ds", "people/jane.csv", "--reason", "r"]);
        }
        erasure_finished(&env);
    }
}

/// The erased bytes are in no object, the file sharing bytes with the
/// erased one reads on, and `verify` passes.
fn erasure_finished(env: &Env) {
    assert!(!store_holds(env, MARK), "the bytes are gone");
    assert_eq!(
        env.run(&["cat", "ds", "v1", "shared.txt"]).stdout,
        common::noise(50_000, 4)
    );
    env.ok(&["verify", "ds"]);
}

/// Two hosts deciding at once: a `forget` whose log changed between its
/// decision and its record is refused whole (it expired nothing), while
/// the other's expiry and a commit made meanwhile stand.
#[test]
fn a_forget_decided_on_a_stale_log_is_refused_whole() {
    let env = Env::new();
    let src = six_versions(&env);
    let other = env.other_host();
    let hold = Hold::new(&env, "forget-decided");
    let mut forget = env.command_for(&["forget", "ds", "v1"]);
    let child = forget
        .env("FAILPOINTS", &hold.spec)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    hold.reached();
    other.ok(&["forget", "ds", "v2"]);
    std::fs::write(src.join("f7"), "7").unwrap();
    other.commit(&src, "c7");
    hold.release();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("changed meanwhile"), "{err}");
    assert_eq!(versions_listed(&env), vec![7, 6, 5, 4, 3, 1]);
    env.ok(&["forget", "ds", "v1"]);
    assert_eq!(versions_listed(&env), vec![7, 6, 5, 4, 3]);
    env.ok(&["audit", "ds"]);
}

/// Staging that stands on a version expired meanwhile keeps working: its
/// lease keeps the version's data through gc until staging moves on.
#[test]
fn staging_on_an_expired_version_keeps_its_content_through_gc() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let big = common::noise(2 << 20, 11);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    env.commit(&src, "v1");
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/mine.txt"), "staged").unwrap();
    // Another host replaces the file, and expires the version staging
    // stands on; gc runs past its grace.
    let other = env.other_host();
    std::fs::remove_file(src.join("big.bin")).unwrap();
    std::fs::write(src.join("small.txt"), "s").unwrap();
    other.commit(&src, "v2");
    other.ok(&["forget", "ds", "v1"]);
    common::next_second();
    other.ok(&["gc", "--grace", "0s"]);
    assert!(std::fs::read(m.path("staging/big.bin")).unwrap() == big);
    common::commit_via_control(&m, "mine").unwrap();
    let out = env.run(&["cat", "ds", "latest", "big.bin"]);
    assert!(
        out.stdout == big,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.ok(&["verify", "ds"]);
}

/// Through the S3 endpoint, an expired version is a missing key and an
/// erased file answers 410 Gone; the other files read on.
#[test]
fn s3_answers_expired_as_missing_and_erased_as_gone() {
    // Sealed, whatever `DETAFS_TEST_PLAINTEXT` says: S3 keys need it.
    let env = Env::empty();
    env.ok(&["init"]);
    env.ok(&["dataset", "create", "ds"]);
    erasable(&env);
    let s3 = s3_key(&env, "reader-s3", "read");
    let g = serve_with(&env, &["--s3-listen", "127.0.0.1:0"]);
    let endpoint = g.s3.clone().unwrap();
    env.ok(&["forget", "ds", "v1"]);
    env.ok(&["erase", "ds", "people/jane.csv", "--reason", "r"]);
    let (s, _) = s3_curl(&endpoint, &s3, &[], "ds/v1/shared.txt");
    assert_eq!(s, 404);
    let (s, body) = s3_curl(&endpoint, &s3, &[], "ds/v2/people/jane.csv");
    assert_eq!(s, 410, "{}", String::from_utf8_lossy(&body));
    let (s, body) = s3_curl(&endpoint, &s3, &[], "ds/v2/people/copy.txt");
    assert!(s == 200 && body == common::noise(50_000, 4));
}

/// The policy governs the lifecycle: a caller denied `dataset:forget` and
/// `dataset:erase` is refused (exit 5, nothing changes), while one it
/// allows `dataset:hold` holds.
#[test]
fn the_policy_decides_who_forgets_erases_and_holds() {
    let env = Env::new();
    erasable(&env);
    let policy = env.path("policy.yaml");
    std::fs::write(
        &policy,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: no_forgetting, effect: deny, principals: [\"user:root\"], actions: [\"dataset:forget\", \"dataset:erase\"], resources: [\"datasets/ds\"]}\n",
    )
    .unwrap();
    env.ok(&["policy", "set", policy.to_str().unwrap()]);
    let (code, err) = env.fails(&["forget", "ds", "v1"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("dataset:forget"), "{err}");
    let (code, err) = env.fails(&["erase", "ds", "shared.txt", "--reason", "r"]);
    assert_eq!(code, 5, "{err}");
    assert_eq!(versions_listed(&env), vec![2, 1]);
    assert_eq!(
        env.run(&["cat", "ds", "v1", "shared.txt"]).stdout,
        common::noise(50_000, 4)
    );
    env.ok(&["hold", "ds", "v1", "--reason", "r"]);
    assert_eq!(lifecycle_kinds(&env), ["hold"]);
    // The report says who may read each version under this policy.
    let report = json_of(env.ok(&["report", "ds", "--json"]).as_bytes());
    assert_eq!(
        report["versions"][0]["readers"],
        serde_json::json!(["user:root"])
    );
    assert_eq!(report["versions"][0]["held"]["reason"], "r");
}

/// A host without the store's key runs the lifecycle through a gateway:
/// the same commands and output, the key's scopes and the policy deciding
/// (a read-only key is refused, exit 5, and nothing changes).
#[test]
fn the_lifecycle_through_a_gateway() {
    let env = Env::new();
    six_versions(&env);
    let g = serve(&env);
    let (admin, reader) = (env.path("admin.key"), env.path("reader.key"));
    std::fs::write(&admin, key(&env, "officer", "admin")).unwrap();
    std::fs::write(&reader, key(&env, "analyst", "read")).unwrap();
    let run = |k: &std::path::Path, args: &[&str]| {
        let out = through(&env, &g.url, k, args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            err,
        )
    };
    let (code, _, err) = run(&reader, &["forget", "ds", "v1"]);
    assert_eq!(code, Some(5), "{err}");
    let (code, _, err) = run(&reader, &["report", "ds"]);
    assert_eq!(code, Some(5), "{err}");
    assert_eq!(versions_listed(&env).len(), 6, "nothing changed");

    let ok = |args: &[&str]| {
        let (code, out, err) = run(&admin, args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        out
    };
    ok(&[
        "retention",
        "set",
        "ds",
        "--keep-last",
        "2",
        "--keep-tagged",
    ]);
    assert!(ok(&["retention", "show", "ds"]).contains("--keep-last 2"));
    ok(&["hold", "ds", "v3", "--reason", "case 9"]);
    assert!(ok(&["hold", "ds"]).contains("case 9"));
    let dry = ok(&["forget", "ds", "--dry-run"]);
    assert!(
        dry.contains("held (case 9)") && dry.contains("expire v1"),
        "{dry}"
    );
    let plan: serde_json::Value = serde_json::from_str(&ok(&["forget", "ds", "--json"])).unwrap();
    assert_eq!(plan["expired"], serde_json::json!([1, 4]));
    assert_eq!(versions_listed(&env), vec![6, 5, 3, 2]);
    ok(&["release", "ds", "v3", "--reason", "closed"]);
    assert!(ok(&["erase", "ds", "f5", "--reason", "GDPR"]).contains("from v5..v6"));
    let (code, _, err) = run(&admin, &["cat", "ds", "v6", "f5"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("erased"), "{err}");
    let report: serde_json::Value = serde_json::from_str(&ok(&["report", "ds", "--json"])).unwrap();
    assert_eq!(report["chain_ok"], true, "{report}");
    assert_eq!(report["erasures"][0]["reason"], "GDPR");
    assert_eq!(report["versions"][0]["state"], "expired");
    let text = ok(&["retention", "log", "ds"]);
    assert!(
        text.contains("erased f5") && text.contains("key:officer"),
        "{text}"
    );
    // The store's own CLI sees the same.
    assert!(env.ok(&["report", "ds"]).contains("erased f5"));
}

/// A host behind a gateway leases the versions its staging stands on
/// through it: the gateway serves a version expired meanwhile to that
/// lease's holder alone, a lease never takes a version expired before it
/// (nor another caller's lease), and gc keeps what it names.
#[test]
fn a_lease_through_a_gateway_serves_an_expired_version_to_its_holder_alone() {
    let env = Env::new();
    six_versions(&env);
    let g = serve(&env);
    let (holder, other, reader) = (
        key(&env, "stager", "read,commit"),
        key(&env, "another", "read,commit"),
        key(&env, "analyst", "read"),
    );
    let staging = "0123456789abcdef0123456789abcdef";
    let call = |k: &str, method: &str, at: &str, body: &str| {
        let auth = format!("Authorization: Bearer {k}");
        let url = format!("{}{at}", g.url);
        let mut args = vec!["-X", method, "-H", &auth, &url];
        if !body.is_empty() {
            args.extend(["-H", "Content-Type: application/json", "-d", body]);
        }
        curl(&args).0
    };
    let lease = |k: &str, staging: &str, body: &str| {
        call(k, "PUT", &format!("/datasets/ds/leases/{staging}"), body)
    };
    assert_eq!(lease(&holder, staging, r#"{"versions": [2]}"#), 200);
    assert_eq!(leased_by(&env, 2), ["key:stager"]);
    assert_eq!(
        lease(&reader, staging, r#"{"versions": [2]}"#),
        403,
        "a lease is the commit scope's"
    );
    for (name, body) in [
        ("../x", r#"{"versions": [2]}"#),
        ("zz", r#"{"versions": [2]}"#),
        (staging, &format!("{{\"versions\": {:?}}}", vec![2; 65])),
        (staging, r#"{"versions": "2"}"#),
        (staging, "not json"),
    ] {
        let status = lease(&holder, name, body);
        assert!(status == 400 || status == 404, "{name} {body}: {status}");
    }
    env.ok(&["forget", "ds", "v1", "v2"]);
    let file =
        |k: &str, v: &str| call(k, "GET", &format!("/datasets/ds/versions/{v}/files/f2"), "");
    assert_eq!(file(&holder, "v2"), 200, "the holder reads on");
    assert_eq!(file(&holder, "2"), 200);
    assert_eq!(
        file(&holder, "v02"),
        file(&holder, "v06"),
        "one spelling per version"
    );
    assert_eq!(file(&other, "v2"), 404, "nobody else does");
    assert_eq!(file(&reader, "v2"), 404);
    assert_eq!(file(&holder, "v1"), 404, "a version it never leased");
    // A lease takes no version expired before it, in its own name or
    // another caller's.
    assert_eq!(lease(&holder, staging, r#"{"versions": [1]}"#), 404);
    assert_eq!(lease(&other, staging, r#"{"versions": [2]}"#), 404);
    let listed = curl(&[
        "-H",
        &format!("Authorization: Bearer {holder}"),
        &format!("{}/datasets/ds/versions", g.url),
    ])
    .1;
    assert!(
        json_of(&listed)
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["version"] != 2),
        "an expired version is listed for nobody"
    );
    // gc keeps what the lease names; moving on (v2 → v6) keeps v2 too.
    assert_eq!(lease(&holder, staging, r#"{"versions": [2, 6]}"#), 200);
    common::next_second();
    env.ok(&["gc", "--grace", "0s"]);
    let auth = format!("Authorization: Bearer {holder}");
    let (status, body) = curl(&[
        "-H",
        &auth,
        &format!("{}/datasets/ds/versions/v2/files/f2", g.url),
    ]);
    assert!(status == 200 && body == common::noise(100_002, 42));
    // Once staging stands on v6 alone, v2 is served to nobody and goes.
    assert_eq!(lease(&holder, staging, r#"{"versions": [6]}"#), 200);
    assert_eq!(file(&holder, "v2"), 404);
    assert_eq!(
        lease(&holder, staging, r#"{"versions": [2]}"#),
        404,
        "not taken back"
    );
    env.ok(&["verify"]);
}

/// A lifecycle log changed in the store breaks its chain: `audit` marks
/// the entry, and readers fail closed (which versions expired cannot be
/// told), never serving an expired version as if it were kept.
#[test]
fn a_forged_lifecycle_entry_breaks_the_chain_and_readers_fail_closed() {
    let env = Env::new_plaintext();
    six_versions(&env);
    env.ok(&["forget", "ds", "v1"]);
    env.ok(&["hold", "ds", "v2", "--reason", "r"]);
    let first = "datasets/ds/lifecycle/00000000000000000001.json";
    let forged = String::from_utf8(env.objects.read(first))
        .unwrap()
        .replace("[1]", "[2]");
    env.objects.write(first, forged.into_bytes());
    let audit = env.run(&["audit", "ds", "--json"]);
    let report = json_of(&audit.stdout);
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["lifecycle"][1]["chained"], false, "{report}");
    let other = env.other_host();
    let (code, err) = other.fails(&["log", "ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("lifecycle log of ds is broken"), "{err}");
    let (_, err) = other.fails(&["cat", "ds", "v1", "f1"]);
    assert!(err.contains("broken"), "{err}");
}

/// A colder location for the store's tier: a second folder, or a second
/// bucket where the store is on S3; and a raw view of it.
fn cold_tier(env: &Env) -> (String, common::objects::Objects) {
    match &env.bucket {
        Some(_) => {
            let bucket = common::objects::new_bucket(&env.endpoint);
            let objects = common::objects::Objects::s3(&env.endpoint, &bucket, "cold");
            (format!("s3://{bucket}/cold"), objects)
        }
        None => {
            let dir = env.path("cold");
            std::fs::create_dir_all(&dir).unwrap();
            let objects = common::objects::Objects::local(&dir);
            (dir.display().to_string(), objects)
        }
    }
}

/// `tier` moves the packs only old versions reach to the colder tier: the
/// store keeps what newer versions reach, every reader (CLI, the mount,
/// another host that was told nothing) reads the old versions' files as
/// before, `verify` says how much lives where, and gc deletes cold packs
/// no version reaches. A move killed between its copy and its delete
/// leaves the pack whole in both places, and the next `tier` finishes it.
#[test]
fn old_versions_move_to_the_colder_tier_and_read_on() {
    let env = Env::new();
    let old = replaced(&env, "old.bin", "new.bin", 21);
    let (cold_url, cold) = cold_tier(&env);
    let packs = || env.objects.list("packs/").len();
    let cold_packs = || {
        let listed = cold.list("packs/");
        listed
            .iter()
            .filter(|(k, _)| !k.contains(".moving-"))
            .count()
    };
    let before = packs();

    // Killed after its first copy: that pack is in both places.
    let hold = Hold::new(&env, "tier-copied");
    let mut tier = env.command_for(&[
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-store",
        &cold_url,
    ]);
    let mut child = tier.env("FAILPOINTS", &hold.spec).spawn().unwrap();
    hold.reached();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(cold_packs() >= 1, "copied");
    // What a mover killed inside its copy leaves (a second mover may have
    // been there): a temporary name, never counted as a pack, gone by gc.
    // Named after a pack that was copied whole, not after the killed
    // mover's own temporary name, which may be listed first.
    let copied = cold.list("packs/");
    let copied = copied.iter().find(|(k, _)| !k.contains(".moving-"));
    let leftover = copied.unwrap().0.clone() + ".moving-4000000";
    if env.bucket.is_none() {
        let file = env.path("cold").join(&leftover);
        std::fs::write(file, b"half a pack").unwrap();
    }
    assert_eq!(
        packs(),
        before,
        "nothing deleted before its copy is checked"
    );
    assert!(env.run(&["cat", "ds", "v1", "old.bin"]).stdout == old);

    let out = env.ok(&["tier", "ds", "--older-than", "0s", "--json"]);
    let moved: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(moved["versions"], serde_json::json!([1]), "{moved}");
    let in_cold = cold_packs();
    assert!(
        in_cold >= 1 && packs() + in_cold == before,
        "{in_cold} cold of {before}"
    );
    assert!(env.run(&["cat", "ds", "v1", "old.bin"]).stdout == old);
    let other = env.other_host();
    assert!(
        other.run(&["cat", "ds", "v1", "old.bin"]).stdout == old,
        "told nothing, it finds the tier"
    );
    let m = env.mount(&[]);
    assert!(std::fs::read(m.path("versions/v1/old.bin")).unwrap() == old);
    let verify = env.run(&["verify", "--json"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let report = json_of(&verify.stdout);
    assert_eq!(
        usize::try_from(report["tiers"]["cold"]["packs"].as_u64().unwrap()).unwrap(),
        in_cold,
        "{report}"
    );
    let garbage: Vec<_> = report["garbage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g.as_str()
                .unwrap_or_else(|| g["key"].as_str().unwrap())
                .to_string()
        })
        .collect();
    // Only what moves left (the one planted, and one of the killed
    // mover's second copy if it was under way).
    assert!(
        garbage.iter().all(|k| k.contains(".moving-"))
            && (env.bucket.is_some() || garbage.contains(&leftover)),
        "{report}"
    );
    // The gateway's health says how much lives where, as its audit counts.
    let g = serve_with(&env, &["--audit-interval", "1s"]);
    let health = || json_of(&curl(&[&format!("{}/health", g.url)]).1);
    within(Duration::from_secs(30), "an audit", || {
        health()["audit"]["tiers"]["cold"]["packs"].as_u64() == Some(in_cold as u64)
    });
    drop(g);
    let (code, err) = env.fails(&[
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-store",
        "/elsewhere",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("colder tier is"), "{err}");

    // Expired and collected: its cold packs go too.
    env.ok(&["forget", "ds", "v1"]);
    common::next_second();
    env.ok(&["gc", "--grace", "0s"]);
    let left = cold.list("packs/");
    assert!(cold_packs() < in_cold, "gc reaches the colder tier");
    assert!(
        !left.iter().any(|(k, _)| k.contains(".moving-")),
        "{left:?}"
    );
    assert!(env.run(&["cat", "ds", "v2", "new.bin"]).stdout == common::noise(1 << 20, 8));
    env.ok(&["verify"]);
}

/// What the store says of its colder tier is the store's, and may be
/// forged (`tiers.json` is not sealed: hosts read it before a key): a
/// tier that is not JSON, names unknown fields or an unknown scheme is an
/// error (what lives in the store reads on), and a tier pointed at another
/// folder holding packs of other bytes serves none of them (each chunk is
/// checked; `verify` finds them).
#[test]
fn a_forged_colder_tier_is_an_error_never_another_files_bytes() {
    let env = Env::new_local();
    let old = replaced(&env, "old.bin", "new.bin", 41);
    let (cold_url, _) = cold_tier(&env);
    env.ok(&[
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-store",
        &cold_url,
    ]);
    assert!(env.run(&["cat", "ds", "v1", "old.bin"]).stdout == old);
    let tiers = std::path::Path::new(&env.store).join("tiers.json");
    assert!(tiers.exists(), "the store names its tier");
    for forged in [
        "not json".to_string(),
        r#"{"cold": "/x", "class": "GLACIER"}"#.to_string(),
        r#"{"cold": "/x", "more": 1}"#.to_string(),
        r#"{"cold": "ftp://elsewhere/x"}"#.to_string(),
    ] {
        std::fs::write(&tiers, &forged).unwrap();
        let other = env.other_host();
        let (code, err) = other.fails(&["cat", "ds", "v1", "old.bin"]);
        assert_eq!(code, 1, "{forged}: {err}");
        assert!(!err.contains("panicked"), "{forged}: {err}");
        assert_eq!(
            other.run(&["cat", "ds", "v2", "new.bin"]).stdout,
            common::noise(1 << 20, 8),
            "{forged}: what lives here reads on"
        );
    }
    // Another folder whose packs hold other bytes under the same names.
    let forged = env.path("forged");
    for entry in walk(&env.path("cold")) {
        let rel = entry.strip_prefix(env.path("cold")).unwrap();
        let to = forged.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let mut bytes = std::fs::read(&entry).unwrap();
        for b in bytes.iter_mut().skip(64).step_by(997) {
            *b ^= 0x5a;
        }
        std::fs::write(to, bytes).unwrap();
    }
    std::fs::write(&tiers, format!(r#"{{"cold": "{}"}}"#, forged.display())).unwrap();
    let other = env.other_host();
    let out = other.run(&["cat", "ds", "v1", "old.bin"]);
    assert!(
        !out.status.success() && out.stdout.len() < old.len(),
        "no other bytes served"
    );
    let (code, _) = other.fails(&["verify"]);
    assert_ne!(code, 0, "verify finds the forged packs");
    // The tier named again: all reads back.
    std::fs::write(&tiers, format!(r#"{{"cold": "{cold_url}"}}"#)).unwrap();
    assert!(env.other_host().run(&["cat", "ds", "v1", "old.bin"]).stdout == old);
}

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            match e.file_type().unwrap().is_dir() {
                true => todo.push(e.path()),
                false => out.push(e.path()),
            }
        }
    }
    out
}

/// A colder tier that fails (its service unreachable): `tier` fails
/// cleanly, deleting nothing it did not copy, and every version reads on.
#[test]
fn a_failing_colder_tier_moves_nothing_and_loses_nothing() {
    if common::local_only("the colder tier's service is made unreachable") {
        return;
    }
    let env = Env::new_local();
    let old = replaced(&env, "old.bin", "new.bin", 31);
    let before = env.objects.list("packs/").len();
    let mut tier = env.command_for(&[
        "--store-timeout",
        "2s",
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-store",
        "s3://nowhere/cold",
    ]);
    let out = tier
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("s3://nowhere/cold"), "{err}");
    assert_eq!(env.objects.list("packs/").len(), before, "nothing deleted");
    assert!(
        !env.objects.exists("tiers.json"),
        "a tier that does not answer is not named"
    );
    assert!(env.run(&["cat", "ds", "v1", "old.bin"]).stdout == old);
    env.ok(&["verify", "ds"]);
}

/// A store that fails at a lifecycle step: a forget whose record is not
/// made expires nothing; an erasure whose zeroing fails after its record
/// is erased for every reader, and the next `gc` zeroes what was left.
#[test]
fn a_failing_store_in_the_middle_of_forget_and_erase_loses_nothing() {
    let env = Env::new_plaintext();
    let (_, jane) = erasable(&env);
    let failing = |point: &str, args: &[&str]| {
        let mut c = env.command_for(args);
        let out = c
            .env("FAILPOINTS", format!("{point}=return(fail)"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} failed");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = failing("store-create", &["forget", "ds", "v1"]);
    assert!(err.contains("injected"), "{err}");
    assert_eq!(versions_listed(&env), vec![2, 1], "nothing expired");
    assert!(env.run(&["cat", "ds", "v1", "people/jane.csv"]).stdout == jane);

    let err = failing(
        "store-replace",
        &["erase", "ds", "people/jane.csv", "--reason", "r"],
    );
    assert!(err.contains("injected"), "{err}");
    let cat = env.run(&["cat", "ds", "v1", "people/jane.csv"]);
    assert!(String::from_utf8_lossy(&cat.stderr).contains("was erased"));
    assert!(store_holds(&env, MARK), "not zeroed yet");
    env.ok(&["gc"]);
    erasure_finished(&env);
}

/// On S3 the colder tier may be a storage class: `tier --cold-class`
/// rewrites the packs only old versions reach in that class, in place, and
/// they read on.
#[test]
fn on_s3_the_colder_tier_may_be_a_storage_class() {
    let env = Env::new_s3();
    let old = replaced(&env, "old.bin", "new.bin", 41);
    let (code, err) = env.fails(&[
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-class",
        "glacier",
    ]);
    assert_eq!(code, 1, "{err}");
    let out = env.ok(&[
        "tier",
        "ds",
        "--older-than",
        "0s",
        "--cold-class",
        "GLACIER_IR",
        "--json",
    ]);
    let moved: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(moved["packs"].as_u64().unwrap() >= 1, "{moved}");
    let bucket = env.bucket.clone().unwrap();
    let classes: Vec<String> = env
        .objects
        .list("packs/")
        .iter()
        .map(|(key, _)| {
            let out = std::process::Command::new("curl")
                .args(["-sSI", &format!("{}/{bucket}/store/{key}", env.endpoint)])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).to_lowercase()
        })
        .filter(|h| h.contains("x-amz-storage-class: glacier_ir"))
        .collect();
    assert_eq!(classes.len() as u64, moved["packs"].as_u64().unwrap());
    assert!(env.run(&["cat", "ds", "v1", "old.bin"]).stdout == old);
    assert!(
        env.ok(&["report", "ds"])
            .contains("storage class GLACIER_IR")
    );
    env.ok(&["verify"]);
}
