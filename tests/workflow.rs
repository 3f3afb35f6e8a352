//! The everyday workflow of a data scientist, through the CLI and a real
//! mount: control files readable by pandas and DuckDB, commits that say
//! which version they made, real times, quiet pipes, one order of the log.

mod common;

use common::{Env, Mount, commit_via_control, run_ok, status, two_versions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// A mount of dataset `ds` with `n` versions committed through it.
fn mounted_with_versions(env: &Env, n: usize) -> Mount<'_> {
    let m = env.mount(&[]);
    for i in 1..=n {
        std::fs::write(
            m.path(&format!("staging/f{i}.csv")),
            format!("a,b\n{i},{i}\n"),
        )
        .unwrap();
        commit_via_control(&m, &format!("step {i}")).unwrap();
    }
    m
}

fn python(code: &str) -> String {
    run_ok(Command::new("python3").args(["-c", code]))
}

#[test]
fn control_files_have_their_real_size_and_pandas_and_duckdb_read_the_log() {
    let env = Env::new();
    let m = mounted_with_versions(&env, 3);
    for name in ["log", "health", "last-commit", "status", "base"] {
        // stat, then open and read: what a tool that sizes its buffer does.
        let path = m.path(&format!(".detafs/{name}"));
        let mut f = std::fs::File::open(&path).unwrap();
        let size = f.metadata().unwrap().len();
        let mut content = Vec::new();
        f.read_to_end(&mut content).unwrap();
        assert_eq!(size, content.len() as u64, ".detafs/{name}");
    }
    assert!(std::fs::metadata(m.path(".detafs/log")).unwrap().len() > 0);
    let log = m.path(".detafs/log");
    let rows = python(&format!(
        "import pandas as pd; d = pd.read_json('{}', lines=True); print(len(d), list(d.version))",
        log.display()
    ));
    assert_eq!(rows.trim(), "3 [1, 2, 3]");
    let rows = python(&format!(
        "import duckdb; print(duckdb.sql(\"select count(*), max(version) from read_json_auto('{}')\").fetchall())",
        log.display()
    ));
    assert_eq!(rows.trim(), "[(3, 3)]");
}

#[test]
fn a_notebook_globs_versions_with_v_star_and_counts_each_once() {
    let env = Env::new();
    let m = mounted_with_versions(&env, 3);
    let out = python(&format!(
        "import glob, pandas as pd; files = sorted(glob.glob('{}/versions/v*/f1.csv')); \
         print(len(files), sum(len(pd.read_csv(f)) for f in files))",
        m.dir.display()
    ));
    assert_eq!(out.trim(), "3 3", "latest is not matched by versions/v*");
}

#[test]
fn a_commit_through_the_control_file_says_which_version_it_made() {
    let env = Env::new();
    let m = mounted_with_versions(&env, 1);
    let entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path(".detafs/last-commit")).unwrap()).unwrap();
    assert_eq!(entry["version"], 1);
    assert_eq!(entry["message"], "step 1");

    // The same handle reads back what its write committed.
    std::fs::write(m.path("staging/g.txt"), "g").unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(".detafs/commit"))
        .unwrap();
    f.write_all(b"second").unwrap();
    f.seek(std::io::SeekFrom::Start(0)).unwrap();
    let mut made = String::new();
    f.read_to_string(&mut made).unwrap();
    let made: serde_json::Value = serde_json::from_str(&made).unwrap();
    assert_eq!(
        (made["version"].as_u64(), made["message"].as_str()),
        (Some(2), Some("second"))
    );

    // The CLI through the mount prints the version the mount made.
    std::fs::write(m.path("staging/h.txt"), "h").unwrap();
    assert_eq!(env.ok(&["commit", "ds", "-m", "third"]).trim(), "v3");
    // --author cannot be honoured through a mount: refused, nothing committed.
    std::fs::write(m.path("staging/i.txt"), "i").unwrap();
    let (code, err) = env.fails(&["commit", "ds", "-m", "fourth", "--author", "bob"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--author"), "{err}");
    assert_eq!(env.log().len(), 3);
}

#[test]
fn an_empty_commit_message_is_an_error_and_commits_nothing() {
    let env = Env::new();
    let m = mounted_with_versions(&env, 1);
    std::fs::write(m.path("staging/new.txt"), "new").unwrap();
    let last_error = || std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    let sh = |cmd: &str| run_ok(Command::new("sh").arg("-c").arg(cmd).current_dir(&m.dir));
    // Opened and closed without a write: nothing committed, last-error says why.
    sh("printf '' > .detafs/commit");
    common::within(std::time::Duration::from_secs(5), "last-error", || {
        last_error().contains("empty commit message")
    });
    // Only blanks: refused at the write.
    let err = commit_via_control(&m, " \n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(env.log().len(), 1);
    // The shell's way (open, copy the descriptor, close the first, write):
    // committed, and no complaint about an empty message anywhere.
    let releases = || -> u64 {
        let h: serde_json::Value =
            serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap();
        h["requests"]["release"].as_u64().unwrap_or(0)
    };
    let before = releases();
    sh("echo now > .detafs/commit");
    assert_eq!(env.log().len(), 2);
    // Its handle's release (sent by the kernel after the close) is done.
    common::within(std::time::Duration::from_secs(10), "the release", || {
        releases() > before
    });
    assert_eq!(last_error(), "");
    drop(m);
    let log = env.mount(&[]).log();
    // Said once for the empty open (the blanks' write failed as it should).
    assert_eq!(
        log.matches("nothing was committed (echo MESSAGE").count(),
        1,
        "{log}"
    );
}

#[test]
fn versions_the_root_and_latest_carry_real_times() {
    let env = Env::new();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let m = mounted_with_versions(&env, 2);
    let log = env.log();
    let time = |i: usize| {
        let t = humantime::parse_rfc3339(log[i]["timestamp"].as_str().unwrap()).unwrap();
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
    };
    let mtime = |p: &str| std::fs::symlink_metadata(m.path(p)).unwrap().mtime();
    assert_eq!(mtime("versions/v1"), time(0));
    assert_eq!(mtime("versions/v2"), time(1));
    assert_eq!(mtime("versions"), time(1));
    assert_eq!(mtime("versions/latest"), time(1));
    for p in ["", ".detafs"] {
        assert!(
            mtime(p) >= before - 1 && mtime(p) <= time(0) + 1,
            "{p}: {}",
            mtime(p)
        );
    }
}

#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..30 {
        std::fs::write(src.join(format!("f{i}")), format!("{i}\n").repeat(1000)).unwrap();
        env.commit(&src, &format!("version {i}"));
    }
    for _ in 0..100 {
        for cmd in ["log ds", "log ds --json", "diff ds v1 v30", "ls ds latest"] {
            let out = env
                .configure(&mut Command::new("sh"))
                .arg("-c")
                .arg(format!(
                    "'{}' {cmd} | head -c 1 >/dev/null",
                    env!("CARGO_BIN_EXE_detafs")
                ))
                .output()
                .unwrap();
            assert!(out.status.success(), "{cmd}");
            assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{cmd}");
        }
    }
}

#[test]
fn log_and_log_json_list_newest_first() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 1..=3 {
        std::fs::write(src.join("f"), i.to_string()).unwrap();
        env.commit(&src, &format!("m{i}"));
    }
    let text: Vec<String> = env
        .ok(&["log", "ds"])
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let json: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["log", "ds", "--json"])).unwrap();
    let json: Vec<String> = json
        .iter()
        .map(|e| e["version_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, ["v3", "v2", "v1"]);
    assert_eq!(json, text);
}

/// A dataset with versions v1..v3 of one file `f` holding "1", "2", "3".
fn three_versions(env: &Env) {
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 1..=3 {
        std::fs::write(src.join("f"), i.to_string()).unwrap();
        env.commit(&src, &format!("m{i}"));
    }
}

#[test]
fn tags_and_relative_versions_name_versions_wherever_a_version_goes() {
    let env = Env::new();
    three_versions(&env);
    assert_eq!(
        env.ok(&["tag", "ds", "latest~2", "2024-q1"]).trim(),
        "2024-q1 v1"
    );
    assert_eq!(env.ok(&["tag", "ds", "v3", "release"]).trim(), "release v3");
    for (spec, want) in [
        ("2024-q1", "1"),
        ("release", "3"),
        ("release~1", "2"),
        ("latest~1", "2"),
        ("v3~2", "1"),
        ("3~0", "3"),
    ] {
        assert_eq!(env.ok(&["cat", "ds", spec, "f"]), want, "{spec}");
    }
    assert_eq!(env.ok(&["diff", "ds", "2024-q1", "release"]).trim(), "M f");
    // Unknown, beyond the first version, or malformed: clear errors.
    for spec in ["nope", "latest~3", "v1~1", "latest~x", "v3~-1"] {
        let (code, err) = env.fails(&["cat", "ds", spec, "f"]);
        assert_eq!(code, 1, "{spec}: {err}");
        assert!(!err.contains("panicked"), "{spec}: {err}");
    }
    // Tags never move, and cannot pass for versions.
    let (_, err) = env.fails(&["tag", "ds", "v2", "release"]);
    assert!(err.contains("already names v3"), "{err}");
    for bad in ["v4", "validated", "latest", "7", ".x", "a/b"] {
        let (code, err) = env.fails(&["tag", "ds", "v1", bad]);
        assert_eq!(code, 1, "{bad}: {err}");
    }
    let (_, err) = env.fails(&["tag", "ds", "v9", "future"]);
    assert!(err.contains("v9"), "{err}");
    assert_eq!(env.ok(&["tag", "ds"]), "2024-q1 v1\nrelease v3\n");
    // The log shows them, as text and as JSON.
    let text = env.ok(&["log", "ds"]);
    assert!(
        text.lines().next().unwrap().ends_with("(release)"),
        "{text}"
    );
    let log = env.log();
    assert_eq!(log[0]["tags"], serde_json::json!(["2024-q1"]));
    assert_eq!(log[1]["tags"], serde_json::json!([]));
    env.ok(&["verify"]);
}

#[test]
fn two_hosts_tagging_at_once_cannot_both_win() {
    let env = Env::new();
    three_versions(&env);
    for round in 0..5 {
        let tag = format!("race{round}");
        let children: Vec<_> = ["v1", "v2"]
            .iter()
            .map(|v| env.command().args(["tag", "ds", v, &tag]).spawn().unwrap())
            .collect();
        let won: Vec<bool> = children
            .into_iter()
            .map(|mut c| c.wait().unwrap().success())
            .collect();
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "{tag}: {won:?}");
        let listed = env.ok(&["tag", "ds"]);
        let winner = if won[0] { "v1" } else { "v2" };
        assert!(listed.contains(&format!("{tag} {winner}\n")), "{listed}");
    }
}

#[test]
fn a_damaged_or_forged_tag_is_reported_and_names_nothing() {
    // Tags in the clear, to forge one (a sealed one does not open: sealed.rs).
    let env = Env::new_plaintext();
    three_versions(&env);
    env.ok(&["tag", "ds", "v1", "good"]);
    let key = "datasets/ds/tags/good.json";
    let mut forged: serde_json::Value = serde_json::from_slice(&env.objects.read(key)).unwrap();
    forged["version"] = serde_json::json!(2);
    forged["tag"] = serde_json::json!("forged");
    env.objects.write(
        "datasets/ds/tags/forged.json",
        serde_json::to_vec(&forged).unwrap(),
    );
    env.objects
        .write("datasets/ds/tags/junk.json", b"{not json".to_vec());
    // Everything else works; the bad ones name nothing and verify names them.
    assert_eq!(env.ok(&["cat", "ds", "good", "f"]), "1");
    let (code, err) = env.fails(&["cat", "ds", "forged", "f"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(env.ok(&["tag", "ds"]), "good v1\n");
    assert!(env.ok(&["log", "ds"]).contains("(good)"));
    let (code, out) = env.fails(&["verify"]);
    assert_eq!(code, 1, "{out}");
    let report = env.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(
        stdout.contains("forged.json") && stdout.contains("junk.json"),
        "{stdout}"
    );
    assert!(!stdout.contains("good.json"), "{stdout}");
}

#[test]
fn a_mount_shows_tags_as_symlinks_and_follows_new_ones() {
    let env = Env::new();
    three_versions(&env);
    env.ok(&["tag", "ds", "v1", "first"]);
    let m = env.mount(&[]);
    assert_eq!(
        std::fs::read_link(m.path("versions/first")).unwrap(),
        std::path::Path::new("v1")
    );
    assert_eq!(
        std::fs::read_to_string(m.path("versions/first/f")).unwrap(),
        "1"
    );
    env.ok(&["tag", "ds", "v2", "second"]);
    common::within(std::time::Duration::from_secs(10), "the new tag", || {
        m.path("versions/second").symlink_metadata().is_ok()
    });
    assert_eq!(
        std::fs::read_to_string(m.path("versions/second/f")).unwrap(),
        "2"
    );
    let mut names: Vec<String> = std::fs::read_dir(m.path("versions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["first", "latest", "second", "v1", "v2", "v3"]);
}

#[test]
fn restore_discards_staged_changes_and_checkout_reverts_to_a_version() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let st = |p: &str| m.path(&format!("staging/{p}"));
    std::fs::write(st("a.csv"), "changed").unwrap();
    std::fs::write(st("new.txt"), "new").unwrap();
    std::fs::remove_file(st("c.csv")).unwrap();
    assert_eq!(status(&env), ["M a.csv", "D c.csv", "A new.txt"]);

    // One path, through the mount (the CLI writes .detafs/restore).
    env.ok(&["restore", "ds", "a.csv"]);
    assert_eq!(std::fs::read_to_string(st("a.csv")).unwrap(), "11");
    assert_eq!(status(&env), ["D c.csv", "A new.txt"]);
    // A path neither staged nor in the version: refused, nothing changed.
    let (code, err) = env.fails(&["restore", "ds", "a.csv", "nowhere.csv"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nowhere.csv"), "{err}");
    assert_eq!(status(&env), ["D c.csv", "A new.txt"]);
    // Everything, through the control file itself.
    std::fs::write(m.path(".detafs/restore"), ".\n").unwrap();
    assert_eq!(status(&env), Vec::<String>::new());
    // A name that went may be in the kernel's cache for its 1 s lifetime.
    common::within(std::time::Duration::from_secs(3), "new.txt to go", || {
        !st("new.txt").exists()
    });
    assert_eq!(std::fs::read_to_string(st("c.csv")).unwrap(), "3");

    // Check out v1 and commit it: a revert.
    env.ok(&["checkout", "ds", "v1"]);
    assert_eq!(status(&env), ["M a.csv", "D c.csv", "A d/b.csv"]);
    assert_eq!(std::fs::read_to_string(st("d/b.csv")).unwrap(), "2");
    commit_via_control(&m, "revert to v1").unwrap();
    assert_eq!(env.ok(&["diff", "ds", "v1", "v3"]), "");
    // One path of an older version, into a folder staging lacks.
    std::fs::remove_dir_all(st("d")).unwrap();
    std::fs::write(m.path(".detafs/checkout"), "v1\nd/b.csv\n").unwrap();
    assert_eq!(std::fs::read_to_string(st("d/b.csv")).unwrap(), "2");
    assert_eq!(status(&env), Vec::<String>::new());

    // Without a mount, the same commands work on staging directly.
    drop(m);
    env.ok(&["checkout", "ds", "v2", "a.csv"]);
    assert_eq!(status(&env), ["M a.csv"]);
    env.ok(&["restore", "ds"]);
    assert_eq!(status(&env), Vec::<String>::new());
    let (code, _) = env.fails(&["checkout", "ds", "v9"]);
    assert_eq!(code, 1);
}

#[test]
fn a_file_put_back_as_it_was_is_not_a_change() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    // The workaround users reached for: overwrite, then copy the committed
    // file back with its mode and time. Status and commit agree: clean.
    std::fs::write(m.path("staging/a.csv"), "xx").unwrap();
    assert_eq!(status(&env), ["M a.csv"]);
    run_ok(
        Command::new("cp")
            .arg("-p")
            .arg(m.path("versions/v2/a.csv"))
            .arg(m.path("staging/a.csv")),
    );
    assert_eq!(status(&env), Vec::<String>::new());
    let err = commit_via_control(&m, "nothing").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENODATA));
    // Same bytes, another time: a commit would record the time, so it is a
    // change, of its own kind (T).
    std::fs::write(m.path("staging/a.csv"), "11").unwrap();
    assert_eq!(status(&env), ["T a.csv"]);
}

#[test]
fn a_mount_point_that_is_missing_or_not_empty_is_refused_with_the_fix() {
    let env = Env::new();
    three_versions(&env);
    let missing = env.path("no-such-dir");
    let (code, err) = env.fails(&["mount", "ds", missing.to_str().unwrap(), "--daemon"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("does not exist") && err.contains("mkdir -p"),
        "{err}"
    );

    let full = env.path("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("mine.txt"), "keep").unwrap();
    let (code, err) = env.fails(&["mount", "ds", full.to_str().unwrap(), "--daemon"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not empty") && err.contains("--nonempty"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(full.join("mine.txt")).unwrap(),
        "keep"
    );

    // Asked for: it mounts over them, and they are back afterwards.
    env.ok(&[
        "mount",
        "ds",
        full.to_str().unwrap(),
        "--daemon",
        "--nonempty",
    ]);
    assert_eq!(
        std::fs::read_to_string(full.join("versions/v1/f")).unwrap(),
        "1"
    );
    env.ok(&["umount", full.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(full.join("mine.txt")).unwrap(),
        "keep"
    );
}

#[test]
fn log_of_a_path_lists_the_versions_that_changed_it() {
    let env = Env::new();
    let src = two_versions(&env); // v1: a.csv, d/b.csv; v2: a.csv changed, d/b.csv gone, c.csv
    std::fs::write(src.join("c.csv"), "33").unwrap();
    env.commit(&src, "v3"); // only c.csv
    let versions = |path: &str| -> Vec<String> {
        env.ok(&["log", "ds", "--", path])
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect()
    };
    assert_eq!(versions("a.csv"), ["v2", "v1"]);
    assert_eq!(versions("c.csv"), ["v3", "v2"]);
    assert_eq!(versions("d"), ["v2", "v1"]);
    assert_eq!(versions("/d/b.csv"), ["v2", "v1"]);
    // A path has one spelling: `.` is refused, not skipped.
    let (code, err) = env.fails(&["log", "ds", "--", "./d/b.csv"]);
    assert_eq!(code, 1);
    assert!(err.contains("bad path"), "{err}");
    // A path no version holds is said so (tests/everyday.rs has the rest).
    let (code, err) = env.fails(&["log", "ds", "--", "never.csv"]);
    assert_eq!(code, 1);
    assert!(err.contains("never.csv is in no version of ds"), "{err}");
    let json: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["log", "ds", "--json", "--", "c.csv"])).unwrap();
    assert_eq!(json.len(), 2);
    let (code, _) = env.fails(&["log", "ds", "--", "../x"]);
    assert_eq!(code, 1);
}

#[test]
fn unsupported_calls_get_the_usual_errors_and_keep_the_daemon_log_quiet() {
    let env = Env::new();
    let m = mounted_with_versions(&env, 1);
    let out = python(&format!(
        "import os, fcntl, termios\n\
         p = '{}'\n\
         res = []\n\
         for i in range(200):\n\
         \x20   try: os.setxattr(p, 'user.x', b'1')\n\
         \x20   except OSError as e: res.append(e.errno)\n\
         \x20   fd = os.open(p, os.O_RDONLY)\n\
         \x20   try: fcntl.ioctl(fd, termios.TCGETS, bytes(64))\n\
         \x20   except OSError as e: res.append(e.errno)\n\
         \x20   os.close(fd)\n\
         print(sorted(set(res)))",
        m.path("staging/f1.csv").display()
    ));
    assert_eq!(
        out.trim(),
        format!("[{}, {}]", libc::ENOTTY, libc::EOPNOTSUPP)
    );
    drop(m);
    // A second mount appends to the same log; neither wrote warnings for
    // those calls, nor terminal colour codes.
    let m = env.mount(&[]);
    drop(m);
    let log = env.mount(&[]).log();
    assert_eq!(log.matches("mounted ds at").count(), 3, "{log}");
    assert!(
        !log.contains("Not Implemented") && !log.contains("setxattr"),
        "{log}"
    );
    assert!(!log.contains('\x1b'), "{log:?}");
}

#[test]
fn the_first_dataset_of_a_new_local_store_creates_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let run = |store: &std::path::Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_detafs"))
            .env("HOME", dir.path().join("home"))
            .env("DETAFS_STORE", store)
            .env("DETAFS_CACHE", dir.path().join("cache"))
            .env("DETAFS_STAGING", dir.path().join("staging"))
            .args(args)
            .output()
            .unwrap()
    };
    let store = dir.path().join("new-store");
    let out = run(&store, &["dataset", "create", "weather"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("created store at"));
    assert_eq!(
        String::from_utf8_lossy(&run(&store, &["dataset", "list"]).stdout),
        "weather\n"
    );
    // Reading a store that is not there creates nothing.
    let missing = dir.path().join("typo");
    let out = run(&missing, &["log", "weather"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!missing.exists());
    // A folder of other files is not made a store.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let out = run(&other, &["dataset", "create", "weather"]);
    assert_eq!(out.status.code(), Some(1));
    let names: Vec<_> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"]);
}

#[test]
fn a_read_only_mount_beside_the_read_write_one_sees_its_commits() {
    if common::local_only(
        "it mounts the store itself beside a mount, which through a gateway is another host's",
    ) {
        return;
    }
    let env = Env::new();
    let rw = mounted_with_versions(&env, 1);
    let ro_dir = env.path("ro");
    std::fs::create_dir_all(&ro_dir).unwrap();
    env.ok(&[
        "mount",
        "ds",
        ro_dir.to_str().unwrap(),
        "--daemon",
        "--read-only",
        "--poll-interval",
        "200ms",
    ]);
    assert!(!ro_dir.join("staging").exists());
    std::fs::write(rw.path("staging/more.csv"), "x").unwrap();
    commit_via_control(&rw, "more").unwrap();
    common::within(
        std::time::Duration::from_secs(10),
        "v2 in the read-only mount",
        || ro_dir.join("versions/v2/more.csv").exists(),
    );
    // A second read-write mount is refused with its own reason alone.
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let (code, err) = env.fails(&["mount", "ds", other.to_str().unwrap(), "--daemon"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already mounted read-write at"), "{err}");
    assert!(err.contains(rw.dir.to_str().unwrap()), "names where: {err}");
    assert!(err.contains("--read-only"), "suggests --read-only: {err}");
    assert!(
        !err.contains("mounted ds at"),
        "earlier mounts' log lines: {err}"
    );
    env.ok(&["umount", ro_dir.to_str().unwrap()]);
}

#[test]
fn dataset_list_json_says_what_each_dataset_holds() {
    let env = Env::new();
    three_versions(&env);
    env.ok(&["tag", "ds", "v2", "mid"]);
    env.ok(&["dataset", "create", "empty"]);
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["dataset", "list", "--json"])).unwrap();
    let ds = list.iter().find(|d| d["name"] == "ds").unwrap();
    assert_eq!(
        (
            ds["versions"].as_u64(),
            ds["latest"].as_str(),
            ds["tags"].as_u64()
        ),
        (Some(3), Some("v3"), Some(1))
    );
    assert!(ds["stored_bytes"].as_u64().unwrap() > 0);
    assert_eq!(ds["latest_timestamp"], env.log()[2]["timestamp"]);
    let empty = list.iter().find(|d| d["name"] == "empty").unwrap();
    assert_eq!(
        (empty["versions"].as_u64(), empty["latest"].is_null()),
        (Some(0), true)
    );
}

#[test]
fn every_help_page_has_an_example_exit_codes_and_global_options_apart() {
    let env = Env::new();
    let commands = [
        "init", "commit", "tag", "log", "ls", "cat", "diff", "export", "verify", "gc", "reindex",
        "mount", "umount", "status", "restore", "checkout",
    ];
    let pages = commands
        .iter()
        .map(|c| vec![*c])
        .chain([vec!["dataset", "create"], vec!["dataset", "list"]]);
    for cmd in pages {
        let help = env.ok(&[cmd.as_slice(), &["--help"]].concat());
        let cmd = cmd.join(" ");
        assert!(help.contains("Exit codes:"), "{cmd}: {help}");
        assert!(help.contains("Example"), "{cmd}: {help}");
        let (own, global) = help
            .split_once("Global options:")
            .expect("a section of its own");
        assert!(
            !own.contains("--store <STORE>"),
            "{cmd}: global options mixed in"
        );
        assert!(global.contains("--store <STORE>"), "{cmd}");
    }
}

/// Counts what a library operation reports, as the CLI's bar draws it.
#[derive(Default)]
struct Steps(std::sync::Mutex<Vec<u64>>);

impl detafs::progress::Progress for Steps {
    fn advance(&self, done: u64) {
        self.0.lock().unwrap().push(done);
    }
}

/// The library opened in this process on `env`'s (local) store.
fn open_repo(env: &Env) -> detafs::repo::Repo {
    detafs::repo::Repo::open(&detafs::repo::Options {
        store: Some(env.store.clone()),
        cache_dir: Some(env.cache.clone()),
        cache_size: 1 << 30,
        cache_memory: None,
        store_timeout: std::time::Duration::from_secs(30),
        key_file: Some(env.key_file.clone()),
        passphrase: None,
        sse: None,
        object_lock: None,
        runtime: detafs::runtime::Runtime::new().unwrap(),
    })
    .unwrap()
}

#[test]
fn exporting_one_big_file_reports_progress_as_it_goes() {
    // The library is called in this process: a local store (the S3 run's
    // settings are the CLI's environment only).
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.bin"), common::noise(40 << 20, 7)).unwrap();
    std::fs::write(src.join("small.txt"), "s").unwrap();
    env.commit(&src, "big");
    let repo = open_repo(&env);
    let record = repo.version("ds", "latest").unwrap();
    let steps = Steps::default();
    let out = env.path("out");
    detafs::read::export(&repo, &record.tree, &out, Default::default(), &steps).unwrap();
    let steps = steps.0.into_inner().unwrap();
    assert_eq!(
        steps.iter().sum::<u64>(),
        (40 << 20) + 1,
        "every byte told once"
    );
    assert!(
        steps.len() > 10,
        "the big file in steps, not at its end: {}",
        steps.len()
    );
    assert_eq!(
        std::fs::read(out.join("big.bin")).unwrap(),
        std::fs::read(src.join("big.bin")).unwrap()
    );
}

#[test]
fn a_commit_stores_what_one_core_would() {
    // Chunks are hashed on several threads: the chunk list of a file of many
    // chunks (and of files around it) must be exactly what chunking and
    // hashing it on one thread gives.
    use detafs::snapshot::tree::TreeSource;
    use detafs::snapshot::{Node, chunker};
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let sizes = [(9 << 20, 1), (100, 2), (3 << 20, 3), (20_000, 4)];
    for (i, (len, seed)) in sizes.iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), common::noise(*len, *seed)).unwrap();
    }
    env.commit(&src, "v1");
    let repo = open_repo(&env);
    let record = repo.version("ds", "latest").unwrap();
    let tree = repo.tree(&record.tree).unwrap();
    for e in &tree.entries {
        let Node::File { chunks, .. } = &e.node else {
            panic!("not a file")
        };
        let path = src.join(String::from_utf8(e.name.clone()).unwrap());
        let file = std::fs::File::open(&path).unwrap();
        let one_core: Vec<_> = chunker::chunks(file, u64::MAX, repo.codec().chunker_seed())
            .map(|c| {
                let c = c.unwrap();
                (repo.codec().blob_id(&c), c.len() as u64)
            })
            .collect();
        let stored: Vec<_> = chunks.iter().map(|c| (c.id, c.data_size())).collect();
        assert_eq!(stored, one_core, "{path:?}");
    }
    assert!(tree.entries.len() == sizes.len());
}

#[test]
fn diff_u_is_a_patch_that_turns_one_version_into_the_other() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub dir")).unwrap();
    let rows = |n: usize, edit: usize| -> String {
        (0..n)
            .map(|i| match i == edit {
                true => format!("{i},edited\n"),
                false => format!("{i},{}\n", i * i),
            })
            .collect()
    };
    std::fs::write(src.join("big.csv"), rows(200, usize::MAX)).unwrap();
    std::fs::write(src.join("sub dir/notes.md"), "no newline at end").unwrap();
    std::fs::write(src.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(src.join("data.bin"), b"\x00\x01binary").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("big.csv"), rows(201, 100)).unwrap();
    std::fs::write(src.join("sub dir/notes.md"), "no newline at end\nnow one\n").unwrap();
    std::fs::remove_file(src.join("gone.txt")).unwrap();
    std::fs::write(src.join("new.txt"), "hello\n").unwrap();
    std::fs::write(src.join("data.bin"), b"\x00\x02binary").unwrap();
    env.commit(&src, "v2");

    let patch = env.ok(&["diff", "ds", "v1", "v2", "-u"]);
    // Names end with a tab and the time, as `diff -u` writes them.
    assert!(patch.contains("--- a/big.csv\t"), "{patch}");
    assert!(patch.contains("+++ b/big.csv\t"), "{patch}");
    assert!(patch.contains("-100,10000\n+100,edited\n"), "{patch}");
    assert!(patch.contains("\\ No newline at end of file"), "{patch}");
    assert!(
        patch.contains("Binary files a/data.bin and b/data.bin differ"),
        "{patch}"
    );
    // Only the hunks around the edits, not the whole file.
    assert!(!patch.contains(" 50,2500\n"), "{patch}");

    // Applied to an export of v1, the patch gives v2's text files.
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    let mut apply = Command::new("patch");
    apply.args(["-p1", "-s", "-d"]).arg(&out);
    apply.stdin(std::process::Stdio::piped());
    let mut child = apply.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(patch.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    for f in ["big.csv", "sub dir/notes.md", "new.txt"] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(!out.join("gone.txt").exists());
}

#[test]
fn diff_against_staging_shows_staged_changes_with_and_without_a_mount() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let st = |p: &str| m.path(&format!("staging/{p}"));
    std::fs::write(st("a.csv"), "changed\n").unwrap();
    std::fs::write(st("odd\nname\\.txt"), "odd\n").unwrap();
    std::fs::remove_file(st("c.csv")).unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/base")).unwrap(),
        "v2\n"
    );

    // Against its base, the same as status (escaped names included).
    let against_latest = env.ok(&["diff", "ds", "latest", "staging"]);
    assert_eq!(
        against_latest,
        "M a.csv\nD c.csv\nA odd\\nname\\\\.txt\n",
        "status: {:?}",
        status(&env)
    );
    // Against an older version: its own differences where staging did not
    // touch a path, staging's where it did.
    let against_v1 = env.ok(&["diff", "ds", "v1", "staging"]);
    assert_eq!(against_v1, "M a.csv\nD d/b.csv\nA odd\\nname\\\\.txt\n");
    assert_eq!(
        env.ok(&["diff", "ds", "staging", "v1"]),
        "M a.csv\nA d/b.csv\nD odd\\nname\\\\.txt\n"
    );
    let patch = env.ok(&["diff", "ds", "v1", "staging", "-u"]);
    assert!(patch.contains("--- a/a.csv\t"), "{patch}");
    assert!(
        patch.contains("-1\n\\ No newline at end of file\n+changed\n"),
        "{patch}"
    );
    let stat = env.ok(&["diff", "ds", "v2", "staging", "--stat"]);
    assert!(
        stat.ends_with(
            "3 files changed: 1 added, 1 modified, 1 removed, 0 in time only; +10 -1 bytes\n"
        ),
        "{stat}"
    );

    // A file put back as v1 has it (bytes, mode, time) is no longer a difference from v1.
    run_ok(
        Command::new("cp")
            .arg("-p")
            .arg(m.path("versions/v1/a.csv"))
            .arg(st("a.csv")),
    );
    assert_eq!(
        env.ok(&["diff", "ds", "v1", "staging"]),
        "D d/b.csv\nA odd\\nname\\\\.txt\n"
    );
    let through_mount = env.ok(&["diff", "ds", "v1", "staging", "-u"]);

    // Without a mount, read from staging itself: the same answers.
    drop(m);
    assert_eq!(
        env.ok(&["diff", "ds", "v1", "staging"]),
        "D d/b.csv\nA odd\\nname\\\\.txt\n"
    );
    assert_eq!(
        env.ok(&["diff", "ds", "v1", "staging", "-u"]),
        through_mount
    );
    let (code, err) = env.fails(&["diff", "ds", "staging", "staging"]);
    assert_eq!(code, 1);
    assert!(err.contains("version"), "{err}");
    // "staging" cannot be a tag: it would be ambiguous here.
    let (code, err) = env.fails(&["tag", "ds", "v1", "staging"]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn each_daemon_has_its_own_log_and_a_repeated_error_is_counted_not_repeated() {
    if common::local_only("it deletes the store's objects, which a gateway's host never sees") {
        return;
    }
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), common::noise(100_000, 1)).unwrap();
    env.commit(&src, "v1");
    let rw = env.mount(&[]);
    let ro = env.path("ro");
    std::fs::create_dir_all(&ro).unwrap();
    env.ok(&[
        "mount",
        "ds",
        ro.to_str().unwrap(),
        "--daemon",
        "--read-only",
    ]);
    // Trees in memory, then the file's data gone from store and cache:
    // every read of it fails, and would log the same error.
    for m in [rw.dir.as_path(), ro.as_path()] {
        assert!(m.join("versions/v1/a.csv").exists());
    }
    for (key, _) in env.objects.list("packs/") {
        env.objects.delete(&key);
    }
    std::fs::remove_dir_all(&env.cache).unwrap();
    for _ in 0..300 {
        assert!(std::fs::read(rw.path("versions/v1/a.csv")).is_err());
    }
    assert!(std::fs::read(ro.join("versions/v1/a.csv")).is_err());
    env.ok(&["umount", ro.to_str().unwrap()]);
    env.ok(&["umount", rw.dir.to_str().unwrap()]);
    common::within(std::time::Duration::from_secs(10), "daemon to exit", || {
        !rw.alive()
    });

    let log = rw.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 2, "written once, then counted: {log}");
    let counted: u64 = errors[1]
        .rsplit_once("[and ")
        .and_then(|(_, n)| n.strip_suffix(" more times]"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {log}"));
    assert!(counted >= 299, "{log}");
    // Lines carry their time; no colour codes.
    assert!(errors[0].starts_with("20"), "{log}");
    assert!(!log.contains('\x1b'), "{log}");
    // The read-only mount wrote its own file, beside.
    assert!(!log.contains(ro.to_str().unwrap()), "{log}");
    let dir = std::fs::read_dir(env.staging())
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("ds");
    let ro_logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("mount-ro-") && n.ends_with(".log"))
        .collect();
    assert_eq!(ro_logs.len(), 1, "{ro_logs:?}");
    let ro_log = std::fs::read_to_string(dir.join(&ro_logs[0])).unwrap();
    assert!(ro_log.contains(ro.to_str().unwrap()), "{ro_log}");
    assert!(ro_log.contains("ERROR"), "{ro_log}");
}

#[test]
fn a_commit_through_the_mount_tells_its_progress_to_other_shells() {
    let env = Env::new();
    // The commit is held once its data is read, before its record.
    let pending = common::Hold::new(&env, "staging-pending");
    let m = env.mount_failing(&[], &pending.spec);
    let progress = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(m.path(".detafs/progress")).unwrap()).unwrap()
    };
    assert_eq!(progress(), serde_json::json!({"committing": false}));
    std::fs::write(m.path("staging/big.bin"), common::noise(8 << 20, 7)).unwrap();
    std::fs::write(m.path("staging/small.csv"), "a,b\n").unwrap();
    let seen = std::thread::scope(|s| {
        let commit = s.spawn(|| commit_via_control(&m, "big one"));
        let mut seen = Vec::new();
        while !commit.is_finished() {
            seen.push(progress());
            // Released once a look at it while held is seen.
            if pending.is_held() && seen.last().is_some_and(|p| p["committing"] == true) {
                pending.release();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        commit.join().unwrap().unwrap();
        seen
    });
    let under_way: Vec<&serde_json::Value> =
        seen.iter().filter(|p| p["committing"] == true).collect();
    assert!(!under_way.is_empty(), "{seen:?}");
    let total = (8 << 20) + 4;
    let last = under_way.last().unwrap();
    assert_eq!(last["message"], "big one");
    assert_eq!(last["bytes_total"], total, "{last}");
    assert_eq!(last["bytes_done"], total, "{last}");
    assert_eq!(last["percent"], 100.0);
    let done: Vec<u64> = under_way
        .iter()
        .map(|p| p["bytes_done"].as_u64().unwrap())
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    assert_eq!(progress(), serde_json::json!({"committing": false}));

    // The CLI's commit through the mount reads it too (its bar is drawn on
    // a terminal only), and still says which version it made.
    std::fs::write(m.path("staging/more.csv"), "c,d\n").unwrap();
    assert_eq!(env.ok(&["commit", "ds", "-m", "more"]).trim(), "v2");
}

#[test]
fn a_deleted_dataset_is_hidden_at_once_kept_until_gc_and_its_name_stays_taken() {
    if common::local_only(
        "it deletes a dataset beside a mount, which through a gateway is another host's",
    ) {
        return;
    }
    let env = Env::new();
    env.ok(&["dataset", "create", "other"]);
    let src = two_versions(&env);
    std::fs::write(src.join("shared.bin"), common::noise(300_000, 3)).unwrap();
    env.ok(&[
        "commit",
        "other",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "o1",
    ]);
    std::fs::write(src.join("only-ds.bin"), common::noise(300_000, 4)).unwrap();
    env.commit(&src, "v3");

    // Refused while mounted, read-write or read-only, and while staging
    // holds changes: nothing is deleted.
    let m = env.mount(&[]);
    let (code, err) = env.fails(&["dataset", "delete", "ds"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("is mounted at") && err.contains("umount"),
        "{err}"
    );
    drop(m);
    let ro = env.path("ro");
    std::fs::create_dir_all(&ro).unwrap();
    env.ok(&[
        "mount",
        "ds",
        ro.to_str().unwrap(),
        "--daemon",
        "--read-only",
    ]);
    let (_, err) = env.fails(&["dataset", "delete", "ds"]);
    assert!(err.contains(ro.to_str().unwrap()), "{err}");
    env.ok(&["umount", ro.to_str().unwrap()]);
    env.ok(&["checkout", "ds", "v1", "a.csv"]);
    let (_, err) = env.fails(&["dataset", "delete", "ds"]);
    assert!(err.contains("restore"), "{err}");
    env.ok(&["restore", "ds"]);
    assert_eq!(env.ok(&["dataset", "list"]), "ds\nother\n");

    // Deleted: hidden from every command, its name still taken.
    env.ok(&["dataset", "delete", "ds"]);
    assert_eq!(env.ok(&["dataset", "list"]), "other\n");
    for args in [
        &["log", "ds"][..],
        &["cat", "ds", "v1", "a.csv"],
        &["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"],
        &["mount", "ds", ro.to_str().unwrap()],
        &["dataset", "create", "ds"],
        &["dataset", "delete", "ds"],
    ] {
        let (code, err) = env.fails(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("was deleted"), "{args:?}: {err}");
    }
    // Until gc could remove it, undelete brings it back whole (the test
    // environment lets gc use any grace: not here).
    run_ok(
        env.command()
            .env_remove("DETAFS_TEST_GC_MIN_GRACE")
            .args(["dataset", "undelete", "ds"]),
    );
    assert_eq!(env.log().len(), 3);
    assert_eq!(env.ok(&["cat", "ds", "v1", "d/b.csv"]), "2");
    env.ok(&["verify"]);

    // Deleted again, and past gc's grace: gc removes its versions and the
    // packs only it used; the other dataset's data stays.
    env.ok(&["dataset", "delete", "ds"]);
    // Its deletion's time (whole seconds) is past: gc with no grace takes it.
    common::next_second();
    let packs_before = env.objects.list("packs/").len();
    let gc = |dry: bool| {
        let mut c = env.command();
        c.env("DETAFS_TEST_GC_MIN_GRACE", "0s")
            .args(["gc", "--grace", "0s"]);
        if dry {
            c.arg("--dry-run");
        }
        run_ok(&mut c)
    };
    let planned = gc(true);
    assert!(planned.contains("datasets/ds/records/"), "{planned}");
    assert_eq!(env.objects.list("datasets/ds/records/").len(), 3);
    gc(false);
    assert!(env.objects.list("datasets/ds/records/").is_empty());
    assert!(env.objects.exists("datasets/ds/deleted.json"));
    assert!(env.objects.exists("datasets/ds/dataset.json"));
    assert!(env.objects.list("packs/").len() < packs_before);
    env.ok(&["verify"]);
    let shared = env.run(&["cat", "other", "v1", "shared.bin"]);
    assert!(shared.status.success());
    assert_eq!(shared.stdout, common::noise(300_000, 3));
    let (code, err) = env.fails(&["dataset", "undelete", "ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("gc"), "{err}");
    let (_, err) = env.fails(&["dataset", "create", "ds"]);
    assert!(err.contains("was deleted"), "{err}");
}

#[test]
fn a_mount_cannot_commit_to_a_dataset_another_host_deleted() {
    if common::local_only(
        "it deletes a dataset beside a mount, which through a gateway is another host's",
    ) {
        return;
    }
    let env = Env::new();
    let m = mounted_with_versions(&env, 1);
    // Another host's `dataset delete` (this host's would refuse: it mounts it).
    env.other_host().ok(&["dataset", "delete", "ds"]);
    std::fs::write(m.path("staging/late.csv"), "x").unwrap();
    assert!(commit_via_control(&m, "too late").is_err());
    let reason = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(reason.contains("was deleted"), "{reason}");
    assert_eq!(env.objects.list("datasets/ds/records/").len(), 1);
    // What it had stays readable, and the staged file stays staged.
    assert_eq!(
        std::fs::read_to_string(m.path("versions/v1/f1.csv")).unwrap(),
        "a,b\n1,1\n"
    );
    assert_eq!(
        std::fs::read_to_string(m.path("staging/late.csv")).unwrap(),
        "x"
    );
}

#[test]
fn a_renamed_dataset_keeps_every_version_and_tag_and_the_old_name_is_deleted() {
    if common::local_only(
        "it renames a dataset beside a mount, which through a gateway is another host's",
    ) {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    env.ok(&["tag", "ds", "v1", "first"]);
    env.ok(&["tag", "ds", "latest", "second"]);
    let before = env.log();
    let packs = env.objects.list("packs/");
    env.ok(&["dataset", "create", "taken"]);

    // Bad renames change nothing.
    let (code, err) = env.fails(&["dataset", "rename", "ds", "taken"]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    let (_, err) = env.fails(&["dataset", "rename", "ds", ".hidden"]);
    assert!(err.contains("invalid dataset name"), "{err}");
    let m = env.mount(&[]);
    let (_, err) = env.fails(&["dataset", "rename", "ds", "weather"]);
    assert!(err.contains("is mounted at"), "{err}");
    drop(m);
    assert_eq!(env.log(), before);
    assert!(!env.objects.exists("datasets/weather/dataset.json"));

    env.ok(&["dataset", "rename", "ds", "weather"]);
    assert_eq!(env.ok(&["dataset", "list"]), "taken\nweather\n");
    let renamed: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["log", "weather", "--json"])).unwrap();
    let old: Vec<serde_json::Value> = before.iter().rev().cloned().collect();
    for (a, b) in renamed.iter().zip(&old) {
        for field in [
            "version",
            "timestamp",
            "author",
            "message",
            "tags",
            "files_added",
        ] {
            assert_eq!(a[field], b[field], "{field}: {a} {b}");
        }
    }
    assert_eq!(renamed.len(), old.len());
    assert_eq!(env.ok(&["cat", "weather", "first", "d/b.csv"]), "2");
    assert_eq!(env.ok(&["cat", "weather", "second", "c.csv"]), "3");
    // No data moved; the records chain again, as verify checks.
    assert_eq!(env.objects.list("packs/"), packs);
    env.ok(&["verify"]);
    let (_, err) = env.fails(&["log", "ds"]);
    assert!(err.contains("renamed to weather"), "{err}");
    // A commit to the new name goes on from the last version.
    let src = env.path("more");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x.csv"), "x").unwrap();
    assert_eq!(
        env.ok(&[
            "commit",
            "weather",
            "--from",
            src.to_str().unwrap(),
            "-m",
            "more"
        ])
        .trim(),
        "v3"
    );
    env.ok(&["verify"]);
}

#[test]
fn commits_racing_a_rename_all_land_in_the_new_name_or_are_refused() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("n.txt"), "0").unwrap();
    env.commit(&src, "start");
    let landing = std::sync::atomic::AtomicUsize::new(0);
    let landed = std::thread::scope(|s| {
        let committer = s.spawn(|| {
            let mut landed = Vec::new();
            for i in 1..200 {
                let dir = env.path(&format!("c{i}"));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("n.txt"), i.to_string()).unwrap();
                let out = env.run(&[
                    "commit",
                    "ds",
                    "--from",
                    dir.to_str().unwrap(),
                    "-m",
                    &format!("c{i}"),
                ]);
                if !out.status.success() {
                    let err = String::from_utf8_lossy(&out.stderr).into_owned();
                    assert!(err.contains("was deleted"), "{err}");
                    break;
                }
                landed.push((i, String::from_utf8(out.stdout).unwrap().trim().to_string()));
                landing.store(landed.len(), std::sync::atomic::Ordering::Relaxed);
            }
            landed
        });
        // Renamed while commits keep coming, after the first landed.
        common::within(std::time::Duration::from_secs(60), "a commit", || {
            landing.load(std::sync::atomic::Ordering::Relaxed) > 0
        });
        env.ok(&["dataset", "rename", "ds", "new"]);
        committer.join().unwrap()
    });
    assert!(!landed.is_empty(), "no commit ran before the rename");
    // Every commit that said it made a version is in the new name, whole.
    for (i, version) in &landed {
        assert_eq!(
            env.ok(&["cat", "new", version, "n.txt"]),
            i.to_string(),
            "{version}"
        );
    }
    env.ok(&["verify"]);
}

#[test]
fn a_checkout_during_a_commit_leaves_the_commit_what_it_froze() {
    let env = Env::new();
    two_versions(&env);
    let pending = common::Hold::new(&env, "staging-pending");
    let m = env.mount_failing(&[], &pending.spec);
    std::fs::write(m.path("staging/a.csv"), "changed").unwrap();
    std::fs::write(m.path("staging/new.txt"), "n").unwrap();
    std::thread::scope(|s| {
        let commit = s.spawn(|| commit_via_control(&m, "while checking out"));
        // Staging frozen and read, the record not yet made.
        pending.reached();
        env.ok(&["checkout", "ds", "v1", "a.csv"]);
        pending.release();
        commit.join().unwrap().unwrap();
    });
    assert_eq!(env.ok(&["cat", "ds", "v3", "a.csv"]), "changed");
    assert_eq!(env.ok(&["cat", "ds", "v3", "new.txt"]), "n");
    // The checkout came after the freeze: staging keeps it for the next commit.
    assert_eq!(
        std::fs::read_to_string(m.path("staging/a.csv")).unwrap(),
        "1"
    );
    assert_eq!(status(&env), ["M a.csv"]);
}

#[test]
fn a_checkout_killed_before_it_lands_changes_nothing() {
    let env = Env::new();
    two_versions(&env);
    {
        let applied = common::Hold::new(&env, "checkout-applied");
        let m = env.mount_failing(&[], &applied.spec);
        std::fs::write(m.path("staging/a.csv"), "changed").unwrap();
        let order = m.path(".detafs/checkout");
        let writer = std::thread::spawn(move || {
            let _ = std::fs::write(order, "v1\n");
        });
        // Killed while held there, never released.
        applied.reached();
        m.kill();
        drop(m);
        writer.join().unwrap();
    }
    let m = env.mount(&[]);
    assert_eq!(
        std::fs::read_to_string(m.path("staging/a.csv")).unwrap(),
        "changed"
    );
    assert_eq!(
        std::fs::read_to_string(m.path("staging/c.csv")).unwrap(),
        "3"
    );
    assert_eq!(status(&env), ["M a.csv"]);
    // What it kept in the trash went with it: no entry, no files left.
    let entries = || -> Vec<serde_json::Value> {
        let listed: serde_json::Value =
            serde_json::from_str(&env.ok(&["trash", "ds", "--json"])).unwrap();
        listed["entries"].as_array().unwrap().clone()
    };
    assert!(entries().is_empty());
    let kept_dirs = || -> usize {
        std::fs::read_dir(env.staging())
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_dir(e.path().join("ds/trash")).ok())
            .map(|d| d.count())
            .sum()
    };
    assert_eq!(kept_dirs(), 0, "a killed checkout's kept files are swept");
    // And it works once the daemon is whole.
    env.ok(&["checkout", "ds", "v1"]);
    assert_eq!(status(&env), ["M a.csv", "D c.csv", "A d/b.csv"]);
    assert_eq!(entries().len(), 1);
    assert_eq!(kept_dirs(), 1);
}

/// A control file acts on its whole text, once: `printf 'v1\npath\n'` is
/// two writes from bash's builtin, and the request is both, taken when the
/// handle closes; staged work elsewhere stays. An invalid request changes
/// nothing.
#[test]
fn a_checkout_written_in_pieces_acts_once_on_the_whole_request() {
    use std::io::Write;
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let st = |p: &str| m.path(&format!("staging/{p}"));
    std::fs::write(st("never-committed.txt"), "work").unwrap();
    std::fs::write(st("c.csv"), "staged").unwrap();
    // Two writes through one handle, as bash's printf makes them.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path(".detafs/checkout"))
        .unwrap();
    f.write_all(b"v1\n").unwrap();
    f.write_all(b"d/b.csv\n").unwrap();
    // Nothing acted before the close (no process is started meanwhile:
    // the close of a copy of the descriptor, at its exec, is a close too).
    assert!(!st("d/b.csv").exists());
    drop(f);
    // What the daemon said, if the request did not act (seen once in CI).
    let told = || {
        let last = std::fs::read_to_string(m.path(".detafs/last-error"));
        format!("last-error: {last:?}; daemon log:\n{}", m.log())
    };
    let got = std::fs::read_to_string(st("d/b.csv"));
    assert_eq!(
        got.as_deref().ok(),
        Some("2"),
        "{got:?} after the close; {}",
        told()
    );
    assert_eq!(
        std::fs::read_to_string(st("never-committed.txt")).unwrap(),
        "work"
    );
    assert_eq!(std::fs::read_to_string(st("c.csv")).unwrap(), "staged");
    // The shell's own form, through bash's builtin printf.
    std::fs::remove_dir_all(st("d")).unwrap();
    run_ok(Command::new("bash").arg("-c").arg(format!(
        "printf 'v1\\nd/b.csv\\n' > {}",
        m.path(".detafs/checkout").display()
    )));
    assert_eq!(std::fs::read_to_string(st("d/b.csv")).unwrap(), "2");
    assert_eq!(
        std::fs::read_to_string(st("never-committed.txt")).unwrap(),
        "work"
    );
    // An invalid request (a path in neither) fails at close, changes nothing.
    let before = status(&env);
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "printf 'v1\\nno/such/path\\n' > {}",
            m.path(".detafs/checkout").display()
        ))
        .output()
        .unwrap();
    assert_eq!(status(&env), before);
    let why = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(why.contains("no/such/path"), "{why}");
    assert_eq!(
        std::fs::read_to_string(st("never-committed.txt")).unwrap(),
        "work"
    );
}

/// The CLI and a running mount see one staging: `detafs restore` and
/// `detafs checkout` act through the mount, and when they return a folder
/// that stays is there, with the inode it had (a shell or a notebook inside
/// it goes on working), and a file in it reads its new content at once.
#[test]
fn a_folder_that_stays_keeps_its_inode_through_restore_and_checkout() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let st = |p: &str| m.path(&format!("staging/{p}"));
    let ino = |p: &str| std::fs::metadata(st(p)).unwrap().ino();
    std::fs::create_dir_all(st("d/sub")).unwrap();
    std::fs::write(st("d/sub/x.csv"), "x").unwrap();
    std::fs::write(st("a.csv"), "changed").unwrap();
    let (root_d, a) = (ino("d"), ino("a.csv"));
    env.ok(&["restore", "ds"]);
    // At once, no wait: the folder that stays is there, the same inode.
    assert_eq!(ino("d"), root_d);
    assert_eq!(ino("a.csv"), a);
    assert_eq!(std::fs::read_to_string(st("a.csv")).unwrap(), "11");
    assert!(!st("d/sub").exists());
    assert_eq!(status(&env), Vec::<String>::new());
    // Checkout of v1: d stays (it holds b.csv again), a.csv stays.
    env.ok(&["checkout", "ds", "v1"]);
    assert_eq!(ino("d"), root_d);
    assert_eq!(ino("a.csv"), a);
    assert_eq!(std::fs::read_to_string(st("d/b.csv")).unwrap(), "2");
    assert_eq!(std::fs::read_to_string(st("a.csv")).unwrap(), "1");
    assert_eq!(status(&env), ["M a.csv", "D c.csv", "A d/b.csv"]);
    // And back: what status says is what a commit would record.
    env.ok(&["restore", "ds"]);
    assert_eq!(ino("d"), root_d);
    assert_eq!(status(&env), Vec::<String>::new());
    let (_, err) = env.fails(&["commit", "ds", "-m", "nothing"]);
    assert!(err.contains("nothing to commit"), "{err}");
}

/// `detafs commit` through a mount, interrupted (Ctrl-C): before the
/// commit's record the daemon cancels it (nothing committed, staging as
/// before, exit 130 saying so); past it, the CLI says which version landed.
#[test]
fn ctrl_c_of_a_commit_through_a_mount_cancels_it_or_says_what_landed() {
    if common::local_only("its hold point is on the store's own commit path") {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let committing = |m: &Mount| {
        serde_json::from_slice::<serde_json::Value>(
            &std::fs::read(m.path(".detafs/progress")).unwrap(),
        )
        .unwrap()["committing"]
            == true
    };
    let interrupt = |child: &std::process::Child| {
        assert!(common::signal(child.id(), libc::SIGINT));
    };
    {
        // Held once staging is frozen, before anything is read.
        let frozen = common::Hold::new(&env, "staging-frozen");
        let m = env.mount_failing(&[], &frozen.spec);
        std::fs::write(m.path("staging/new.csv"), "n").unwrap();
        let before = status(&env);
        let child = env
            .command()
            .args(["commit", "ds", "-m", "to cancel"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        frozen.reached();
        assert!(committing(&m));
        interrupt(&child);
        common::within(std::time::Duration::from_secs(10), "the cancel", || {
            serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(m.path(".detafs/progress")).unwrap(),
            )
            .unwrap()["cancelling"]
                == true
        });
        frozen.release();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{err}");
        assert!(err.contains("nothing was committed"), "{err}");
        assert_eq!(env.log().len(), 2);
        assert_eq!(status(&env), before);
        assert_eq!(
            std::fs::read_to_string(m.path("staging/new.csv")).unwrap(),
            "n"
        );
    }
    {
        // Held just after its record landed: too late to cancel.
        let recorded = common::Hold::new(&env, "after-record");
        let m = env.mount_failing(&[], &recorded.spec);
        let child = env
            .command()
            .args(["commit", "ds", "-m", "lands"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        recorded.reached();
        assert_eq!(env.log().len(), 3);
        interrupt(&child);
        common::within(std::time::Duration::from_secs(10), "the cancel", || {
            serde_json::from_slice::<serde_json::Value>(
                &std::fs::read(m.path(".detafs/progress")).unwrap(),
            )
            .unwrap()["cancelling"]
                == true
        });
        recorded.release();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("v3 was committed"), "{err}");
        assert_eq!(status(&env), Vec::<String>::new());
        drop(m);
    }
}

/// A new mount shows the latest base in staging before its first answer,
/// not one poll later: a version committed elsewhere while it was down is
/// what staging holds when the mount command returns.
#[test]
fn a_new_mount_shows_the_latest_version_in_staging_at_once() {
    let env = Env::new();
    let src = two_versions(&env);
    drop(env.mount(&[]));
    std::fs::write(src.join("a.csv"), "elsewhere").unwrap();
    env.other_host().commit(&src, "v3 from another host");
    let m = env.mount_with_poll(&[], "1h");
    assert_eq!(
        std::fs::read_to_string(m.path("staging/a.csv")).unwrap(),
        "elsewhere"
    );
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/base"))
            .unwrap()
            .trim(),
        "v3"
    );
}

/// The CLI and a running mount see one dataset: a `commit --from` or a
/// `tag` made beside a read-write mount shows there when the command
/// returns (the mount polls only hourly here), and a clean staging moves
/// onto the new version.
#[test]
fn a_commit_or_tag_beside_a_mount_shows_there_when_the_command_returns() {
    if common::local_only(
        "a command on the store's host tells that host's mounts of the store at once; a gateway's host learns at its poll",
    ) {
        return;
    }
    let env = Env::new();
    let src = two_versions(&env);
    let m = env.mount_with_poll(&[], "1h");
    std::fs::write(src.join("a.csv"), "beside").unwrap();
    assert_eq!(env.commit(&src, "v3 beside the mount"), "v3");
    assert_eq!(
        std::fs::read_to_string(m.path("versions/v3/a.csv")).unwrap(),
        "beside"
    );
    assert_eq!(
        std::fs::read_to_string(m.path("staging/a.csv")).unwrap(),
        "beside"
    );
    env.ok(&["tag", "ds", "v2", "reviewed"]);
    assert_eq!(
        std::fs::read_to_string(m.path("versions/reviewed/a.csv")).unwrap(),
        "11"
    );
}

/// A copy-up (the first write to a committed file) is written with
/// staging's lock let go: meanwhile `.detafs/status`, `.detafs/health` and
/// other staged files answer, and the appended file is whole afterwards.
#[test]
fn a_copy_up_never_holds_staging_for_the_rest_of_the_mount() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let big = common::noise(8 << 20, 3);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::fs::write(src.join("small.csv"), "a\n").unwrap();
    env.commit(&src, "v1");
    // The copy, once written, is held before it is published.
    let written = common::Hold::new(&env, "copy-up-written");
    let m = env.mount_failing(&[], &written.spec);
    let copying = || {
        common::files_under(&env.staging())
            .iter()
            .any(|p| p.to_string_lossy().contains(".copying-"))
    };
    std::thread::scope(|s| {
        let append = s.spawn(|| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(m.path("staging/big.bin"))
                .unwrap();
            f.write_all(b"tail").unwrap();
        });
        written.reached();
        assert!(copying());
        // Staging answers while the copy-up is under way.
        let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
        assert_eq!(status, "");
        std::fs::read(m.path(".detafs/health")).unwrap();
        assert_eq!(
            std::fs::read_to_string(m.path("staging/small.csv")).unwrap(),
            "a\n"
        );
        assert!(!append.is_finished(), "staging waited for the copy-up");
        written.release();
        append.join().unwrap();
    });
    let mut want = big.clone();
    want.extend_from_slice(b"tail");
    assert!(std::fs::read(m.path("staging/big.bin")).unwrap() == want);
    assert!(!copying());
    commit_via_control(&m, "appended").unwrap();
    assert!(std::fs::read(m.path("versions/v2/big.bin")).unwrap() == want);
}
