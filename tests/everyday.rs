//! Everyday use without surprises: what the CLI says and prints when a new
//! user meets it (the embedded store's key, machine-readable output, where
//! a daemon mounted and logs, why an unmount or a mount failed and what to
//! do next).

mod common;

use common::{Env, run_ok, within};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `detafs ARGS` for a new user: HOME is `home`, nothing of the caller's
/// detafs settings.
fn new_user(home: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_detafs"));
    for (k, _) in std::env::vars() {
        if k.starts_with("DETAFS_") || k.starts_with("XDG_") {
            c.env_remove(k);
        }
    }
    c.env("HOME", home).args(args).output().unwrap()
}

/// A folder `src` holding `files` (path, content), committed as v1 of `ds`.
fn committed(env: &Env, files: &[(&str, &str)]) -> std::path::PathBuf {
    let src = env.path("src");
    for (path, content) in files {
        let at = src.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, content).unwrap();
    }
    env.commit(&src, "one");
    src
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn the_embedded_store_is_announced_once_with_its_key_file() {
    let home = tempfile::tempdir().unwrap();
    // The very first command, even one that fails, makes the store: it says so.
    let first = new_user(home.path(), &["log", "nothing"]);
    assert_eq!(first.status.code(), Some(1));
    let said = String::from_utf8_lossy(&first.stderr);
    let keys = home.path().join(".config/detafs/keys");
    let key_file = std::fs::read_dir(&keys)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(said.contains("created the embedded store at"), "{said}");
    assert!(
        said.contains(&format!("key file: {}", key_file.display())),
        "{said}"
    );
    assert!(said.contains("back it up"), "{said}");
    // Once.
    let second = new_user(home.path(), &["dataset", "list"]);
    assert!(second.status.success());
    assert!(!String::from_utf8_lossy(&second.stderr).contains("created"));
    // `key list` names this host's key file, as text and as JSON.
    let list = new_user(home.path(), &["key", "list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains(&format!("this host's key file: {}", key_file.display())),
        "{text}"
    );
    let list = new_user(home.path(), &["key", "list", "--json"]);
    let rows = json(&String::from_utf8_lossy(&list.stdout));
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0]["kind"], "key-file");
    assert_eq!(rows[0]["key_file"], key_file.to_str().unwrap());
    // Made on first use only: deleted, it is reported gone, not made again.
    let store = home.path().join(".local/share/detafs/store");
    std::fs::remove_dir_all(&store).unwrap();
    let out = new_user(home.path(), &["dataset", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("is gone"), "{said}");
    assert!(!store.exists(), "made again");
}

#[test]
fn every_command_that_prints_data_prints_json() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("tables")).unwrap();
    std::fs::write(src.join("a.csv"), "x\n1\n").unwrap();
    std::fs::write(src.join("tables/b.csv"), "y\n2\n").unwrap();
    std::os::unix::fs::symlink("a.csv", src.join("link")).unwrap();
    env.commit(&src, "one");
    std::fs::write(src.join("a.csv"), "x\n1\n2\n").unwrap();
    std::fs::remove_file(src.join("tables/b.csv")).unwrap();
    std::fs::write(src.join("c.txt"), "new").unwrap();
    env.commit(&src, "two");
    env.ok(&["tag", "ds", "v1", "first"]);

    let diff = json(&env.ok(&["diff", "ds", "v1", "v2", "--json"]));
    let by_path = |rows: &Value, path: &str| -> Value {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["path"] == path)
            .cloned()
            .unwrap_or_else(|| panic!("{path} not in {rows}"))
    };
    assert_eq!(diff.as_array().unwrap().len(), 3, "{diff}");
    let a = by_path(&diff, "a.csv");
    assert_eq!(
        (
            a["change"].as_str(),
            a["old_size"].as_u64(),
            a["new_size"].as_u64()
        ),
        (Some("M"), Some(4), Some(6))
    );
    assert_eq!(by_path(&diff, "tables/b.csv")["change"], "D");
    assert_eq!(by_path(&diff, "tables/b.csv")["new_size"], Value::Null);
    assert_eq!(by_path(&diff, "c.txt")["change"], "A");

    let ls = json(&env.ok(&["ls", "ds", "first", "--json"]));
    let names: Vec<&str> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.csv", "link", "tables"], "{ls}");
    assert_eq!(by_name(&ls, "a.csv")["type"], "file");
    assert_eq!(by_name(&ls, "a.csv")["size"], 4);
    assert_eq!(by_name(&ls, "link")["type"], "symlink");
    assert_eq!(by_name(&ls, "link")["target"], "a.csv");
    assert_eq!(by_name(&ls, "tables")["type"], "dir");
    assert!(
        by_name(&ls, "a.csv")["mtime"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    let tags = json(&env.ok(&["tag", "ds", "--json"]));
    assert_eq!(tags, serde_json::json!([{"tag": "first", "version": 1}]));

    // Staging: a checkout of v1's a.csv is a change against v2.
    env.ok(&["checkout", "ds", "v1", "a.csv", "tables/b.csv"]);
    let status = json(&env.ok(&["status", "ds", "--json"]));
    assert_eq!(
        status,
        serde_json::json!([{"status": "M", "path": "a.csv"}, {"status": "A", "path": "tables/b.csv"}])
    );
    let staged = json(&env.ok(&["diff", "ds", "latest", "staging", "--json"]));
    assert_eq!(by_path(&staged, "a.csv")["new_size"], 4);

    let verify = json(&env.ok(&["verify", "--json"]));
    assert_eq!(verify["versions"], 2);
    assert_eq!(verify["problems"], serde_json::json!([]));
    assert!(verify["objects"].as_u64().unwrap() > 0);

    let audit = json(&env.ok(&["audit", "ds", "--json"]));
    assert_eq!(audit["ok"], true);
    assert_eq!(
        json(&env.ok(&["policy", "log", "--json"])),
        serde_json::json!([])
    );
    env.ok(&["apikey", "create", "dash", "--scopes", "read"]);
    let keys = json(&env.ok(&["apikey", "list", "--json"]));
    assert_eq!(keys[0]["name"], "dash");
    assert_eq!(keys[0]["revoked"], false);
    assert!(
        keys[0]["scopes"]
            .as_array()
            .unwrap()
            .contains(&"dataset:read".into())
    );

    // Text and JSON list the same things.
    assert_eq!(env.ok(&["status", "ds"]), "M a.csv\nA tables/b.csv\n");
}

fn by_name(rows: &Value, name: &str) -> Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {rows}"))
}

#[test]
fn verify_json_lists_garbage_and_gc_dry_run_tells_what_the_grace_keeps() {
    let env = Env::new();
    committed(&env, &[("a.csv", "1")]);
    let debris = "packs/00/00aa000000000000000000000000000000000000000000000000000000000000";
    env.objects.write(debris, b"DTFSPAK1junk".to_vec());
    let verify = json(&env.ok(&["verify", "--json"]));
    assert_eq!(verify["garbage"][0]["key"], debris, "{verify}");
    assert_eq!(verify["garbage"][0]["size"], 12);
    // Younger than the default grace (24h): kept, and said so.
    let out = env
        .command()
        .env_remove("DETAFS_TEST_GC_MIN_GRACE")
        .args(["gc", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("would delete 0 unreachable objects"),
        "{said}"
    );
    assert!(
        said.contains("kept 1 unreachable objects (12 bytes) younger than the grace"),
        "{said}"
    );
    assert!(said.contains("deletable after 20"), "a date: {said}");
    assert!(env.objects.exists(debris));
}

/// The path in "... (pid N, log PATH)".
fn said_log(said: &str) -> String {
    said.split_once(", log ")
        .and_then(|(_, rest)| rest.trim().strip_suffix(')'))
        .unwrap_or_else(|| panic!("no log in {said:?}"))
        .to_string()
}

#[test]
fn a_daemon_mount_says_where_it_is_and_where_it_logs() {
    let env = Env::new();
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let said = env.ok(&["mount", "ds", mnt.to_str().unwrap(), "--daemon"]);
    let _gone = Unmount(&mnt);
    assert!(
        said.starts_with(&format!("mounted ds at {} (pid ", mnt.display())),
        "{said}"
    );
    let log = said_log(&said);
    assert!(Path::new(&log).is_file(), "{log}");
    let health = json(&std::fs::read_to_string(mnt.join(".detafs/health")).unwrap());
    assert_eq!(health["log"], log.as_str());
    // A second read-write mount names the first and what to do instead.
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let (code, err) = env.fails(&["mount", "ds", other.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("already mounted read-write at {}", mnt.display())),
        "{err}"
    );
    assert!(err.contains("--read-only"), "{err}");
    env.ok(&["umount", mnt.to_str().unwrap()]);
}

/// Detaches a mount left behind by a failed assertion.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3").arg("-uz").arg(self.0).output();
    }
}

#[test]
fn a_busy_unmount_says_what_uses_it_and_lazy_detaches_it() {
    let env = Env::new();
    committed(&env, &[("d/a.csv", "1")]);
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let said = env.ok(&["mount", "ds", mnt.to_str().unwrap(), "--daemon"]);
    let _gone = Unmount(&mnt);
    let pid: u32 = said
        .split_once("(pid ")
        .unwrap()
        .1
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for inside in ["versions/v1/d", "staging/d"] {
        let shell = common::Inside::new(&mnt.join(inside));
        let (code, err) = env.fails(&["umount", mnt.to_str().unwrap()]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!("in use by {} (sleep)", shell.pid())),
            "{inside}: {err}"
        );
        assert!(err.contains("nothing was detached"), "{err}");
        assert!(common::mounted_at(&mnt.join("versions")), "{inside}");
        assert!(err.contains("detafs umount --lazy"), "{err}");
        drop(shell);
    }
    assert!(
        common::mounted_at(&mnt),
        "a refused unmount leaves it mounted"
    );
    let shell = common::Inside::new(&mnt.join("staging/d"));
    env.ok(&["umount", "--lazy", mnt.to_str().unwrap()]);
    assert!(!common::mounted_at(&mnt), "detached at once");
    drop(shell);
    within(Duration::from_secs(20), "the daemon's end", || {
        common::gone(pid)
    });
}

#[test]
fn a_second_interrupt_detaches_a_busy_foreground_mount() {
    let env = Env::new();
    let mnt = env.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let log = env.path("mount.log");
    let mut daemon = env
        .command()
        .args(["mount", "ds", mnt.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _gone = Unmount(&mnt);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    within(Duration::from_secs(30), "the mount", || {
        said().contains("mounted ds at")
    });
    let shell = common::Inside::new(&mnt.join("staging"));
    let interrupt = || common::signal(daemon.id(), libc::SIGINT);
    interrupt();
    within(
        Duration::from_secs(30),
        "the first interrupt's answer",
        || said().contains("interrupt again"),
    );
    assert!(
        common::mounted_at(&mnt),
        "busy: still mounted after one interrupt"
    );
    assert!(
        common::mounted_at(&mnt.join("versions")),
        "both connections or neither"
    );
    assert!(
        said().contains(&format!("in use by {}", shell.pid())),
        "{}",
        said()
    );
    assert!(said().contains("a shell's working folder"), "{}", said());
    interrupt();
    within(Duration::from_secs(30), "the lazy detach", || {
        said().contains("detached") && !common::mounted_at(&mnt)
    });
    drop(shell);
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", said());
}

#[test]
fn a_full_local_disk_is_named_with_what_to_do() {
    let env = Env::new();
    committed(&env, &[("a.csv", "1")]);
    let area = env.staging();
    let _tmpfs = common::Tmpfs::mount(&area, "1m");
    // Nothing left on it.
    let _ = std::fs::write(area.join("filler"), vec![0u8; 2 << 20]);
    let (code, err) = env.fails(&["checkout", "ds", "v1"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a local disk is full"), "{err}");
    assert!(err.contains(area.to_str().unwrap()), "names where: {err}");
    assert!(err.contains("--staging-dir"), "{err}");
}

#[test]
fn a_user_who_may_not_mount_is_told_why_and_what_works_without() {
    // A user of this host with no right to /dev/fuse (root-only here).
    let dev = std::fs::metadata("/dev/fuse").unwrap();
    if std::os::unix::fs::PermissionsExt::mode(&dev.permissions()) & 0o006 != 0 {
        eprintln!("skipped: /dev/fuse is open to every user on this host");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let mnt = home.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    run_ok(
        Command::new("chown")
            .args(["-R", "2077:2077"])
            .arg(home.path()),
    );
    let bin = env!("CARGO_BIN_EXE_detafs");
    let store = home.path().join("store");
    let script = format!(
        "{bin} --store {s} dataset create ds && {bin} --store {s} mount ds {m}",
        s = store.display(),
        m = mnt.display()
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=2077",
            "--regid=2077",
            "--clear-groups",
            "sh",
            "-c",
            &script,
        ])
        .env("HOME", home.path())
        .env_remove("DETAFS_STORE")
        .env_remove("DETAFS_CACHE")
        .env_remove("DETAFS_STAGING")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("only root may mount FUSE file systems"),
        "{err}"
    );
    assert!(err.contains("detafs ls, cat, export"), "{err}");
    assert!(!common::mounted_at(&mnt));
}

#[test]
fn a_commit_that_would_record_no_change_says_nothing_to_commit_on_every_path() {
    let env = Env::new();
    let src = committed(&env, &[("a.csv", "1")]);
    // The same folder again.
    let (code, err) = env.fails(&[
        "commit",
        "ds",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "again",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("nothing to commit"), "{err}");
    // Staging committed from the side (`commit --from MNT/staging`), then
    // through the mount: its changes are all in that version already.
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/b.csv"), "2").unwrap();
    let staged = m.path("staging");
    assert_eq!(env.commit(&staged, "from the side"), "v2");
    let (code, err) = env.fails(&["commit", "ds", "-m", "through the mount"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("nothing to commit"), "{err}");
    let e = common::commit_via_control(&m, "the control file").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA), "{e}");
    assert_eq!(env.log().len(), 2, "no empty version");
    // Staging is clean, on v2.
    assert_eq!(env.ok(&["status", "ds"]), "");
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/base"))
            .unwrap()
            .trim(),
        "v2"
    );
}

/// Sets `path`'s modification time to `secs` after the epoch.
fn set_mtime(path: &Path, secs: u64) {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(secs);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn time_only_changes_are_their_own_kind_and_content_only_ignores_them() {
    let env = Env::new();
    let src = committed(&env, &[("a.csv", "1"), ("d/b.csv", "2")]);
    // A pipeline regenerates a.csv with the same bytes, and changes b.csv.
    set_mtime(&src.join("a.csv"), 1_600_000_000);
    std::fs::write(src.join("d/b.csv"), "22").unwrap();
    env.commit(&src, "two");
    assert_eq!(env.ok(&["diff", "ds", "v1", "v2"]), "T a.csv\nM d/b.csv\n");
    assert_eq!(
        env.ok(&["diff", "ds", "v1", "v2", "--content-only"]),
        "M d/b.csv\n"
    );
    let stat = env.ok(&["diff", "ds", "v1", "v2", "--stat"]);
    assert!(
        stat.contains("1 modified, 0 removed, 1 in time only"),
        "{stat}"
    );
    let log = env.log();
    assert_eq!(
        (
            log[1]["files_changed"].as_u64(),
            log[1]["files_touched"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert!(
        env.ok(&["log", "ds"])
            .lines()
            .next()
            .unwrap()
            .contains("+0 ~1 -0 T1")
    );
    // Only times changed: with --content-only, nothing to commit.
    set_mtime(&src.join("a.csv"), 1_500_000_000);
    let from = src.to_str().unwrap();
    let (code, err) = env.fails(&["commit", "ds", "--from", from, "-m", "x", "--content-only"]);
    assert_eq!(code, 4, "{err}");
    // A content change beside it records the content only: a.csv keeps v2's time.
    std::fs::write(src.join("c.csv"), "3").unwrap();
    assert_eq!(
        env.ok(&[
            "commit",
            "ds",
            "--from",
            from,
            "-m",
            "three",
            "--content-only"
        ])
        .trim(),
        "v3"
    );
    assert_eq!(env.ok(&["diff", "ds", "v2", "v3"]), "A c.csv\n");
    // Staging: a copy rewritten with the same bytes is T in status (and the
    // mount's status file), left out with --content-only.
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/a.csv"), "1").unwrap();
    assert_eq!(env.ok(&["status", "ds"]), "T a.csv\n");
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "T a.csv\n"
    );
    assert_eq!(env.ok(&["status", "ds", "--content-only"]), "");
    let status = json(&env.ok(&["status", "ds", "--json"]));
    assert_eq!(
        status,
        serde_json::json!([{"status": "T", "path": "a.csv"}])
    );
    assert_eq!(env.ok(&["diff", "ds", "latest", "staging"]), "T a.csv\n");
    drop(m);
    // Without the mount: a commit with --content-only has nothing to record
    // and leaves staging clean.
    let (code, err) = env.fails(&["commit", "ds", "-m", "times", "--content-only"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(env.ok(&["status", "ds"]), "");
    assert_eq!(env.log().len(), 3);
}

#[test]
fn log_of_a_path_says_what_happened_to_it_in_each_version() {
    let env = Env::new();
    let src = committed(&env, &[("a.csv", "1"), ("d/b.csv", "22")]);
    std::fs::write(src.join("a.csv"), "111").unwrap();
    env.commit(&src, "two");
    std::fs::rename(src.join("a.csv"), src.join("moved.csv")).unwrap();
    env.commit(&src, "three");
    set_mtime(&src.join("moved.csv"), 1_600_000_000);
    std::fs::write(src.join("d/c.csv"), "3").unwrap();
    env.commit(&src, "four");
    env.ok(&["tag", "ds", "v2", "grown"]);

    let lines = |path: &str| -> Vec<String> {
        env.ok(&["log", "ds", "--", path])
            .lines()
            .map(|l| {
                // Version, then what happened (time and author dropped).
                let (v, rest) = l.split_once(' ').unwrap();
                let what = rest.split("  ").filter(|p| !p.is_empty()).nth(2).unwrap();
                format!("{v} {}", what.trim())
            })
            .collect()
    };
    assert_eq!(
        lines("a.csv"),
        [
            "v3 D 3 B -> - (renamed to moved.csv)",
            "v2 M 1 B -> 3 B",
            "v1 A - -> 1 B"
        ]
    );
    assert_eq!(
        lines("moved.csv"),
        ["v4 T 3 B -> 3 B", "v3 A - -> 3 B (renamed from a.csv)"]
    );
    assert_eq!(lines("d"), ["v4 M folder +1 ~0 -0", "v1 A folder +1 ~0 -0"]);
    let rows = json(&env.ok(&["log", "ds", "--json", "--", "a.csv"]));
    assert_eq!(rows.as_array().unwrap().len(), 3);
    assert_eq!(rows[1]["version"], 2);
    assert_eq!(rows[1]["tags"], serde_json::json!(["grown"]));
    assert_eq!(
        rows[1]["path"],
        serde_json::json!({"change": "M", "old_size": 1, "new_size": 3, "inside": null,
                           "renamed_from": null, "renamed_to": null})
    );
    assert_eq!(rows[0]["path"]["renamed_to"], "moved.csv");
    // A path no version holds is said so; a path without `--` is a usage
    // error that shows the `--` form.
    let (code, err) = env.fails(&["log", "ds", "--", "never.csv"]);
    assert_eq!(code, 1);
    assert!(err.contains("never.csv is in no version of ds"), "{err}");
    let (code, err) = env.fails(&["log", "ds", "a.csv"]);
    assert_eq!(code, 2);
    assert!(err.contains("detafs log ds -- a.csv"), "{err}");
}

#[test]
fn a_store_deleted_under_a_mount_is_reported_gone_and_never_made_again() {
    let env = Env::new_local();
    let src = committed(&env, &[("a.csv", "1")]);
    let m = env.mount(&[]);
    let health = || json(&std::fs::read_to_string(m.path(".detafs/health")).unwrap());
    assert_eq!(health()["status"], "ok");
    let store = Path::new(&env.store).to_path_buf();
    std::fs::remove_dir_all(&store).unwrap();
    within(Duration::from_secs(20), "health to say gone", || {
        health()["status"] == "gone"
    });
    assert_eq!(health()["store_gone"], true);
    // A commit through the mount writes nothing: the store stays gone.
    std::fs::write(m.path("staging/b.csv"), "2").unwrap();
    assert!(common::commit_via_control(&m, "into nothing").is_err());
    let why = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(why.contains("is gone"), "{why}");
    assert!(!store.exists(), "a write made the store folder again");
    // Every command says so, and none makes it again.
    for args in [
        &["log", "ds"][..],
        &["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"],
    ] {
        let (code, err) = env.fails(args);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("is not a detafs store") && err.contains("deleted or moved"),
            "{err}"
        );
    }
    // Not even the first dataset of what looks like a new local store.
    let (code, err) = env.fails(&["dataset", "create", "other"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is gone"), "{err}");
    assert!(!store.exists());
    // Asked for, a new store is made there (with a new key file).
    run_ok(
        env.command()
            .env("DETAFS_KEY_FILE", env.path("new.key"))
            .arg("init"),
    );
    assert!(store.join("detafs.json").exists());
}

#[test]
fn a_commit_killed_at_80_percent_is_resumed_without_uploading_again() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut seed = 7u64;
    for i in 0..5 {
        // 16 MiB of bytes that do not compress: about a pack each.
        let bytes: Vec<u8> = (0..16 << 20)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed.to_le_bytes()[0]
            })
            .collect();
        std::fs::write(src.join(format!("part-{i}.bin")), bytes).unwrap();
    }
    let total: u64 = 5 * (16 << 20);
    // Killed (SIGKILL) once the fourth pack's chunks are durable and noted.
    let hold = common::Hold::new(&env, "commit-uploads-noted");
    let spec = hold.spec.replacen('=', "=3*off->", 1);
    let mut first = env
        .commit_command(&src, "first try", &spec)
        .spawn()
        .unwrap();
    hold.reached();
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(env.log().is_empty(), "nothing landed");
    let uploaded: u64 = env
        .objects
        .list("packs/")
        .iter()
        .map(|(_, size)| size)
        .sum();
    assert!(
        uploaded >= total * 3 / 4,
        "the first try uploaded {uploaded} of {total}"
    );
    // The retry uploads only what the first try had not.
    assert_eq!(env.commit(&src, "again"), "v1");
    let added = env.log()[0]["delta_size"].as_u64().unwrap();
    assert!(
        added < total / 4,
        "the retry uploaded {added} bytes again (of {total}; {uploaded} were there)"
    );
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(common::fingerprint(&out), common::fingerprint(&src));
    let verify = json(&env.ok(&["verify", "--json"]));
    assert_eq!(verify["problems"], serde_json::json!([]));
}

#[test]
fn help_completions_and_man_pages_come_from_the_cli_definition() {
    let env = Env::new();
    let help = |args: &[&str]| env.ok(&[args, &["--help"]].concat());
    for cmd in ["ls", "cat", "export"] {
        let text = help(&[cmd]);
        assert!(
            text.contains("latest~1") || text.contains("~N"),
            "{cmd}: {text}"
        );
        assert!(!text.contains("v3, 3 or latest"), "{cmd}: {text}");
    }
    let create = help(&["apikey", "create"]);
    assert!(create.contains("read (dataset:read and"), "{create}");
    assert!(create.contains("commit, tag, create, admin"), "{create}");
    let check = help(&["policy", "check"]);
    assert!(
        check.contains("group:NAME") && check.contains("dataset:commit"),
        "{check}"
    );
    assert!(help(&["audit"]).contains("One JSON object"));
    for shell in ["bash", "zsh", "fish"] {
        let script = env.ok(&["completions", shell]);
        assert!(
            script.contains("detafs") && script.contains("commit"),
            "{shell}"
        );
    }
    let (code, _) = env.fails(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    let man = env.path("man1");
    env.ok(&["man", man.to_str().unwrap()]);
    let page = std::fs::read_to_string(man.join("detafs-commit.1")).unwrap();
    assert!(
        page.contains(".TH") && page.contains("content\\-only"),
        "{page}"
    );
    assert!(man.join("detafs.1").exists());
}
