//! detafs against a hostile store writer and a second local user: objects
//! crafted by hand (tests/common/craft.rs) must cost the reads that reach
//! them an error, never a panic, a hang, memory without bound, a wrong byte
//! or a path outside the destination; local state stays private; other
//! users get no root shell and no one else's data.

mod common;

use common::craft::{self, Pack, dir_entry, file_entry, tree_json};
use common::{Env, fingerprint, run_ok, sample_tree};
use serde_json::{Value, json};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const NOBODY: &str = "--reuid=65534";

/// Runs a command to its end (killed after `limit`) and returns its output
/// and peak resident memory in MiB. A small Python launcher starts it and
/// reads the kernel's figure (getrusage): a child forked from this large
/// test process would inherit its high-water mark.
fn measured(cmd: &mut Command, limit: Duration) -> (Output, u64) {
    const LAUNCHER: &str = "import resource, subprocess, sys
try:
    code = subprocess.run(sys.argv[3:], timeout=float(sys.argv[2])).returncode
except subprocess.TimeoutExpired:
    code = 124
open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code if code >= 0 else 128 - code)";
    let rss = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(LAUNCHER)
        .arg(rss.path())
        .arg(limit.as_secs().to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(124),
        "{cmd:?} still running after {limit:?}"
    );
    let kib: u64 = std::fs::read_to_string(rss.path())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (out, kib / 1024)
}

/// A detafs command that must fail cleanly (exit 1, a message saying
/// `why`), within `limit` and `max_mib` of memory.
fn fails_cleanly(env: &Env, args: &[&str], why: &str, limit: Duration, max_mib: u64) {
    let (out, mib) = measured(env.command().args(args), limit);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    assert!(err.contains(why), "{args:?}: wanted {why:?} in {err}");
    assert!(mib < max_mib, "{args:?} took {mib} MiB");
}

/// `verify` reports `what` (exit 1) and finishes within `limit`.
fn verify_reports(env: &Env, what: &str, limit: Duration) {
    let (out, mib) = measured(env.command().arg("verify"), limit);
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains(what), "wanted {what:?} in: {report}");
    assert!(mib < 200, "verify took {mib} MiB");
}

/// A store with v1 committed from a sample tree: format 1, objects in the
/// clear, so a test can craft hostile ones (a sealed store's open only
/// with its key: tests/sealed.rs).
fn with_v1() -> Env {
    let env = Env::empty_local();
    env.ok(&["init", "--plaintext"]);
    env.ok(&["dataset", "create", "ds"]);
    let src = env.path("src");
    sample_tree(&src, 3);
    env.commit(&src, "one");
    env
}

/// Writes `tree` (JSON) as the root of version `version`.
fn craft_version(env: &Env, version: u64, entries: Vec<Value>, packs: &[&str]) {
    let mut p = Pack::default();
    let root = p.tree(&tree_json(entries, packs));
    p.write(&env.objects);
    craft::record(&env.objects, "ds", version, &root, |_| {});
}

/// v2 holds one file `f` whose entry has `fields` changed.
fn version_with_bad_file(env: &Env, edit: impl FnOnce(&mut Value)) {
    let mut data = Pack::default();
    let chunk = data.chunk(b"hello\n");
    let pack = data.write(&env.objects);
    let mut f = file_entry("f", 6, &[&chunk], 0);
    edit(&mut f);
    craft_version(env, 2, vec![f], &[&pack]);
}

#[test]
fn a_hostile_store_id_never_names_a_path() {
    let env = Env::new_local();
    let victim = env.path("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious"), b"keep me").unwrap();
    for id in ["../../victim", victim.to_str().unwrap(), "0123"] {
        env.objects.write(
            "detafs.json",
            serde_json::to_vec(&json!({"format": 1, "store_id": id})).unwrap(),
        );
        for args in [&["reindex"][..], &["dataset", "list"], &["log", "ds"]] {
            let out = env.run(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{id} {args:?}");
            assert!(err.contains("store_id"), "{err}");
        }
        assert_eq!(std::fs::read(victim.join("precious")).unwrap(), b"keep me");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
    }
}

#[test]
fn a_copied_store_keeps_its_own_index_and_staging() {
    let env = with_v1();
    let copy = env.path("copy");
    run_ok(Command::new("cp").arg("-a").arg(&env.store).arg(&copy));
    let src = env.path("src");
    std::fs::write(src.join("new.txt"), b"only in the copy").unwrap();
    let on_copy = |args: &[&str]| {
        let out = env
            .command()
            .env("DETAFS_STORE", &copy)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    on_copy(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "two"]);
    // The original has not seen it and is intact; the copy is whole.
    assert_eq!(env.log().len(), 1);
    env.ok(&["verify"]);
    on_copy(&["verify"]);
    assert_eq!(on_copy(&["cat", "ds", "v2", "new.txt"]), "only in the copy");
    std::fs::write(src.join("new.txt"), b"in the original").unwrap();
    env.commit(&src, "two here");
    assert_eq!(env.ok(&["cat", "ds", "v2", "new.txt"]), "in the original");
    assert_eq!(on_copy(&["cat", "ds", "v2", "new.txt"]), "only in the copy");
}

#[test]
fn reindex_deletes_only_the_index_it_built() {
    let env = with_v1();
    let key_dir = std::fs::read_dir(&env.cache)
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    std::fs::write(key_dir.join("notes.txt"), b"mine").unwrap();
    env.ok(&["reindex"]);
    assert_eq!(std::fs::read(key_dir.join("notes.txt")).unwrap(), b"mine");
    assert_eq!(env.log().len(), 1);
}

#[test]
fn export_clears_setid_bits_unless_root_asks() {
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::copy("/bin/true", src.join("suid")).unwrap();
    std::fs::set_permissions(src.join("suid"), PermissionsExt::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(src.join("d"), PermissionsExt::from_mode(0o2775)).unwrap();
    env.commit(&src, "setid");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let out = env.path("plain");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(mode(&out.join("suid")), 0o755);
    assert_eq!(mode(&out.join("d")), 0o775);
    let kept = env.path("kept");
    env.ok(&[
        "export",
        "ds",
        "v1",
        kept.to_str().unwrap(),
        "--preserve-setid",
    ]);
    assert_eq!(mode(&kept.join("suid")), 0o4755);
    assert_eq!(mode(&kept.join("d")), 0o2775);
    // Another user may not ask for it.
    let other = env.path("other");
    let mut cmd = Command::new("setpriv");
    cmd.args([NOBODY, "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_detafs"))
        .args([
            "export",
            "ds",
            "v1",
            other.to_str().unwrap(),
            "--preserve-setid",
        ]);
    let out = env.configure(&mut cmd).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("root"));
    assert!(!other.exists());
}

#[test]
fn a_committed_setuid_binary_gives_no_one_else_root_through_the_mount() {
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::copy("/usr/bin/id", src.join("id")).unwrap();
    std::fs::set_permissions(src.join("id"), PermissionsExt::from_mode(0o4755)).unwrap();
    env.commit(&src, "setuid id");
    let m = env.mount(&["--allow-other"]);
    std::fs::set_permissions(env.dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(
        std::fs::metadata(m.path("versions/v1/id")).unwrap().mode() & 0o7777,
        0o4755
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let ours = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == m.dir.to_str())
        .unwrap();
    assert!(ours.contains("nosuid") && ours.contains("nodev"), "{ours}");
    for path in ["versions/v1/id", "staging/id"] {
        let out = run_ok(
            Command::new("setpriv")
                .args([NOBODY, "--regid=65534", "--clear-groups"])
                .arg(m.path(path))
                .arg("-u"),
        );
        assert_eq!(out.trim(), "65534", "{path} ran setuid");
    }
}

#[test]
fn local_state_is_private_and_other_users_cannot_read_it() {
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("secret"), b"the password").unwrap();
    std::fs::set_permissions(src.join("secret"), PermissionsExt::from_mode(0o600)).unwrap();
    env.commit(&src, "private");
    let m = env.mount(&["--allow-other"]);
    std::fs::write(m.path("staging/staged-secret"), b"staged password").unwrap();
    std::fs::set_permissions(
        m.path("staging/staged-secret"),
        PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // Every folder is 0700 and every file 0600, in the store, cache and staging.
    for root in [Path::new(&env.store), &env.cache, &env.staging()] {
        assert_eq!(
            std::fs::metadata(root).unwrap().mode() & 0o777,
            0o700,
            "{root:?}"
        );
        let found = Command::new("find")
            .arg(root)
            .args(["-perm", "/077"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&found.stdout), "", "{root:?}");
    }
    // Another user, with the test folder open to them, gets nothing.
    std::fs::set_permissions(env.dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let as_nobody = |script: &str| {
        Command::new("setpriv")
            .args([
                NOBODY,
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                script,
            ])
            .output()
            .unwrap()
    };
    // Nobody's own folder for what detafs keeps locally, in the test's.
    let nobody_home = env.path("nobody");
    std::fs::create_dir_all(&nobody_home).unwrap();
    std::os::unix::fs::chown(&nobody_home, Some(65534), Some(65534)).unwrap();
    let packs = env.objects.list("packs");
    let pack = Path::new(&env.store).join(&packs[0].0);
    let staged = format!("grep -r 'staged password' {}", env.staging().display());
    for script in [
        format!("cat {}", pack.display()),
        staged,
        format!("cat {}", m.path("versions/v1/secret").display()),
        format!("cat {}", m.path("staging/staged-secret").display()),
        format!(
            "HOME={home} DETAFS_STORE={} DETAFS_CACHE={home}/cache {} cat ds v1 secret",
            env.store,
            env!("CARGO_BIN_EXE_detafs"),
            home = nobody_home.display()
        ),
    ] {
        let out = as_nobody(&script);
        assert!(!out.status.success(), "{script}: {out:?}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("password"));
    }
    // The owner reads through the mount, as ever.
    assert_eq!(
        std::fs::read(m.path("versions/v1/secret")).unwrap(),
        b"the password"
    );
    drop(m);
    // A folder left open by an older detafs is tightened on next use.
    std::fs::set_permissions(&env.store, PermissionsExt::from_mode(0o755)).unwrap();
    env.ok(&["log", "ds"]);
    assert_eq!(std::fs::metadata(&env.store).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn a_decompression_bomb_costs_an_error_not_the_memory() {
    let env = with_v1();
    // 1 GiB of JSON whitespace (valid JSON, and the tree's real id) in ~100 KB.
    let mut enc = zstd::stream::Encoder::new(vec![1u8], 1).unwrap();
    let mut hash = <sha2::Sha256 as sha2::Digest>::new();
    use sha2::Digest;
    use std::io::Write;
    let head = br#"{"packs":[],"entries":[]}"#;
    enc.write_all(head).unwrap();
    hash.update(head);
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..1024 {
        enc.write_all(&spaces).unwrap();
        hash.update(&spaces);
    }
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    let mut p = Pack::default();
    let root = p.add_encoded(hex::encode(hash.finalize()), &bomb);
    p.write(&env.objects);
    craft::record(&env.objects, "ds", 2, &root, |_| {});
    let t = Duration::from_secs(60);
    for args in [
        &["ls", "ds", "v2"][..],
        &["cat", "ds", "v2", "x"],
        &["export", "ds", "v2", env.path("out").to_str().unwrap()],
        &["diff", "ds", "v1", "v2"],
        &["gc", "--grace", "24h"],
    ] {
        fails_cleanly(&env, args, "inflates beyond", t, 150);
    }
    verify_reports(&env, "inflates beyond", t);
    // Through the mount: EIO for that version, the rest is served.
    let m = env.mount(&[]);
    assert_eq!(listing_errno(&m.path("versions/v2")), libc::EIO);
    assert!(m.alive());
    // The log names the object, the version and the path.
    common::within(Duration::from_secs(5), "the log line", || {
        m.log().contains("versions/v2 (v2): tree object")
    });
    assert_eq!(
        fingerprint(&m.path("versions/v1")),
        fingerprint(&env.path("src"))
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", m.pid)).unwrap();
    let hwm: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    assert!(hwm < 300 * 1024, "daemon peak RSS {hwm} kB");
}

/// Trees `t0` (empty) .. `tn`, each in one pack; `tk` holds `names`, each
/// a directory `t(k-1)`. Returns the root.
fn shared_trees(env: &Env, n: usize, names: &[&str]) -> craft::Ref {
    let mut p = Pack::default();
    let pack_id = p.id().to_string();
    let mut t = p.tree(&tree_json(vec![], &[]));
    for _ in 0..n {
        let entries = names.iter().map(|name| dir_entry(name, &t, 0)).collect();
        t = p.tree(&tree_json(entries, &[&pack_id]));
    }
    p.write(&env.objects);
    t
}

#[test]
fn shared_subtrees_cannot_make_a_walk_run_for_ever() {
    let env = with_v1();
    // 41 trees naming 2^41 paths.
    let root = shared_trees(&env, 40, &["a", "b"]);
    craft::record(&env.objects, "ds", 2, &root, |_| {});
    let t = Duration::from_secs(60);
    let dest = env.path("out");
    fails_cleanly(
        &env,
        &["export", "ds", "v2", dest.to_str().unwrap()],
        "more than",
        t,
        150,
    );
    assert!(!dest.exists(), "nothing is written");
    fails_cleanly(&env, &["diff", "ds", "v1", "v2"], "more than", t, 300);
    verify_reports(&env, "expands to more than", t);
    // Listing one level is fine.
    assert_eq!(env.ok(&["ls", "ds", "v2"]).lines().count(), 2);
}

#[test]
fn deep_trees_are_refused_without_overflowing_a_stack() {
    let env = with_v1();
    let root = shared_trees(&env, 100_000, &["d"]);
    craft::record(&env.objects, "ds", 2, &root, |_| {});
    let t = Duration::from_secs(120);
    let dest = env.path("out");
    fails_cleanly(
        &env,
        &["export", "ds", "v2", dest.to_str().unwrap()],
        "deeper than",
        t,
        300,
    );
    fails_cleanly(&env, &["diff", "ds", "v1", "v2"], "deeper than", t, 300);
    verify_reports(&env, "nests deeper than", t);
}

#[test]
fn staging_deeper_than_the_limit_is_refused_and_the_mount_lives() {
    let env = with_v1();
    let m = env.mount(&[]);
    let deep = (0..2000).map(|_| "d").collect::<Vec<_>>().join("/");
    let out = Command::new("mkdir")
        .arg("-p")
        .arg(&deep)
        .current_dir(m.path("staging"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("File name too long"));
    // What was made (up to the limit) shows in status and commits.
    let at_1000 = (0..1000).map(|_| "d").collect::<Vec<_>>().join("/");
    std::fs::write(m.path("staging").join(&at_1000).join("f"), b"deep").unwrap();
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, format!("A {at_1000}/f\n"));
    common::commit_via_control(&m, "deep").unwrap();
    assert!(m.alive());
    assert_eq!(env.log().len(), 2);
    let dest = env.path("out");
    env.ok(&["export", "ds", "v2", dest.to_str().unwrap()]);
    assert_eq!(
        std::fs::read(dest.join(&at_1000).join("f")).unwrap(),
        b"deep"
    );
}

#[test]
fn timestamps_out_of_range_are_errors_not_panics() {
    let env = with_v1();
    let m = env.mount(&[]);
    // A time no version can hold is refused in staging, not stored.
    let out = Command::new("touch")
        .args(["-d", "@253402300800"])
        .arg(m.path("staging/a.csv"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Invalid argument"),
        "{out:?}"
    );
    // One stored by a hostile writer is an error for what holds it.
    version_with_bad_file(&env, |f| f["mtime"] = json!([i64::MAX, 0]));
    let t = Duration::from_secs(30);
    fails_cleanly(&env, &["ls", "ds", "v2"], "out of range", t, 150);
    let dest = env.path("o");
    fails_cleanly(
        &env,
        &["export", "ds", "v2", dest.to_str().unwrap()],
        "out of range",
        t,
        150,
    );
    verify_reports(&env, "out of range", t);
    common::within(Duration::from_secs(20), "v2 in the mount", || {
        std::fs::read_dir(m.path("versions"))
            .unwrap()
            .flatten()
            .any(|e| e.file_name() == "v2")
    });
    assert_eq!(listing_errno(&m.path("versions/v2")), libc::EIO);
    assert!(m.alive());
    assert_eq!(
        fingerprint(&m.path("versions/v1")),
        fingerprint(&env.path("src"))
    );
}

#[test]
fn a_compressed_chunk_is_refused_everywhere_never_served_raw() {
    let env = with_v1();
    let data = b"the real content of this file, compressed by a foreign writer\n".repeat(4);
    let mut enc = vec![1u8];
    enc.extend(zstd::bulk::compress(&data, 3).unwrap());
    let mut p = Pack::default();
    let chunk = p.add_encoded(craft::sha(&data), &enc);
    let ok = p.chunk(b"fine\n");
    let pack = p.write(&env.objects);
    // The size says what the raw bytes would be, as an honest writer's would.
    let z = file_entry("z.bin", chunk.len - 1, &[&chunk], 0);
    craft_version(
        &env,
        2,
        vec![file_entry("ok.txt", 5, &[&ok], 0), z],
        &[&pack],
    );
    let t = Duration::from_secs(30);
    fails_cleanly(
        &env,
        &["cat", "ds", "v2", "z.bin"],
        "encoding byte 1",
        t,
        150,
    );
    assert_eq!(env.ok(&["cat", "ds", "v2", "ok.txt"]), "fine\n");
    verify_reports(&env, "encoding byte 1", t);
    let m = env.mount(&[]);
    let err = std::fs::read(m.path("versions/v2/z.bin")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        std::fs::read(m.path("versions/v2/ok.txt")).unwrap(),
        b"fine\n"
    );
    assert!(m.log().contains("z.bin"), "{}", m.log());
}

#[test]
fn sizes_and_chunks_that_disagree_are_refused() {
    for (what, edit) in [
        ("size 99 but its chunks hold 6", json!({"size": 99})),
        (
            "out of bounds",
            json!({"size": 0, "chunks": [[craft::sha(b""), 0, 8, 1]]}),
        ),
        ("beyond 0o7777", json!({"mode": 0xFFFF_FFFFu32})),
        ("bad entry name", json!({"name": "a\u{0}b"})),
    ] {
        let env = with_v1();
        version_with_bad_file(&env, |f| {
            for (k, v) in edit.as_object().unwrap() {
                f[k] = v.clone();
            }
        });
        let t = Duration::from_secs(30);
        fails_cleanly(&env, &["cat", "ds", "v2", "f"], what, t, 150);
        let dest = env.path("out");
        fails_cleanly(
            &env,
            &["export", "ds", "v2", dest.to_str().unwrap()],
            what,
            t,
            150,
        );
        verify_reports(&env, what, t);
    }
}

#[test]
fn records_from_the_store_are_checked() {
    let env = with_v1();
    // A stray object under records/ is no version; a new host's log works.
    env.objects
        .write("datasets/ds/records/README.txt", b"not a record".to_vec());
    let other = env.other_host();
    assert_eq!(other.log().len(), 1);
    // A record of a newer format is refused with its reason.
    let v1 = env
        .objects
        .read("datasets/ds/records/00000000000000000001.json");
    let v1: Value = serde_json::from_slice(&v1).unwrap();
    let tree: craft::Ref = craft::Ref {
        id: v1["tree"]["id"].as_str().unwrap().into(),
        pack: v1["tree"]["pack"].as_str().unwrap().into(),
        offset: v1["tree"]["offset"].as_u64().unwrap(),
        len: v1["tree"]["len"].as_u64().unwrap(),
    };
    craft::record(&env.objects, "ds", 2, &tree, |r| r["format"] = json!(3));
    let out = env.other_host().run(&["log", "ds"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("record format 3"));
    verify_reports(&env, "record format 3", Duration::from_secs(30));
    // A record of the other known format is no record of this store.
    env.objects
        .delete("datasets/ds/records/00000000000000000002.json");
    craft::record(&env.objects, "ds", 2, &tree, |r| r["format"] = json!(2));
    let out = env.other_host().run(&["log", "ds"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("record format 2 in a store of format 1"),
        "{out:?}"
    );
}

#[test]
fn names_messages_and_authors_print_one_entry_per_line() {
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x\nM forged"), b"1").unwrap();
    let out = env.run(&[
        "commit",
        "ds",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "real\nv9 forged line",
        "--author",
        "eve\x1b[2J",
    ]);
    assert!(out.status.success(), "{out:?}");
    let log = env.ok(&["log", "ds"]);
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(!log.contains('\x1b'));
    assert_eq!(env.ok(&["ls", "ds", "v1"]).lines().count(), 1);
    std::fs::write(src.join("y"), b"2").unwrap();
    env.commit(&src, "two");
    assert_eq!(env.ok(&["diff", "ds", "v1", "v2"]).lines().count(), 1);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/new\nD faked"), b"3").unwrap();
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, "A new\\nD faked\n");
}

#[test]
fn gc_refuses_a_grace_below_the_safe_minimum() {
    let env = with_v1();
    let debris = "packs/00/00aa000000000000000000000000000000000000000000000000000000000000";
    env.objects.write(debris, b"DTFSPAK1junk".to_vec());
    for grace in ["0s", "1h", "12h"] {
        let out = env
            .command()
            .env_remove("DETAFS_TEST_GC_MIN_GRACE")
            .args(["gc", "--grace", grace])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{grace}: a usage error");
        assert!(String::from_utf8_lossy(&out.stderr).contains("at least 13h"));
        assert!(env.objects.exists(debris));
    }
    let out = env
        .command()
        .env_remove("DETAFS_TEST_GC_MIN_GRACE")
        .args(["gc", "--grace", "13h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(env.objects.exists(debris), "younger than the grace");
}

#[test]
fn a_crafted_link_group_never_serves_one_name_with_anothers_bytes_nor_nests_the_daemon_to_death() {
    let env = with_v1();
    let mut data = Pack::default();
    let (ca, cb) = (data.chunk(b"AAAA"), data.chunk(b"BBBB"));
    let pack = data.write(&env.objects);
    // Two names of one "group" that hold different files.
    let linked = |name: &str, chunk: &craft::Ref| {
        let mut e = file_entry(name, 4, &[chunk], 0);
        e["link"] = json!([7, 2]);
        e
    };
    // And a chain of folders far deeper than a version may nest, each
    // marked as holding a linked name, which staging lists at once.
    let mut trees = Pack::default();
    let mut below = trees.tree(&tree_json(vec![linked("leaf", &ca)], &[&pack]));
    for _ in 0..3000 {
        let mut d = dir_entry("d", &below, 0);
        d["links"] = json!(true);
        below = trees.tree(&tree_json(vec![d], &[trees.id()]));
    }
    let trees_id = trees.id().to_string();
    let mut deep = dir_entry("deep", &below, 1);
    deep["links"] = json!(true);
    trees.write(&env.objects);
    craft_version(
        &env,
        2,
        vec![linked("a", &ca), linked("b", &cb), deep],
        &[&pack, &trees_id],
    );
    let m = env.mount(&[]);
    for top in ["versions/v2", "staging"] {
        let (a, b) = (m.path(&format!("{top}/a")), m.path(&format!("{top}/b")));
        assert_eq!(std::fs::read(&a).unwrap(), b"AAAA", "{top}");
        assert_eq!(std::fs::read(&b).unwrap(), b"BBBB", "{top}");
        assert_ne!(
            std::fs::metadata(&a).unwrap().ino(),
            std::fs::metadata(&b).unwrap().ino(),
            "{top}"
        );
    }
    assert!(m.path("staging/deep/d").is_dir());
    assert!(m.alive(), "{}", m.log());
    drop(m);
    // Export writes each name's own bytes.
    let out = env.path("out");
    let (code, _) = env.fails(&["export", "ds", "v2", out.to_str().unwrap()]);
    assert_eq!(code, 1, "the version nests deeper than a version may");
    let shallow = env.path("shallow");
    craft_version(&env, 3, vec![linked("a", &ca), linked("b", &cb)], &[&pack]);
    env.ok(&["export", "ds", "v3", shallow.to_str().unwrap()]);
    assert_eq!(std::fs::read(shallow.join("a")).unwrap(), b"AAAA");
    assert_eq!(std::fs::read(shallow.join("b")).unwrap(), b"BBBB");
}

/// gc never follows a symbolic link out of a local store: a `packs/xx`
/// folder replaced by a link to another folder costs gc an error, and
/// nothing outside the store is deleted.
#[test]
fn gc_never_deletes_through_a_symlink_planted_in_a_local_store() {
    let env = Env::new_local();
    let src = env.path("src");
    sample_tree(&src, 4);
    env.commit(&src, "v1");
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // Named as an unreachable pack of that folder would be.
    let victim = outside.join(format!("ee{}", "0".repeat(62)));
    std::fs::write(&victim, "not the store's").unwrap();
    let packs = Path::new(&env.store).join("packs");
    let link = packs.join("ee");
    let _ = std::fs::remove_dir_all(&link);
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let out = env.run(&["gc", "--grace", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        victim.exists(),
        "gc deleted {victim:?} outside the store: {err}"
    );
    if !out.status.success() {
        assert!(err.contains("symbolic link"), "{err}");
    }
    // The store itself is intact.
    let other = env.other_host();
    let out_dir = other.path("out");
    other.ok(&["export", "ds", "v1", out_dir.to_str().unwrap()]);
    assert!(fingerprint(&src) == fingerprint(&out_dir));
}

/// A state folder another user owns is refused, root included: its owner
/// could plant a symlink where detafs writes. Nothing is written there.
#[test]
fn a_state_folder_another_user_owns_is_refused() {
    let env = Env::new();
    let planted = env.path("planted-cache");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let out = env
        .command()
        .env("DETAFS_CACHE", &planted)
        .args(["log", "ds"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert_eq!(std::fs::read_dir(&planted).unwrap().count(), 0);
}

/// The errno of listing folder `p`: at its open, or where the kernel opens
/// folders itself (`versions/` on its own connection), at its first read.
fn listing_errno(p: &std::path::Path) -> i32 {
    let err = match std::fs::read_dir(p) {
        Err(e) => e,
        Ok(mut entries) => entries
            .find_map(|e| e.err())
            .expect("an error listing the folder"),
    };
    err.raw_os_error().unwrap()
}
