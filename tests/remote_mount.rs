//! Mounting through the gateway (`--store https://…`): a host that holds
//! no store key sees in `versions/` exactly what the gateway's policy
//! shows its key, with every byte, mode and time the store holds.

mod common;

use common::gateway::{cert, key, model_side, serve, set_policy_and_wait, through, two_gateways};
use common::{Env, Mount, within};
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A store of three versions (v1 tagged `first`) with a folder `private/`
/// and a file of several chunks; keys `all` and `limited`, the second
/// denied v2 and `private/`.
fn three_versions(env: &Env) -> Vec<u8> {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("private")).unwrap();
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    std::fs::write(src.join("private/s.csv"), "secret\n").unwrap();
    std::fs::write(src.join("d/e/deep.txt"), "deep\n").unwrap();
    std::os::unix::fs::symlink("a.csv", src.join("link")).unwrap();
    // A name that is not UTF-8, and a second name of a file.
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(src.join(latin1), "latin-1 name\n").unwrap();
    std::fs::hard_link(src.join("d/e/deep.txt"), src.join("d/hard.txt")).unwrap();
    let big: Vec<u8> = (0..6_000_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761).to_be_bytes()[2])
        .collect();
    std::fs::write(src.join("big.bin"), &big).unwrap();
    for v in 1..=3 {
        std::fs::write(src.join("a.csv"), format!("plain-marker-{v}\n")).unwrap();
        env.commit(&src, &format!("v{v}"));
    }
    env.ok(&["tag", "ds", "v1", "first"]);
    set_policy(env, "");
    big
}

/// The policy of `three_versions`, with `more` statements.
fn set_policy(env: &Env, more: &str) {
    set_policy_and_wait(
        env,
        &format!(
            "policies:\n  - {{name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}}\n  - {{name: read, effect: allow, principals: [\"key:all\", \"key:limited\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}}\n  - {{name: not_v2, effect: deny, principals: [\"key:limited\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v2\"]}}\n  - {{name: no_private, effect: deny, principals: [\"key:limited\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}}\n{more}"
        ),
    );
}

/// A read-only mount of `ds` at `name` through gateway `url` with `key`,
/// its cache in `cache`, trusting `ca`.
fn mount_through<'e>(
    env: &'e Env,
    name: &str,
    url: &str,
    key: &str,
    cache: &Path,
    ca: &Path,
) -> Mount<'e> {
    mount_with(env, name, (url, key), cache, ca, &["--read-only"])
}

/// A writable mount of `ds` at `rw` through gateway `url` with `key`.
fn mount_writable<'e>(env: &'e Env, url: &str, key: &str) -> Mount<'e> {
    mount_with(env, "rw", (url, key), &env.path("cache"), &cert(env), &[])
}

/// A mount of `ds` at `name` through gateway `url` with `key`, with
/// `flags`.
fn mount_with<'e>(
    env: &'e Env,
    name: &str,
    (url, key): (&str, &str),
    cache: &Path,
    ca: &Path,
    flags: &[&str],
) -> Mount<'e> {
    let key_file = env.path(&format!("{name}.key"));
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    env.mount_in(
        name,
        &[
            flags,
            &[
                "--store",
                url,
                "--api-key-file",
                key_file.to_str().unwrap(),
                "--ca-cert",
                ca.to_str().unwrap(),
                "--cache-dir",
                cache.to_str().unwrap(),
            ],
        ]
        .concat(),
        "",
        "200ms",
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every file under `dir`, read whole.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p: PathBuf = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                todo.push(p);
            } else if meta.is_file() {
                out.extend(std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_mount_through_the_gateway_shows_what_the_policy_shows() {
    let env = Env::new();
    let big = three_versions(&env);
    let (all, limited) = (key(&env, "all", "read"), key(&env, "limited", "read"));
    let g = serve(&env);
    // What the store holds, exported on the store's host.
    let exported = |v: &str| {
        let dir = env.path(&format!("export-{v}"));
        env.ok(&["export", "ds", v, dir.to_str().unwrap()]);
        dir
    };
    let cache = env.path("host-cache");
    let m = mount_through(&env, "all", &g.url, &all, &cache, &cert(&env));
    assert_eq!(
        names(&m.path("versions")),
        ["first", "latest", "v1", "v2", "v3"]
    );
    for v in ["v1", "v2", "v3"] {
        assert_eq!(
            common::fingerprint(&m.path(&format!("versions/{v}"))),
            common::fingerprint(&exported(v)),
            "{v}"
        );
    }
    assert_eq!(
        std::fs::read_link(m.path("versions/first")).unwrap(),
        Path::new("v1")
    );
    // Ranges across chunks, read with seeks.
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(m.path("versions/v2/big.bin")).unwrap();
        for at in [0usize, 1 << 20, 4_999_999, 5_999_000] {
            let mut buf = vec![0; 4096];
            f.seek(SeekFrom::Start(at as u64)).unwrap();
            let n = f.read(&mut buf).unwrap();
            assert_eq!(&buf[..n], &big[at..at + n], "at {at}");
        }
    }
    // What the host keeps on disk is sealed: no byte of a file shows.
    let kept = all_bytes(&cache);
    assert!(!kept.is_empty());
    for marker in [&b"plain-marker-"[..], &big[1000..1064]] {
        assert!(
            !kept.windows(marker.len()).any(|w| w == marker),
            "plaintext in the host's cache"
        );
    }
    // The key file the host made for its cache is its own alone.
    let keys = dirs_key_files(&env);
    assert!(keys.iter().all(|k| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(k).unwrap().permissions().mode() & 0o077 == 0
    }));
    // `.detafs/log`: the versions with their figures, as on the store.
    let figures = |m: &Mount| -> Vec<serde_json::Value> {
        std::fs::read_to_string(m.path(".detafs/log"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["files_added"].clone())
            .collect()
    };
    let local: Vec<serde_json::Value> =
        serde_json::from_str::<Vec<serde_json::Value>>(&env.ok(&["log", "ds", "--json"]))
            .unwrap()
            .iter()
            .rev()
            .map(|r| r["files_added"].clone())
            .collect();
    assert_eq!(figures(&m), local);

    assert_eq!(
        links(&m, "versions/v3/d/hard.txt", "versions/v3/d/e/deep.txt"),
        2
    );
    // A policy that comes while the mount runs: within the poll interval,
    // what it hides is missing, files read before too.
    assert_eq!(
        std::fs::read(m.path("versions/v3/private/s.csv")).unwrap(),
        b"secret\n"
    );
    set_policy(
        &env,
        "  - {name: all_private, effect: deny, principals: [\"key:all\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n",
    );
    within(Duration::from_secs(20), "the new policy seen", || {
        !m.path("versions/v3/private").exists()
    });
    for hidden in ["versions/v3/private/s.csv", "versions/v1/private"] {
        let e = std::fs::metadata(m.path(hidden)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{hidden}");
    }
    assert!(names(&m.path("versions/v1")).contains(&"a.csv".to_string()));
    drop(m);
    set_policy(&env, "");

    // The limited key: v2 and private/ are missing, as missing ones are.
    let lm = mount_through(
        &env,
        "limited",
        &g.url,
        &limited,
        &env.path("limited-cache"),
        &cert(&env),
    );
    assert_eq!(names(&lm.path("versions")), ["first", "latest", "v1", "v3"]);
    for hidden in [
        "versions/v2",
        "versions/v3/private",
        "versions/v3/private/s.csv",
    ] {
        let e = std::fs::metadata(lm.path(hidden)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{hidden}");
    }
    assert_eq!(
        names(&lm.path("versions/v3")),
        ["a.csv", "big.bin", "caf\u{fffd}.txt", "d", "link"]
    );
    // Its figures are withheld (they count what is hidden too).
    assert!(figures(&lm).iter().all(serde_json::Value::is_null));
    // A file's two names are files of their own to a key a policy may
    // hide paths from (another name could be hidden).
    assert_eq!(
        links(&lm, "versions/v3/d/hard.txt", "versions/v3/d/e/deep.txt"),
        1
    );
    assert_eq!(
        std::fs::read(lm.path("versions/v3/a.csv")).unwrap(),
        b"plain-marker-3\n"
    );
    // A version committed later appears within the poll interval.
    let src = env.path("src");
    std::fs::write(src.join("a.csv"), "plain-marker-4\n").unwrap();
    env.commit(&src, "v4");
    within(Duration::from_secs(20), "v4 seen", || {
        lm.path("versions/v4/a.csv").exists()
    });
    assert_eq!(
        std::fs::read(lm.path("versions/latest/a.csv")).unwrap(),
        b"plain-marker-4\n"
    );
    // Its key revoked, the mount reads nothing more within the poll
    // interval: EACCES, for bytes read before (kept in memory, on disk and
    // in the kernel's pages) as for new ones.
    std::fs::read(lm.path("versions/v1/big.bin")).unwrap();
    env.ok(&["apikey", "revoke", "limited"]);
    let refused = |p: &str| {
        std::fs::read(lm.path(p))
            .map(|b| b.len())
            .map_err(|e| e.raw_os_error())
            == Err(Some(libc::EACCES))
    };
    within(Duration::from_secs(20), "the revocation seen", || {
        refused("versions/v3/d/e/deep.txt") && refused("versions/v1/big.bin")
    });
}

/// The number of names `a` has, which `b` shares if it is more than one.
fn links(m: &Mount, a: &str, b: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (
        std::fs::metadata(m.path(a)).unwrap(),
        std::fs::metadata(m.path(b)).unwrap(),
    );
    assert_eq!(a.ino() == b.ino(), a.nlink() > 1);
    assert_eq!(a.nlink(), b.nlink());
    a.nlink()
}

/// The key files this env's commands made (its HOME is its own).
fn dirs_key_files(env: &Env) -> Vec<PathBuf> {
    let dir = env.path("home/.config/detafs/keys");
    std::fs::read_dir(&dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Several gateways of one store: one killed while a file is read through
/// the mount hands over to the next, without a wrong byte; the mount goes
/// on seeing new versions through the one left.
#[test]
fn a_mount_moves_to_the_next_gateway() {
    moves_to_the_next_gateway(&Env::new());
}

/// The same, the gateways on one bucket of the S3 test server.
#[test]
fn a_mount_moves_to_the_next_gateway_on_one_bucket() {
    moves_to_the_next_gateway(&Env::new_s3());
}

fn moves_to_the_next_gateway(env: &Env) {
    use std::io::Read;
    let g = two_gateways(env);
    let (big, k, bundle) = (&g.big, &g.key, &g.bundle);
    let both = format!("{},{}", g.first.url, g.second.url);
    let src = env.path("src");
    let m = mount_through(env, "mnt", &both, k, &env.path("host-cache"), bundle);
    let mut f = std::fs::File::open(m.path("versions/v1/big.bin")).unwrap();
    let mut got = vec![0; 1 << 20];
    f.read_exact(&mut got).unwrap();
    drop(g.first);
    f.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), big.len());
    assert_eq!(Sha256::digest(&got), Sha256::digest(big), "a wrong byte");
    std::fs::write(src.join("new.txt"), "after\n").unwrap();
    env.commit(&src, "v2");
    within(Duration::from_secs(20), "v2 seen", || {
        m.path("versions/v2/new.txt").exists()
    });
    drop(g.second);
}

/// A mount's `.detafs/log`, each row's time taken out.
fn log_but_times(m: &Mount) -> Vec<serde_json::Value> {
    std::fs::read_to_string(m.path(".detafs/log"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
            row["timestamp"] = serde_json::Value::Null;
            row
        })
        .collect()
}

/// A mount of a `model_side` through its gateway `url`, with key `k`.
fn mount_model<'e>(env: &'e Env, url: &str, setup: &serde_json::Value) -> Mount<'e> {
    mount_through(
        env,
        "mnt",
        url,
        setup["rest_key"].as_str().unwrap(),
        &env.path("host-cache"),
        Path::new(setup["ca"].as_str().unwrap()),
    )
}

/// What a policy hides, a mount through the gateway shows as a store
/// without it would: two stores alike but for the hidden files, one policy,
/// one key; each mounted through its gateway, every version's names,
/// bytes, modes and times, and the log but for its times, compared.
#[test]
fn a_mount_through_the_gateway_shows_hidden_as_missing() {
    let (hiding_env, g1, hiding) = model_side(true);
    let (without_env, g2, without) = model_side(false);
    let (a, b) = (
        mount_model(&hiding_env, &g1.url, &hiding),
        mount_model(&without_env, &g2.url, &without),
    );
    assert_eq!(names(&a.path("versions")), names(&b.path("versions")));
    for v in ["v1", "v2", "latest"] {
        let at = format!("versions/{v}");
        assert_eq!(
            common::fingerprint(&a.path(&at)),
            common::fingerprint(&b.path(&at)),
            "{v}"
        );
    }
    for hidden in ["versions/v2/private", "versions/v2/mix/secret.txt"] {
        let e = std::fs::metadata(a.path(hidden)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{hidden}");
    }
    assert_eq!(log_but_times(&a), log_but_times(&b));
}

/// The host's cache is only a cache: its key lost, the next mount makes
/// it anew (and says so) rather than failing.
#[test]
fn a_host_cache_whose_key_is_lost_is_made_anew() {
    let env = Env::new();
    three_versions(&env);
    let all = key(&env, "all", "read");
    let g = serve(&env);
    let cache = env.path("host-cache");
    let m = mount_through(&env, "mnt", &g.url, &all, &cache, &cert(&env));
    std::fs::read(m.path("versions/v1/big.bin")).unwrap();
    drop(m);
    // The host cache's key file: named for its store id.
    let host_store = std::fs::read_dir(cache.join("gateways"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let marker = std::fs::read_to_string(host_store.join("detafs.json")).unwrap();
    let ours: Vec<PathBuf> = dirs_key_files(&env)
        .into_iter()
        .filter(|k| marker.contains(&*k.file_stem().unwrap().to_string_lossy()))
        .collect();
    assert_eq!(ours.len(), 1, "the host cache's key file");
    std::fs::remove_file(&ours[0]).unwrap();
    let m = mount_through(&env, "mnt", &g.url, &all, &cache, &cert(&env));
    assert_eq!(
        std::fs::read(m.path("versions/v3/a.csv")).unwrap(),
        b"plain-marker-3\n"
    );
}

/// `.detafs/health` of a mount through a gateway speaks of the gateway:
/// its address, and whether it answers.
#[test]
fn health_says_whether_the_gateway_answers() {
    let env = Env::new();
    three_versions(&env);
    let all = key(&env, "all", "read");
    let g = serve(&env);
    let m = mount_through(
        &env,
        "mnt",
        &g.url,
        &all,
        &env.path("host-cache"),
        &cert(&env),
    );
    let health = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap()
    };
    let h = health();
    assert_eq!(
        (&h["store"], &h["store_reachable"], &h["status"]),
        (&g.url.clone().into(), &true.into(), &"ok".into()),
        "{h}"
    );
    drop(g);
    within(Duration::from_secs(20), "the gateway seen gone", || {
        let h = health();
        h["store_reachable"] == false && h["status"] == "degraded"
    });
    assert!(
        health()["store_error"]
            .as_str()
            .unwrap()
            .contains("gateway")
    );
}

/// What a mount reads through asked by hand, wrongly: a folder's tree of
/// a file, a hidden folder, no range or one beyond the end of small files,
/// another spelling of a path; each refused clearly, the hidden answered
/// as the missing.
#[test]
fn the_mounts_endpoints_refuse_what_is_malformed() {
    let env = Env::new();
    three_versions(&env);
    let limited = key(&env, "limited", "read");
    let g = serve(&env);
    let get = |path: &str, range: Option<&str>| {
        let auth = format!("Authorization: Bearer {limited}");
        let mut args = vec!["--path-as-is", "-H", auth.as_str()];
        if let Some(r) = range {
            args.extend(["-H", r]);
        }
        let url = format!("{}/datasets/ds/versions/v3/{path}", g.url);
        args.push(&url);
        let (status, body) = common::gateway::curl(&args);
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    assert_eq!(get("tree/a.csv", None).0, 400);
    let (hidden, missing) = (get("tree/private", None), get("tree/nowhere", None));
    assert_eq!(hidden.0, 404);
    assert_eq!(
        hidden.1.replace("private", "X"),
        missing.1.replace("nowhere", "X")
    );
    assert_eq!(
        get("small-files/private", Some("Range: bytes=0-9"))
            .1
            .replace("private", "X"),
        get("small-files/nowhere", Some("Range: bytes=0-9"))
            .1
            .replace("nowhere", "X")
    );
    assert_eq!(get("small-files", None).0, 416);
    assert_eq!(get("small-files", Some("Range: bytes=99999999-")).0, 416);
    assert_eq!(get("small-files", Some("Range: bytes=0-1")).0, 206);
    for spelling in ["tree/d/./e", "tree/d//e", "tree/d/%2e%2e/d", "tree/%00"] {
        assert_eq!(get(spelling, None).0, 400, "{spelling}");
    }
    assert_eq!(get("tree/d/e", None).0, 200);
}

/// A host cache entry changed on disk (a crash mid-write, a hostile local
/// process) is never served: it fails its seal, is dropped, and the bytes
/// come from the gateway again.
#[test]
fn a_damaged_host_cache_entry_is_fetched_again() {
    let env = Env::new();
    let big = three_versions(&env);
    let all = key(&env, "all", "read");
    let g = serve(&env);
    let cache = env.path("host-cache");
    let m = mount_through(&env, "mnt", &g.url, &all, &cache, &cert(&env));
    let read = |m: &Mount| Sha256::digest(std::fs::read(m.path("versions/v1/big.bin")).unwrap());
    assert_eq!(read(&m), Sha256::digest(&big));
    drop(m);
    let mut damaged = 0;
    let mut todo = vec![cache.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.components().any(|c| c.as_os_str() == "blobs") {
                let mut bytes = std::fs::read(&p).unwrap();
                let n = bytes.len() / 2;
                bytes[n] ^= 0x40;
                std::fs::write(&p, bytes).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "the cache held entries");
    let m = mount_through(&env, "mnt", &g.url, &all, &cache, &cert(&env));
    assert_eq!(read(&m), Sha256::digest(&big), "a damaged entry served");
}

/// Staging through the gateway: a writable mount by a key from which a
/// folder is hidden; what is written, made, removed, renamed and changed
/// in mode is committed through `.detafs/commit` as the version the store
/// then holds, with the hidden folder kept; a changed 64 KiB of a large
/// file is sent as a patch; staging is clean after, and commits again.
#[test]
fn staging_through_the_gateway_commits_as_on_the_store() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let m = mount_writable(&env, &g.url, &w);
    let staging = m.path("staging");
    assert!(!staging.join("private").exists());
    // The changes.
    std::fs::create_dir(staging.join("new")).unwrap();
    std::fs::write(staging.join("new/n.txt"), "new\n").unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(staging.join("big.bin"))
            .unwrap();
        f.write_all_at(&[0xAB; 64 << 10], 1 << 20).unwrap();
    }
    std::fs::set_permissions(
        staging.join("a.csv"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::remove_file(staging.join("d/e/deep.txt")).unwrap();
    std::fs::remove_dir(staging.join("d/e")).unwrap();
    std::fs::rename(staging.join("link"), staging.join("moved-link")).unwrap();
    std::os::unix::fs::symlink("a.csv", staging.join("link2")).unwrap();
    let expected = common::fingerprint(&staging);
    common::commit_via_control(&m, "through the gateway").unwrap();
    let log = env.log();
    let v4 = log.iter().find(|r| r["version"] == 4).expect("v4 made");
    assert_eq!(v4["author"], "key:w");
    // On the store: staging as it was, and what the key cannot see.
    let there = env.path("there");
    env.ok(&["export", "ds", "v4", there.to_str().unwrap()]);
    let mut got = common::fingerprint(&there);
    got.retain(|p, _| !p.starts_with(b"private"));
    assert_eq!(got, expected);
    assert_eq!(
        std::fs::read(there.join("private/s.csv")).unwrap(),
        b"secret\n"
    );
    // Staging is clean, stands on v4, and commits again.
    within(Duration::from_secs(10), "v4 in the mount", || {
        m.path("versions/v4").exists()
    });
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert_eq!(common::fingerprint(&staging), expected);
    std::fs::write(staging.join("new/n.txt"), "newer\n").unwrap();
    common::commit_via_control(&m, "again").unwrap();
    // Every request a mount makes is logged with what it asks of the policy.
    requests_after(&env, 2);
    let unnamed: Vec<_> = logged(&env)
        .into_iter()
        .filter(|l| l["action"] == "none")
        .collect();
    assert!(unnamed.is_empty(), "{unnamed:?}");
    let there = env.path("there5");
    env.ok(&["export", "ds", "v5", there.to_str().unwrap()]);
    assert_eq!(std::fs::read(there.join("new/n.txt")).unwrap(), b"newer\n");
    assert_eq!(
        std::fs::read(there.join("private/s.csv")).unwrap(),
        b"secret\n"
    );
}

/// A host that mounts through the gateway keeps what it stages sealed
/// under a key of its own: written, copied up, cut, grown and appended
/// to through the mount, its staged copies read back exactly (also after
/// the daemon is killed), and no file this host keeps holds a byte of
/// them, a staged name or a link's target in the clear (the trash's
/// included).
#[test]
fn staged_copies_at_rest_hold_nothing_readable_without_the_hosts_key() {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let env = Env::new();
    let mut big = three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let marker = b"staged-plaintext-marker-";
    let secret: Vec<u8> = (0..50_000).map(|i| marker[i % marker.len()]).collect();
    let expect = |m: &Mount, big: &[u8]| {
        let staging = m.path("staging");
        assert_eq!(std::fs::read(staging.join("new.txt")).unwrap(), secret);
        assert!(std::fs::read(staging.join("big.bin")).unwrap() == big);
        assert_eq!(
            std::fs::metadata(staging.join("big.bin")).unwrap().len(),
            big.len() as u64
        );
    };
    {
        let m = mount_writable(&env, &g.url, &w);
        let staging = m.path("staging");
        std::fs::write(staging.join("new.txt"), &secret).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(staging.join("big.bin"))
            .unwrap();
        f.write_all_at(&secret, 3 << 20).unwrap();
        big[3 << 20..(3 << 20) + secret.len()].copy_from_slice(&secret);
        f.set_len(5_000_001).unwrap();
        big.truncate(5_000_001);
        // Past the end: a gap of zeros, then bytes.
        f.write_all_at(b"tail", 5_100_000).unwrap();
        big.resize(5_100_000, 0);
        big.extend_from_slice(b"tail");
        f.sync_all().unwrap();
        drop(f);
        let mut a = std::fs::OpenOptions::new()
            .append(true)
            .open(staging.join("big.bin"))
            .unwrap();
        a.write_all(b"appended").unwrap();
        big.extend_from_slice(b"appended");
        drop(a);
        std::fs::write(staging.join("plaintext-name-marker.txt"), "x").unwrap();
        std::fs::write(m.path(".detafs/restore"), "plaintext-name-marker.txt\n").unwrap();
        assert!(!staging.join("plaintext-name-marker.txt").exists());
        std::os::unix::fs::symlink("link-target-marker", staging.join("lnk")).unwrap();
        expect(&m, &big);
        m.kill();
    }
    // What this host keeps: its staging and its cache.
    let kept: Vec<PathBuf> = [env.staging(), env.path("cache")]
        .iter()
        .flat_map(|d| common::files_under(d))
        .collect();
    let copies: u64 = kept
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("data")))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(copies > big.len() as u64, "the staged copies are kept");
    let version_bytes = &big[4_000_000..4_000_032];
    for p in &kept {
        let bytes = std::fs::read(p).unwrap();
        for needle in [
            &marker[..],
            version_bytes,
            b"appended",
            b"plaintext-name-marker",
            b"link-target-marker",
        ] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds staged bytes in the clear",
                p.display()
            );
        }
    }
    // Mounted again: the same bytes; committed: the version holds them.
    let m = mount_writable(&env, &g.url, &w);
    expect(&m, &big);
    assert_eq!(
        std::fs::read_link(m.path("staging/lnk")).unwrap(),
        Path::new("link-target-marker")
    );
    let trash = env.run(&[
        "trash",
        "ds",
        "--json",
        "--store",
        &g.url,
        "--api-key-file",
        m.path("../rw.key").to_str().unwrap(),
        "--ca-cert",
        cert(&env).to_str().unwrap(),
        "--cache-dir",
        env.path("cache").to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&trash.stdout);
    assert!(
        said.contains("plaintext-name-marker.txt"),
        "{said} {}",
        String::from_utf8_lossy(&trash.stderr)
    );
    std::fs::write(m.path(".detafs/undo"), "\n").unwrap();
    assert_eq!(
        std::fs::read(m.path("staging/plaintext-name-marker.txt")).unwrap(),
        b"x"
    );
    common::commit_via_control(&m, "sealed staging").unwrap();
    let there = env.path("there");
    env.ok(&["export", "ds", "v4", there.to_str().unwrap()]);
    assert_eq!(std::fs::read(there.join("new.txt")).unwrap(), secret);
    assert!(std::fs::read(there.join("big.bin")).unwrap() == big);
    assert_eq!(
        std::fs::read(there.join("plaintext-name-marker.txt")).unwrap(),
        b"x"
    );
}

/// A sealed staged copy read while it is written (its blocks sealed
/// again at each write) never fails a read nor serves a byte that was
/// never written: each read sees, at every offset, the old byte or the new.
#[test]
fn a_sealed_staged_copy_read_while_written_reads_whole() {
    use std::os::unix::fs::FileExt;
    let env = Env::new();
    three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let m = mount_writable(&env, &g.url, &w);
    let path = m.path("staging/busy.bin");
    let len = 1 << 20;
    std::fs::write(&path, vec![1u8; len]).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::unix::fs::OpenOptionsExt;
            // Around the kernel's page cache: each write and read reaches
            // the daemon.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .unwrap();
            for round in 0..3000u32 {
                // Unaligned, across blocks: every write reseals a few.
                let at = (round as usize * 7919) % (len - 9000);
                f.write_all_at(&[2u8; 9000], at as u64).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let mut buf = vec![0u8; 128 << 10];
        let mut reads = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) || reads < 10 {
            let at = (reads * 40_009) % (len - buf.len());
            f.read_exact_at(&mut buf, at as u64)
                .unwrap_or_else(|e| panic!("read {reads} at {at}: {e}"));
            assert!(buf.iter().all(|&b| b == 1 || b == 2), "read {reads}");
            reads += 1;
        }
    });
}

/// The policy of `three_versions` with key `w`, which may commit and is
/// denied `private/` as `limited` is.
fn writer(env: &Env) -> String {
    set_policy(
        env,
        "  - {name: w, effect: allow, principals: [\"key:w\"], actions: [\"dataset:read\", \"dataset:versions\", \"dataset:commit\"], resources: [\"datasets/ds\"]}\n  - {name: w_private, effect: deny, principals: [\"key:w\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n",
    );
    key(env, "w", "read,commit")
}

/// `status`, `restore` (and `--undo`), `trash`, `checkout` and `commit`
/// through the gateway, with a writable mount up (they reach its staging
/// through it) and without one (on staging here): each as on a store.
#[test]
fn the_cli_stages_and_commits_through_the_gateway() {
    let env = Env::new();
    three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let cache = env.path("cache");
    let key_file = env.path("w-cli.key");
    std::fs::write(&key_file, format!("{w}\n")).unwrap();
    let cache_dir = ["--cache-dir", cache.to_str().unwrap()];
    let remote = |args: &[&str]| through(&env, &g.url, &key_file, &[&cache_dir[..], args].concat());
    let ok = |args: &[&str]| {
        let out = remote(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let m = mount_with(&env, "rw", (&g.url, &w), &cache, &cert(&env), &[]);
    let a = m.path("staging/a.csv");
    std::fs::write(&a, "mine\n").unwrap();
    assert_eq!(ok(&["status", "ds"]), "M a.csv\n");
    ok(&["restore", "ds", "a.csv"]);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "plain-marker-3\n");
    assert!(ok(&["trash", "ds"]).contains("a.csv"));
    ok(&["restore", "ds", "--undo"]);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "mine\n");
    assert_eq!(
        ok(&["commit", "ds", "-m", "through the mount"]).trim(),
        "v4"
    );
    ok(&["checkout", "ds", "v1", "a.csv"]);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "plain-marker-1\n");
    drop(m);
    // No mount: staging here.
    assert_eq!(ok(&["status", "ds"]), "M a.csv\n");
    assert_eq!(ok(&["commit", "ds", "-m", "revert a.csv"]).trim(), "v5");
    assert_eq!(ok(&["status", "ds"]), "");
    assert_eq!(env.ok(&["cat", "ds", "v5", "a.csv"]), "plain-marker-1\n");
    assert_eq!(env.ok(&["cat", "ds", "v5", "private/s.csv"]), "secret\n");
    let out = remote(&["commit", "ds", "-m", "nothing"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A gateway killed while it commits, before its record is made and
/// after (its answer lost): the mount's commit moves to the next gateway,
/// and the version lands once; a key revoked: the commit is refused
/// (EACCES) and staging keeps what was written.
#[test]
fn a_commit_through_a_killed_gateway_lands_once_and_a_revoked_key_keeps_staging() {
    killed_while_committing(Env::new);
}

/// The same, the gateways on one bucket of the S3 test server.
#[test]
fn a_commit_through_a_killed_gateway_lands_once_on_one_bucket() {
    killed_while_committing(Env::new_s3);
}

fn killed_while_committing(new_env: fn() -> Env) {
    for point in ["before-record", "after-record"] {
        let env = new_env();
        three_versions(&env);
        let w = writer(&env);
        let hold = common::Hold::new(&env, point);
        let first = common::gateway::serve_failing(&env, &[], &hold.spec);
        let other = env.other_host();
        let second = serve(&other);
        let bundle = env.path("gateways.pem");
        let pems = [cert(&env), cert(&other)].map(|c| std::fs::read_to_string(c).unwrap());
        std::fs::write(&bundle, pems.concat()).unwrap();
        let urls = format!("{},{}", first.url, second.url);
        let m = mount_with(&env, "rw", (&urls, &w), &env.path("cache"), &bundle, &[]);
        std::fs::write(m.path("staging/new.txt"), "new\n").unwrap();
        let committing = {
            let control = m.path(".detafs/commit");
            std::thread::spawn(move || {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(control)?
                    .write_all(b"through whichever answers")
            })
        };
        hold.reached();
        drop(first);
        committing.join().unwrap().unwrap();
        let log = env.log();
        assert_eq!(log.len(), 4, "{point}: one version made: {log:?}");
        assert_eq!(env.ok(&["cat", "ds", "v4", "new.txt"]), "new\n");
        assert_eq!(
            std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
            ""
        );
        if point == "after-record" {
            continue;
        }
        // Revoked: refused, and what was written stays staged.
        std::fs::write(m.path("staging/later.txt"), "later\n").unwrap();
        env.ok(&["apikey", "revoke", "w"]);
        within(Duration::from_secs(10), "the revocation seen", || {
            common::commit_via_control(&m, "refused")
                .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES))
        });
        assert_eq!(env.log().len(), 4);
        assert_eq!(
            std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
            "A later.txt\n"
        );
        assert_eq!(
            std::fs::read_to_string(m.path("staging/later.txt")).unwrap(),
            "later\n"
        );
    }
}

/// The requests the gateways of `env` logged (every `gateway-*.jsonl`
/// under its cache): method and path.
fn requests(env: &Env) -> Vec<String> {
    logged(env)
        .iter()
        .map(|v| v["request"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The requests the gateways of `env` logged once `commits` commits are
/// among them (a line is written as its answer ends, after the client
/// has it).
fn requests_after(env: &Env, commits: usize) -> Vec<String> {
    let done = || {
        requests(env)
            .iter()
            .filter(|r| r.starts_with("POST /datasets/ds/commit"))
            .count()
            >= commits
    };
    within(
        Duration::from_secs(10),
        "the commits in the request log",
        done,
    );
    requests(env)
}

/// The request log's lines of the gateways of `env`.
fn logged(env: &Env) -> Vec<serde_json::Value> {
    let mut stack = vec![env.cache.clone()];
    let mut found = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                stack.push(e.path());
            } else if name.starts_with("gateway-") && name.ends_with(".jsonl") {
                let text = std::fs::read_to_string(e.path()).unwrap();
                found.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
            }
        }
    }
    found
}

/// A version's file renamed and copied in staging is named in the commit
/// (the gateway copies it), not sent again.
#[test]
fn a_version_file_renamed_in_staging_is_named_not_sent() {
    let env = Env::new();
    let big = three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let m = mount_writable(&env, &g.url, &w);
    std::fs::create_dir(m.path("staging/moved")).unwrap();
    std::fs::rename(m.path("staging/big.bin"), m.path("staging/moved/big2.bin")).unwrap();
    common::commit_via_control(&m, "renamed").unwrap();
    assert_eq!(
        std::fs::read(m.path("staging/moved/big2.bin")).unwrap(),
        big
    );
    let there = env.path("there");
    env.ok(&["export", "ds", "v4", there.to_str().unwrap()]);
    assert_eq!(std::fs::read(there.join("moved/big2.bin")).unwrap(), big);
    assert!(!there.join("big.bin").exists());
    let requests = requests_after(&env, 1);
    let uploads: Vec<&String> = requests
        .iter()
        .filter(|r| r.contains("/uploads/"))
        .collect();
    assert!(uploads.is_empty(), "{uploads:?}");
}

/// What a policy hides, a commit through a writable mount keeps, and
/// shows as a store without it would: the same writes, renames,
/// deletions and modes on two stores alike but for the hidden files, each
/// through its gateway with a key that may commit; the version made,
/// staging after and the log but for its times are alike, and the hidden
/// files are as they were.
#[test]
fn writes_through_a_mount_keep_what_is_hidden() {
    use std::os::unix::fs::PermissionsExt;
    let (hiding_env, g1, hiding) = model_side(true);
    let (without_env, g2, without) = model_side(false);
    let mount = |env, url: &str, setup: &serde_json::Value| {
        let ca = Path::new(setup["ca"].as_str().unwrap()).to_path_buf();
        let key = setup["write_key"].as_str().unwrap().to_string();
        mount_with(env, "rw", (url, &key), &env.path("host-cache"), &ca, &[])
    };
    let (a, b) = (
        mount(&hiding_env, &g1.url, &hiding),
        mount(&without_env, &g2.url, &without),
    );
    for m in [&a, &b] {
        let s = m.path("staging");
        std::fs::write(s.join("top.txt"), "new top\n").unwrap();
        std::fs::set_permissions(s.join("top.txt"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::create_dir(s.join("pub/new")).unwrap();
        std::fs::write(s.join("pub/new/x.csv"), "x\n").unwrap();
        std::fs::remove_file(s.join("pub/sub/b.csv")).unwrap();
        std::fs::remove_dir(s.join("pub/sub")).unwrap();
        std::fs::rename(s.join("mix/open.txt"), s.join("mix/renamed.txt")).unwrap();
        std::os::unix::fs::symlink("../top.txt", s.join("pub/l")).unwrap();
        let t = filetime::FileTime::from_unix_time(1_800_000_000, 5);
        for p in [
            "top.txt",
            "pub/new/x.csv",
            "pub/new",
            "pub",
            "mix",
            "mix/renamed.txt",
        ] {
            filetime::set_file_mtime(s.join(p), t).unwrap();
        }
        filetime::set_symlink_file_times(s.join("pub/l"), t, t).unwrap();
        common::commit_via_control(m, "through a mount").unwrap();
    }
    for m in [&a, &b] {
        // A lookup of v3 may find it before the poll lists it in the log.
        within(Duration::from_secs(10), "v3 in the mount's log", || {
            log_but_times(m).len() == 3
        });
    }
    for at in ["versions/v3", "staging"] {
        assert_eq!(
            common::fingerprint(&a.path(at)),
            common::fingerprint(&b.path(at)),
            "{at}"
        );
    }
    assert_eq!(log_but_times(&a), log_but_times(&b));
    // The same through `commit --from` of a folder each side exports.
    let sides = [
        (&hiding_env, &g1.url, &hiding),
        (&without_env, &g2.url, &without),
    ];
    for (env, url, setup) in sides {
        let key_file = env.path("w-cli.key");
        std::fs::write(&key_file, setup["write_key"].as_str().unwrap()).unwrap();
        let cli = |args: &[&str]| {
            let out = through(env, url, &key_file, args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let work = env.path("work");
        cli(&["export", "ds", "latest", work.to_str().unwrap()]);
        std::fs::remove_dir_all(work.join("pub/new")).unwrap();
        std::fs::write(work.join("mix/renamed.txt"), "changed\n").unwrap();
        std::fs::create_dir(work.join("more")).unwrap();
        std::fs::write(work.join("more/m.txt"), "m\n").unwrap();
        let t = filetime::FileTime::from_unix_time(1_800_000_100, 0);
        for p in ["mix/renamed.txt", "more/m.txt", "more", "mix", "pub"] {
            filetime::set_file_mtime(work.join(p), t).unwrap();
        }
        cli(&[
            "commit",
            "ds",
            "--from",
            work.to_str().unwrap(),
            "-m",
            "from a folder",
        ]);
    }
    for m in [&a, &b] {
        within(Duration::from_secs(10), "v4 in the mount", || {
            m.path("versions/v4").exists()
        });
    }
    assert_eq!(
        common::fingerprint(&a.path("versions/v4")),
        common::fingerprint(&b.path("versions/v4"))
    );
    assert_eq!(log_but_times(&a), log_but_times(&b));
    for f in ["private/s.csv", "private/sub/t.csv", "mix/secret.txt"] {
        assert_eq!(
            hiding_env.ok(&["cat", "ds", "v4", f]),
            hiding_env.ok(&["cat", "ds", "v2", f]),
            "{f}"
        );
    }
}

/// A commit through the gateway killed once its files are sent and
/// before it is made: nothing is committed, staging is kept, and the next
/// commit takes the uploads sent again rather than sending them twice.
#[test]
fn a_commit_killed_after_sending_takes_its_uploads_again() {
    let env = Env::new();
    three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let key_file = env.path("rw.key");
    std::fs::write(&key_file, format!("{w}\n")).unwrap();
    let (cache, ca) = (env.path("cache"), cert(&env));
    let args = [
        "--store",
        &g.url,
        "--api-key-file",
        key_file.to_str().unwrap(),
        "--ca-cert",
        ca.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let hold = common::Hold::new(&env, "changes-sent");
    let m = env.mount_in("rw", &args, &hold.spec, "200ms");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path("staging/big.bin"))
            .unwrap();
        f.write_all_at(&[0xCD; 64 << 10], 2 << 20).unwrap();
    }
    let new = common::noise(2 << 20, 9);
    std::fs::write(m.path("staging/new.bin"), &new).unwrap();
    let committing = {
        let control = m.path(".detafs/commit");
        std::thread::spawn(move || {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .open(control)
                .and_then(|mut f| f.write_all(b"killed"))
        })
    };
    hold.reached();
    m.kill();
    let _ = committing.join().unwrap();
    drop(m);
    assert_eq!(env.log().len(), 3, "nothing committed");
    let m = env.mount_in("rw", &args, "", "200ms");
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "M big.bin\nA new.bin\n"
    );
    common::commit_via_control(&m, "again").unwrap();
    assert!(
        env.run(&["cat", "ds", "v4", "new.bin"]).stdout == new,
        "new.bin in v4"
    );
    let requests = requests_after(&env, 1);
    let puts = |name: &str| {
        requests
            .iter()
            .filter(|r| r.starts_with("PUT ") && r.contains(&format!("/uploads/{name}")))
            .count()
    };
    assert_eq!((puts("big.bin"), puts("new.bin")), (1, 1));
}

/// Many small new files committed through the gateway go in one request
/// (a bundle), not one each; each lands as written.
#[test]
fn small_new_files_go_together() {
    let env = Env::new();
    three_versions(&env);
    let w = writer(&env);
    let g = serve(&env);
    let m = mount_writable(&env, &g.url, &w);
    std::fs::create_dir(m.path("staging/many")).unwrap();
    for i in 0..300 {
        std::fs::write(
            m.path(&format!("staging/many/{i}.txt")),
            format!("file {i}\n"),
        )
        .unwrap();
    }
    std::fs::write(m.path("staging/many/empty"), "").unwrap();
    common::commit_via_control(&m, "many").unwrap();
    let there = env.path("there");
    env.ok(&["export", "ds", "v4", there.to_str().unwrap()]);
    for i in 0..300 {
        let got = std::fs::read_to_string(there.join(format!("many/{i}.txt"))).unwrap();
        assert_eq!(got, format!("file {i}\n"));
    }
    assert_eq!(std::fs::read(there.join("many/empty")).unwrap(), b"");
    let requests = requests_after(&env, 1);
    let count = |what: &str| {
        requests
            .iter()
            .filter(|r| r.starts_with("PUT ") && r.contains(what))
            .count()
    };
    assert_eq!(
        (count("/bundles"), count("/uploads/")),
        (1, 0),
        "{requests:?}"
    );
}
