//! Real FUSE mounts in temporary directories: versions read back exactly with
//! ordinary tools, are read-only, staging takes what tools write and commits
//! atomically, and staged data survives a killed daemon.

mod common;

use common::{Env, Mount, commit_via_control, fingerprint, mounted_at, noise, run_ok, sample_tree};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Waits (up to 5 s) for `cond`.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    common::within(Duration::from_secs(5), what, cond);
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("operation should fail")
        .raw_os_error()
        .unwrap()
}

/// A fingerprint with mtimes cut to whole seconds.
fn to_seconds(fp: std::collections::BTreeMap<Vec<u8>, String>) -> Vec<(Vec<u8>, String)> {
    fp.into_iter()
        .map(|(k, v)| {
            let parts: Vec<String> = v
                .split(' ')
                .map(|w| {
                    if w.len() == 19 && w.bytes().all(|b| b.is_ascii_digit()) {
                        w[..10].to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect();
            (k, parts.join(" "))
        })
        .collect()
}

fn two_versions(env: &Env) -> (std::path::PathBuf, std::path::PathBuf) {
    let (a, b) = (env.path("src-v1"), env.path("src-v2"));
    sample_tree(&a, 1);
    env.commit(&a, "one");
    run_ok(Command::new("cp").arg("-a").arg(&a).arg(&b));
    std::fs::write(b.join("sub/big.bin"), noise(3_000_000, 2)).unwrap();
    std::fs::write(b.join("a.csv"), b"id,v\n1,2\n").unwrap();
    std::fs::remove_file(b.join("empty")).unwrap();
    env.commit(&b, "two");
    (a, b)
}

#[test]
fn versions_read_back_exactly_with_ordinary_tools() {
    let env = Env::new();
    let (a, b) = two_versions(&env);
    let m = env.mount(&[]);
    assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&a));
    assert_eq!(fingerprint(&m.path("versions/v2")), fingerprint(&b));
    assert_eq!(
        std::fs::read_link(m.path("versions/latest")).unwrap(),
        Path::new("v2")
    );

    let copy = env.path("cp-a");
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(m.path("versions/v1"))
            .arg(&copy),
    );
    assert_eq!(fingerprint(&copy), fingerprint(&a));
    let synced = env.path("rsync");
    run_ok(
        Command::new("rsync")
            .arg("-a")
            .arg(format!("{}/", m.path("versions/v2").display()))
            .arg(&synced),
    );
    // rsync and tar (gnu format) keep whole seconds of mtimes.
    assert_eq!(
        to_seconds(fingerprint(&synced)),
        to_seconds(fingerprint(&b))
    );
    run_ok(
        Command::new("diff")
            .arg("-r")
            .arg(m.path("versions/v1"))
            .arg(&a),
    );
    let tarball = env.path("v1.tar");
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(m.path("versions/v1"))
            .arg("-cf")
            .arg(&tarball)
            .arg("."),
    );
    let untar = env.path("untar");
    std::fs::create_dir_all(&untar).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&untar)
            .arg("-xf")
            .arg(&tarball),
    );
    assert_eq!(to_seconds(fingerprint(&untar)), to_seconds(fingerprint(&a)));
    let found = run_ok(
        Command::new("find")
            .arg(m.path("versions/v1"))
            .arg("-type")
            .arg("f"),
    );
    assert_eq!(found.lines().count(), 6);
    let sums = run_ok(Command::new("sha256sum").arg(m.path("versions/v2/sub/big.bin")));
    let want = run_ok(Command::new("sha256sum").arg(b.join("sub/big.bin")));
    assert_eq!(sums.split(' ').next(), want.split(' ').next());
    assert!(m.alive());
}

#[test]
fn versions_are_read_only() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let f = m.path("versions/v1/a.csv");
    let erofs = libc::EROFS;
    assert_eq!(
        errno_of(std::fs::OpenOptions::new().write(true).open(&f)),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::write(m.path("versions/v1/new.txt"), b"x")),
        erofs
    );
    assert_eq!(errno_of(std::fs::remove_file(&f)), erofs);
    assert_eq!(
        errno_of(std::fs::create_dir(m.path("versions/v1/d"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::rename(&f, m.path("versions/v1/b.csv"))),
        erofs
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        errno_of(std::fs::set_permissions(
            &f,
            std::fs::Permissions::from_mode(0o600)
        )),
        erofs
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("x", m.path("versions/v1/l"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::remove_dir(m.path("versions/v1/empty-dir"))),
        erofs
    );
    assert_eq!(errno_of(std::fs::write(m.path("versions/v3"), b"x")), erofs);
    // What staging refuses as unsupported (EPERM, EOPNOTSUPP) is EROFS in
    // versions/, in either order (the kernel must not learn "unsupported"
    // for the whole mount).
    let errno = |r: Result<(), rustix::io::Errno>| r.err().map_or(0, |e| e.raw_os_error());
    let setxattr = |p: &std::path::Path| {
        errno(rustix::fs::setxattr(
            p,
            "user.x",
            b"1",
            rustix::fs::XattrFlags::empty(),
        ))
    };
    let removexattr = |p: &std::path::Path| errno(rustix::fs::removexattr(p, "user.x"));
    let mkfifo = |p: &std::path::Path| {
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        nix::unistd::mkfifo(p, mode).err().map_or(0, |e| e as i32)
    };
    let staged = m.path("staging/a.csv");
    for _ in 0..2 {
        assert_eq!(setxattr(&staged), libc::EOPNOTSUPP);
        assert_eq!(removexattr(&staged), libc::EOPNOTSUPP);
        assert_eq!(setxattr(&f), erofs);
        assert_eq!(removexattr(&f), erofs);
        assert_eq!(setxattr(&m.path("versions/v1")), erofs);
    }
    assert_eq!(mkfifo(&m.path("versions/v1/fifo")), erofs);
    assert_eq!(
        errno_of(std::fs::hard_link(&f, m.path("versions/v1/new-link"))),
        erofs
    );
    // A versions/ file has no name to gain in staging: where versions/ is
    // a file system of its own (its own connection) the kernel says so,
    // else the mount (links are not kept in staging).
    let own = health(&m).contains("\"versions_connection\": \"own\"");
    assert_eq!(
        errno_of(std::fs::hard_link(&f, m.path("staging/new-link"))),
        if own { libc::EXDEV } else { libc::EPERM }
    );
    assert!(!m.path("staging/new-link").exists());
}

#[test]
fn staging_commits_through_control_file_and_cli() {
    if common::local_only("the store's own CLI commits the store's staging, not a gateway host's") {
        return;
    }
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let m = env.mount(&[]);
    // Staging starts as a view of the latest version.
    assert_eq!(fingerprint(&m.path("staging")), fingerprint(&b));
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );

    let tree = env.path("incoming");
    sample_tree(&tree, 7);
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(m.path("staging/incoming")),
    );
    // Editor-style save: write a temp file, rename it over the original.
    std::fs::write(m.path("staging/a.csv.tmp"), b"id,v\n9,9\n").unwrap();
    std::fs::rename(m.path("staging/a.csv.tmp"), m.path("staging/a.csv")).unwrap();
    // Moves across directories, deletes.
    std::fs::rename(
        m.path("staging/sub/deeper/note.txt"),
        m.path("staging/moved-note.txt"),
    )
    .unwrap();
    std::fs::remove_dir_all(m.path("staging/empty-dir")).unwrap();
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert!(status.contains("M a.csv\n"), "{status}");
    assert!(status.contains("A moved-note.txt\n"), "{status}");
    assert!(status.contains("D sub/deeper/note.txt\n"), "{status}");
    assert!(status.contains("A incoming/sub/big.bin\n"), "{status}");
    let expected = fingerprint(&m.path("staging"));

    commit_via_control(&m, "from the mount\n").unwrap();
    // Durable when the write returns: the version is in the store already.
    let log = env.log();
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["message"], "from the mount");
    let export = env.path("export3");
    env.ok(&["export", "ds", "v3", export.to_str().unwrap()]);
    assert_eq!(fingerprint(&export), expected);
    eventually("v3 in versions/", || m.path("versions/v3").exists());
    assert_eq!(fingerprint(&m.path("versions/v3")), expected);
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "",
        "clean after commit"
    );
    assert_eq!(fingerprint(&m.path("staging")), expected);

    // Nothing staged: the commit fails with ENODATA and says why.
    assert_eq!(errno_of(commit_via_control(&m, "again")), libc::ENODATA);
    let why = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(why.contains("nothing to commit"), "{why}");
    assert_eq!(errno_of(commit_via_control(&m, "   ")), libc::EINVAL);

    // From another shell, with the mount up: the CLI commits through it.
    std::fs::write(m.path("staging/cli.txt"), b"cli").unwrap();
    let v = env.ok(&["commit", "ds", "-m", "from the cli"]);
    assert_eq!(v.trim(), "v4");
    assert_eq!(env.ok(&["cat", "ds", "v4", "cli.txt"]), "cli");
    assert_eq!(env.ok(&["status", "ds"]), "");
    let log = env.log();
    assert_eq!(log[3]["files_added"], 1);
    assert!(m.alive());
}

#[test]
fn cli_commits_staging_without_a_mount_and_the_mount_sees_it() {
    if common::local_only("the store's own CLI commits the store's staging, not a gateway host's") {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    {
        let m = env.mount(&[]);
        std::fs::write(m.path("staging/offline.txt"), b"staged while mounted").unwrap();
    }
    // Mount gone: the CLI commits the same staging directly.
    assert_eq!(env.ok(&["status", "ds"]), "A offline.txt\n");
    assert_eq!(env.ok(&["commit", "ds", "-m", "no mount"]).trim(), "v3");
    assert_eq!(
        env.ok(&["cat", "ds", "v3", "offline.txt"]),
        "staged while mounted"
    );
    let m = env.mount(&[]);
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    // A version committed elsewhere appears without remounting, and clean
    // staging follows it.
    let other = env.path("other");
    env.ok(&["export", "ds", "v3", other.to_str().unwrap()]);
    std::fs::write(other.join("elsewhere.txt"), b"hi").unwrap();
    env.commit(&other, "elsewhere");
    eventually("v4 in versions/", || {
        m.path("versions/v4/elsewhere.txt").exists()
    });
    eventually("staging follows v4", || {
        m.path("staging/elsewhere.txt").exists()
    });
    assert_eq!(
        std::fs::read_link(m.path("versions/latest")).unwrap(),
        Path::new("v4")
    );
}

#[test]
fn sqlite_database_in_staging_is_committed_and_readable_from_versions() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let db = m.path("staging/data.db");
    run_ok(
        Command::new("sqlite3")
            .arg(&db)
            .arg("create table t(x); insert into t values (1), (2);"),
    );
    run_ok(
        Command::new("sqlite3")
            .arg(&db)
            .arg("insert into t values (3); update t set x = x * 10;"),
    );
    commit_via_control(&m, "sqlite").unwrap();
    eventually("v3", || m.path("versions/v3/data.db").exists());
    let uri = format!(
        "file:{}?immutable=1",
        m.path("versions/v3/data.db").display()
    );
    let sum = run_ok(
        Command::new("sqlite3")
            .arg(&uri)
            .arg("select sum(x) from t;"),
    );
    assert_eq!(sum.trim(), "60");
}

#[test]
fn staging_survives_a_killed_daemon_and_a_remount() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/precious.bin"), noise(2_000_000, 5)).unwrap();
    std::fs::write(m.path("staging/a.csv"), b"changed\n").unwrap();
    std::fs::remove_file(m.path("staging/run.sh")).unwrap();
    let before = fingerprint(&m.path("staging"));
    m.kill();
    drop(m);
    let m = env.mount(&[]);
    assert_eq!(fingerprint(&m.path("staging")), before);
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, "M a.csv\nA precious.bin\nD run.sh\n");
    commit_via_control(&m, "after crash").unwrap();
    assert_eq!(env.ok(&["cat", "ds", "v3", "a.csv"]), "changed\n");
}

#[test]
fn file_open_for_writing_at_commit_time() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let mut f = std::fs::File::create(m.path("staging/log.txt")).unwrap();
    f.write_all(b"first part\n").unwrap();
    commit_via_control(&m, "while open").unwrap();
    f.write_all(b"second part\n").unwrap();
    drop(f);
    // The commit took the content as it was; the later write stays staged.
    assert_eq!(env.ok(&["cat", "ds", "v3", "log.txt"]), "first part\n");
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "M log.txt\n"
    );
    commit_via_control(&m, "after close").unwrap();
    assert_eq!(
        env.ok(&["cat", "ds", "v4", "log.txt"]),
        "first part\nsecond part\n"
    );
}

#[test]
fn a_file_opened_for_append_while_a_commit_starts_loses_no_write() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.log"), noise(200 << 20, 3)).unwrap();
    env.commit(&src, "a big log");
    // The commit is held once it froze staging and reads a staged copy:
    // half the lines are appended before it starts, half while it runs.
    let hold = common::Hold::new(&env, "staged-copy-read");
    let m = env.mount_failing(&[], &hold.spec);
    std::fs::write(m.path("staging/other.txt"), b"something to commit").unwrap();
    let log = m.path("staging/big.log");
    // The open copies 200 MiB up to staging.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    for i in 0..1000 {
        writeln!(f, "line {i}").unwrap();
    }
    std::thread::scope(|s| {
        let committing = s.spawn(|| commit_via_control(&m, "while appending"));
        hold.reached();
        for i in 1000..2000 {
            writeln!(f, "line {i}").unwrap();
        }
        f.sync_all().unwrap();
        hold.release();
        committing.join().unwrap().unwrap();
    });
    drop(f);
    // Every appended line is in staging, after the bytes the version took
    // (all of them, if the commit read the file after the last append).
    let staged = std::fs::read(&log).unwrap();
    let lines: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    assert!(staged.ends_with(lines.as_bytes()), "appended lines lost");
    assert_eq!(staged.len(), (200 << 20) + lines.len());
    let committed = std::fs::read(m.path("versions/v2/big.log")).unwrap();
    assert!(staged.starts_with(&committed));
    match commit_via_control(&m, "after") {
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => assert_eq!(committed, staged),
        other => other.unwrap(),
    }
    let latest = format!("v{}", env.log().len());
    assert_eq!(env.run(&["cat", "ds", &latest, "big.log"]).stdout, staged);
}

/// v1 holds `gone/deeper/z` and `keep`; the mount's staging has listed
/// (expanded) `gone`. `meanwhile` runs before another host commits v2
/// without `gone`.
fn folder_listed_then_removed_elsewhere<'e>(
    env: &'e Env,
    meanwhile: impl FnOnce(&Mount),
) -> Mount<'e> {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("gone/deeper")).unwrap();
    std::fs::write(src.join("gone/deeper/z"), b"z").unwrap();
    std::fs::write(src.join("keep"), b"k").unwrap();
    env.commit(&src, "one");
    let m = env.mount(&[]);
    run_ok(Command::new("ls").arg("-R").arg(m.path("staging")));
    meanwhile(&m);
    std::fs::remove_dir_all(src.join("gone")).unwrap();
    env.other_host().commit(&src, "two, elsewhere");
    m
}

#[test]
fn a_folder_removed_elsewhere_does_not_come_back_after_it_was_listed() {
    let env = Env::new();
    let m = folder_listed_then_removed_elsewhere(&env, |m| {
        std::fs::write(m.path("staging/mine.txt"), b"my own").unwrap();
    });
    // The commit is rebased onto v2; staging then shows v3, clean.
    commit_via_control(&m, "mine").unwrap();
    assert_eq!(env.log().len(), 3);
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert!(!m.path("staging/gone").exists());
    let out = env.path("v3");
    env.ok(&["export", "ds", "v3", out.to_str().unwrap()]);
    let mut names: Vec<String> = common::files_under(&out)
        .iter()
        .map(|p| p.strip_prefix(&out).unwrap().display().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["keep", "mine.txt"],
        "nothing the other commit removed came back"
    );
}

#[test]
fn a_listed_folder_removed_elsewhere_leaves_clean_staging() {
    let env = Env::new();
    let m = folder_listed_then_removed_elsewhere(&env, |_| {});
    eventually("staging follows v2", || !m.path("staging/gone").exists());
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
}

/// What the daemon keeps in memory is one budget, told by
/// `.detafs/health`: the version inodes a walk made, the trees within
/// what the budget leaves them, the process's memory beside.
#[test]
fn health_tells_what_the_memory_budget_holds() {
    let env = Env::new();
    let (a, b) = two_versions(&env);
    let m = env.mount(&["--cache-memory", "16MiB"]);
    assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&a));
    assert_eq!(fingerprint(&m.path("versions/v2")), fingerprint(&b));
    let h: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap();
    let memory = &h["memory"];
    let part = |k: &str| {
        memory[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {memory}"))
    };
    assert_eq!(part("budget"), 16 << 20, "{memory}");
    assert!(
        part("inodes") >= 48 * h["version_inodes"].as_u64().unwrap(),
        "{memory}"
    );
    let kept = part("trees") + part("listings") + part("chunks");
    assert!(
        part("trees") > 0 && kept + part("inodes") <= 16 << 20,
        "{memory}"
    );
    assert!(
        part("resident") > 0 && part("peak") >= part("resident"),
        "{memory}"
    );
}

#[test]
fn inodes_the_kernel_forgets_are_freed_and_everything_still_reads() {
    let env = Env::new();
    let (a, b) = two_versions(&env);
    let m = env.mount(&[]);
    assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&a));
    assert_eq!(fingerprint(&m.path("versions/v2")), fingerprint(&b));
    let held = || {
        let h: serde_json::Value =
            serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap();
        h["version_inodes"].as_u64().unwrap()
    };
    let before = held();
    assert!(before > 10, "{before}");
    // Dropping the kernel's dentry and inode caches makes it send FORGETs.
    common::within(Duration::from_secs(20), "inodes forgotten", || {
        std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        held() < before / 2
    });
    eprintln!("version inodes: {before} -> {}", held());
    // Everything is found and read again, byte for byte, listings included,
    // also while the kernel keeps forgetting.
    let stop = std::sync::atomic::AtomicBool::new(false);
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        // Stops the thread above also when an assertion fails.
        let _stop = Stop(&stop);
        for _ in 0..20 {
            assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&a));
            assert_eq!(fingerprint(&m.path("versions/v2")), fingerprint(&b));
            run_ok(Command::new("ls").arg("-lR").arg(m.path("versions")));
        }
    });
    assert!(m.alive());
}

#[test]
fn a_file_written_back_to_its_committed_bytes_leaves_status_clean_after_commit() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let staged = m.path("staging/a.csv");
    let committed = std::fs::read(&staged).unwrap();
    let mtime = std::fs::metadata(&staged).unwrap().modified().unwrap();
    std::fs::write(&staged, b"changed").unwrap();
    std::fs::write(&staged, &committed).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&staged)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    // Status compares content: the file is as committed, so it is clean.
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    // Nothing to commit, and staging is a clean view of v2 again.
    let err = commit_via_control(&m, "nothing").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENODATA));
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert_eq!(std::fs::read(&staged).unwrap(), committed);
}

#[test]
fn readers_of_versions_never_wait_behind_a_commit() {
    let env = Env::new();
    two_versions(&env);
    // The commit is held once it has read the staged file.
    let hold = common::Hold::new(&env, "staged-copy-read");
    let m = env.mount_failing(&[], &hold.spec);
    std::fs::write(m.path("staging/huge.bin"), noise(300 << 20, 9)).unwrap();
    std::thread::scope(|s| {
        let committing = s.spawn(|| commit_via_control(&m, "a big one"));
        hold.reached();
        // `ls -l` of the root (which shows staging) and a reader of
        // versions/ are answered while the commit is under way.
        run_ok(Command::new("ls").arg("-l").arg(&m.dir));
        let missing = std::fs::metadata(m.path("versions/v1/not-here")).unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        assert!(
            !committing.is_finished(),
            "the readers waited for the commit"
        );
        hold.release();
        committing.join().unwrap().unwrap();
    });
    assert_eq!(env.log().len(), 3);
}

/// Staging is used all through a large commit. Each change made meanwhile
/// is either in the version (it came before the freeze, or before its file
/// was read) or still staged afterwards, never lost; staging ends with
/// every change.
#[test]
fn staging_stays_usable_and_loses_nothing_during_a_commit() {
    let env = Env::new();
    two_versions(&env);
    // The commit is held once it has read its first staged file.
    let hold = common::Hold::new(&env, "staged-copy-read");
    let m = env.mount_failing(&[], &hold.spec);
    let st = |p: &str| m.path(&format!("staging/{p}"));
    std::fs::write(st("huge.bin"), noise(300 << 20, 9)).unwrap();
    std::fs::write(st("doomed.txt"), b"removed during the commit").unwrap();
    std::fs::write(st("moved.txt"), b"renamed during the commit").unwrap();
    std::fs::write(st("grown.txt"), b"before").unwrap();
    std::thread::scope(|s| {
        let committing = s.spawn(|| commit_via_control(&m, "a big one"));
        hold.reached();
        std::fs::write(st("new.txt"), b"made during the commit").unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(st("grown.txt"))
            .unwrap();
        f.write_all(b" and after").unwrap();
        drop(f);
        std::fs::remove_file(st("doomed.txt")).unwrap();
        std::fs::rename(st("moved.txt"), st("renamed.txt")).unwrap();
        run_ok(Command::new("ls").arg("-lR").arg(m.path("staging")));
        assert!(!committing.is_finished(), "staging waited for the commit");
        hold.release();
        committing.join().unwrap().unwrap();
    });
    assert_eq!(env.log().len(), 3);
    // Staging holds every change.
    assert_eq!(std::fs::read(st("grown.txt")).unwrap(), b"before and after");
    assert_eq!(
        std::fs::read(st("new.txt")).unwrap(),
        b"made during the commit"
    );
    assert!(!st("doomed.txt").exists() && !st("moved.txt").exists());
    assert_eq!(
        std::fs::read(st("renamed.txt")).unwrap(),
        b"renamed during the commit"
    );
    // The version holds staging as it was at the freeze or when each file
    // was read; what it lacks is still staged, so status names it.
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    let listed = |line: &str| status.lines().any(|l| l == line);
    let v3 = |p: &str| std::fs::read(m.path(&format!("versions/v3/{p}"))).ok();
    assert_eq!(v3("huge.bin").unwrap().len(), 300 << 20);
    let grown = v3("grown.txt").unwrap();
    assert!(
        grown == b"before" || grown == b"before and after",
        "{grown:?}"
    );
    assert_eq!(listed("M grown.txt"), grown == b"before", "{status}");
    assert_eq!(listed("A new.txt"), v3("new.txt").is_none(), "{status}");
    assert_eq!(
        listed("D doomed.txt"),
        v3("doomed.txt").is_some(),
        "{status}"
    );
    assert_eq!(
        listed("A renamed.txt"),
        v3("renamed.txt").is_none(),
        "{status}"
    );
    if let Some(d) = v3("doomed.txt") {
        assert_eq!(d, b"removed during the commit");
    }
    // Committing again makes the version equal staging.
    commit_via_control(&m, "the rest").unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert_eq!(
        env.ok(&["cat", "ds", "v4", "grown.txt"]),
        "before and after"
    );
    assert!(!env.run(&["cat", "ds", "v4", "doomed.txt"]).status.success());
}

#[test]
fn a_staged_row_without_its_data_is_repaired_and_named() {
    if common::local_only("it edits staging by hand, which a gateway's host keeps sealed") {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/new.txt"), b"lost in the crash").unwrap();
    std::fs::write(m.path("staging/kept.txt"), b"kept").unwrap();
    let pid = m.pid;
    drop(m);
    common::within(Duration::from_secs(10), "the daemon's end", || {
        common::gone(pid)
    });
    // The state a crash between a new file's row and its file leaves.
    let data = common::files_under(&env.staging())
        .into_iter()
        .find(|p| std::fs::read(p).is_ok_and(|d| d == b"lost in the crash"))
        .unwrap();
    std::fs::remove_file(data).unwrap();
    let m = env.mount(&[]);
    assert_eq!(std::fs::read(m.path("staging/new.txt")).unwrap(), b"");
    assert_eq!(std::fs::read(m.path("staging/kept.txt")).unwrap(), b"kept");
    assert!(
        m.log().contains("new.txt had no staged data"),
        "{}",
        m.log()
    );
    commit_via_control(&m, "after the crash").unwrap();
    assert_eq!(env.ok(&["cat", "ds", "v3", "kept.txt"]), "kept");
}

#[test]
fn a_full_staging_disk_is_enospc_not_eio() {
    let env = Env::new();
    two_versions(&env);
    let _tmpfs = common::Tmpfs::mount(&env.staging(), "16m");
    {
        let m = env.mount(&[]);
        let mut f = std::fs::File::create(m.path("staging/huge.bin")).unwrap();
        let err = (0..64)
            .find_map(|_| {
                f.write_all(&[7u8; 256 << 10])
                    .and_then(|_| f.sync_all())
                    .err()
            })
            .expect("the disk fills up");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        drop(f);
        // So are changes that need room in staging's database.
        let mut filler = 0;
        let err = loop {
            filler += 1;
            let name = format!("staging/{}-{filler}", "n".repeat(200));
            if let Err(e) = std::fs::create_dir(m.path(&name)) {
                break e;
            }
            assert!(filler < 100_000);
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        // Space can be freed through the mount, and then used again.
        std::fs::remove_file(m.path("staging/huge.bin")).unwrap();
        for i in 1..filler {
            let name = format!("staging/{}-{i}", "n".repeat(200));
            std::fs::remove_dir(m.path(&name)).unwrap();
        }
        std::fs::write(m.path("staging/small.txt"), vec![1u8; 1 << 20]).unwrap();
        // (Whether the database needed the reserve for that depends on the
        // room left in its pages; the reserve is there when it does.)
        assert!(m.alive());
        // Versions are still served.
        assert!(std::fs::read(m.path("versions/v1/a.csv")).is_ok());
    }
}

#[test]
fn a_staging_row_that_does_not_decode_is_named() {
    if common::local_only(
        "it edits staging's database by hand, which a gateway's host keeps sealed",
    ) {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let pid = {
        let m = env.mount(&[]);
        std::fs::write(m.path("staging/odd.txt"), b"x").unwrap();
        m.pid
    };
    common::within(Duration::from_secs(10), "the daemon's end", || {
        common::gone(pid)
    });
    let db = common::files_under(&env.staging())
        .into_iter()
        .find(|p| p.ends_with("staging.sqlite"))
        .unwrap();
    run_ok(
        Command::new("sqlite3")
            .arg(&db)
            .arg("UPDATE nodes SET kind = 7 WHERE name = CAST('odd.txt' AS BLOB)"),
    );
    let out = env.run(&["status", "ds"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("staging row") && err.contains("unknown node kind 7"),
        "{err}"
    );
}

#[test]
fn concurrent_readers_of_two_versions() {
    let env = Env::new();
    let (a, b) = two_versions(&env);
    let m = env.mount(&[]);
    let files = [
        ("versions/v1/sub/big.bin", a.join("sub/big.bin")),
        ("versions/v2/sub/big.bin", b.join("sub/big.bin")),
    ];
    std::thread::scope(|s| {
        for i in 0..6 {
            let (mounted, original) = &files[i % 2];
            let path = m.path(mounted);
            s.spawn(move || {
                let mut got = Vec::new();
                std::fs::File::open(&path)
                    .unwrap()
                    .read_to_end(&mut got)
                    .unwrap();
                assert!(got == std::fs::read(original).unwrap(), "{mounted} differs");
            });
        }
    });
}

#[test]
fn a_corrupt_object_is_eio_for_that_file_only_and_logged() {
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let pack = env.objects.largest("packs"); // v2's big.bin
    let mut bytes = env.objects.read(&pack);
    let n = bytes.len() / 2;
    bytes[n] ^= 1;
    env.objects.write(&pack, bytes);
    let m = env.mount(&[]);
    let res = std::fs::read(m.path("versions/v2/sub/big.bin"));
    assert_eq!(errno_of(res), libc::EIO);
    assert_eq!(
        std::fs::read(m.path("versions/v2/a.csv")).unwrap(),
        std::fs::read(b.join("a.csv")).unwrap()
    );
    assert!(m.alive());
    let log = m.log();
    let pack_name = pack.rsplit('/').next().unwrap();
    assert!(
        log.contains("versions/v2/sub/big.bin")
            && log.contains("corrupt")
            && log.contains(pack_name),
        "daemon log: {log}"
    );
}

#[test]
fn read_only_mount_has_no_staging() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&["--read-only"]);
    assert!(m.path("versions/v1/a.csv").exists());
    assert!(!m.path("staging").exists());
    assert_eq!(errno_of(commit_via_control(&m, "x")), libc::EROFS);
}

#[test]
fn a_read_only_mount_lets_the_kernel_open_files_and_keeps_control_files_fresh() {
    // No open decides anything there: the kernel opens files itself (no
    // OPEN or RELEASE round trip), and reads come without a handle.
    // Through a gateway an open leases its version: opens are seen.
    let env = Env::new();
    let (a, b) = two_versions(&env);
    let m = env.mount(&["--read-only"]);
    let want = [(&a, "v1"), (&b, "v2")];
    std::thread::scope(|s| {
        for t in 0..4 {
            let (m, want) = (&m, &want);
            s.spawn(move || {
                for round in 0..3 {
                    for (src, v) in want {
                        let got = fingerprint(&m.path(&format!("versions/{v}")));
                        assert_eq!(got, fingerprint(src), "{t} {round} {v}");
                    }
                }
            });
        }
    });
    let health = std::fs::read(m.path(".detafs/health")).unwrap();
    let health: serde_json::Value = serde_json::from_slice(&health).unwrap();
    let through_gateway = common::mounts_through_gateway();
    assert_eq!(health["opens_skipped"], !through_gateway, "{health}");
    // Control files read what is so now, not what the kernel kept.
    let log = || std::fs::read_to_string(m.path(".detafs/log")).unwrap();
    assert_eq!(log().lines().count(), 2);
    let c = env.path("src-v3");
    run_ok(Command::new("cp").arg("-a").arg(&b).arg(&c));
    std::fs::write(c.join("new.txt"), "three\n").unwrap();
    env.commit(&c, "three");
    common::within(Duration::from_secs(10), "v3 in the log", || {
        log().lines().count() == 3
    });
    assert_eq!(
        std::fs::read(m.path("versions/v3/new.txt")).unwrap(),
        b"three\n"
    );
    // Nothing is written, whatever the kernel opened.
    let write = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("versions/v1/a.csv"));
    assert_eq!(errno_of(write), libc::EROFS);
    assert_eq!(errno_of(commit_via_control(&m, "x")), libc::EROFS);
}

#[test]
fn a_read_only_mount_lists_directories_it_did_not_open_as_versions_and_tags_come() {
    // There the kernel opens directories itself and keeps their listings:
    // `versions/`' must still show each version and tag once, also while
    // they come, in listings read in several requests.
    let env = Env::new();
    let (a, b) = two_versions(&env);
    const TAGS: usize = 250;
    for i in 0..TAGS {
        env.ok(&["tag", "ds", "v1", &format!("t{i:03}")]);
    }
    let m = env.mount(&["--read-only"]);
    let list = |m: &Mount| -> Vec<String> {
        std::fs::read_dir(m.path("versions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let all = |tags: usize, versions: u64| {
        let mut names: Vec<String> = (0..tags).map(|i| format!("t{i:03}")).collect();
        names.extend((1..=versions).map(|v| format!("v{v}")));
        names.push("latest".into());
        names.sort();
        names
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(sorted(list(&m)), all(TAGS, 2));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let more = 60;
    std::thread::scope(|s| {
        for t in 0..3 {
            let (m, stop, list) = (&m, &stop, &list);
            s.spawn(move || {
                let mut seen = std::collections::HashSet::new();
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds == 0 {
                    let names = list(m);
                    let here: std::collections::HashSet<_> = names.iter().cloned().collect();
                    assert_eq!(here.len(), names.len(), "{t}: an entry twice: {names:?}");
                    let lost: Vec<_> = seen.difference(&here).collect();
                    assert!(lost.is_empty(), "{t}: {lost:?} listed before, not now");
                    seen = here;
                    rounds += 1;
                }
            });
        }
        let c = env.path("src-v3");
        run_ok(Command::new("cp").arg("-a").arg(&b).arg(&c));
        std::fs::write(c.join("new.txt"), "three\n").unwrap();
        for i in TAGS..TAGS + more {
            env.ok(&["tag", "ds", "v2", &format!("t{i:03}")]);
            if i == TAGS + more / 2 {
                env.commit(&c, "three");
            }
        }
        // Within a poll and the attributes' lifetime, every name is there;
        // a tag moves neither `versions/`' time nor any other. (The readers
        // are stopped before any assertion: a failure must not hang.)
        let t = std::time::Instant::now();
        while sorted(list(&m)) != all(TAGS + more, 3) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(sorted(list(&m)), all(TAGS + more, 3));
    for (src, v) in [(&a, "v1"), (&b, "v2")] {
        assert_eq!(
            fingerprint(&m.path(&format!("versions/{v}"))),
            fingerprint(src)
        );
    }
    assert_eq!(
        std::fs::read_link(m.path(&format!("versions/t{:03}", TAGS + 1))).unwrap(),
        Path::new("v2")
    );
}

#[test]
fn a_read_only_mount_lists_a_large_folder_in_parts_exactly() {
    // A version folder of more entries than a request's part is listed
    // per request from where the kernel is (`fs::unopened`): every name
    // once, with its attributes, however the readers interleave.
    let env = Env::new();
    let src = env.path("src");
    let big = src.join("big");
    std::fs::create_dir_all(&big).unwrap();
    for i in 0..1500 {
        std::fs::write(big.join(format!("f{i:04}")), vec![b'x'; i % 7]).unwrap();
    }
    std::fs::write(src.join("top.txt"), "top").unwrap();
    env.commit(&src, "one");
    let m = env.mount(&["--read-only"]);
    let want = fingerprint(&src);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (m, want) = (&m, &want);
            s.spawn(move || {
                for round in 0..3 {
                    let names: Vec<_> = std::fs::read_dir(m.path("versions/v1/big"))
                        .unwrap()
                        .map(|e| e.unwrap().file_name())
                        .collect();
                    let distinct: std::collections::HashSet<_> = names.iter().collect();
                    assert_eq!((names.len(), distinct.len()), (1500, 1500), "{t} {round}");
                    assert_eq!(&fingerprint(&m.path("versions/v1")), want, "{t} {round}");
                }
            });
        }
    });
    // `seekdir` to any offset, handed out or not, before the kernel keeps
    // the listing (a mount of its own): the entries from there, or none,
    // and the daemon carries on.
    drop(m);
    let m = env.mount(&["--read-only"]);
    for (offset, want) in [(i64::MAX - 1, 0), (1 << 40, 0), (1502, 0), (700, 802)] {
        let n = entries_from(&m.path("versions/v1/big"), offset);
        assert_eq!(n, want, "from {offset}");
    }
    assert_eq!(
        std::fs::read_dir(m.path("versions/v1/big"))
            .unwrap()
            .count(),
        1500
    );
}

/// How many entries `getdents64` gives from `offset` of directory `dir` on.
fn entries_from(dir: &Path, offset: i64) -> usize {
    let d = std::fs::File::open(dir).unwrap();
    let at = nix::unistd::lseek(&d, offset, nix::unistd::Whence::SeekSet).unwrap();
    assert_eq!(at, offset);
    let mut buf = Vec::with_capacity(32 << 10);
    let mut entries = rustix::fs::RawDir::new(&d, buf.spare_capacity_mut());
    let mut n = 0;
    while let Some(e) = entries.next() {
        e.expect("getdents64");
        n += 1;
    }
    n
}

fn python(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/analytics.py");
    run_ok(Command::new("python3").arg(script).args(args))
}

#[test]
fn pandas_pyarrow_and_duckdb_read_versions_and_write_staging() {
    let env = Env::new();
    let src = env.path("tables");
    std::fs::create_dir_all(&src).unwrap();
    python(&["write", src.to_str().unwrap(), "1000"]);
    env.commit(&src, "1000 rows");
    python(&["write", src.to_str().unwrap(), "1500"]);
    env.commit(&src, "1500 rows");
    let m = env.mount(&[]);
    let mp = m.dir.to_str().unwrap();
    let out = python(&["read", mp]);
    // rows, sum(value) = n(n-1): through pandas CSV, pyarrow Parquet, DuckDB Parquet and CSV.
    assert_eq!(
        out,
        "v1 1000 999000 1000 999000 1000 999000 999000\nv2 1500 2248500 1500 2248500 1500 2248500 2248500\n"
    );
    let staged_sum = python(&["stage", mp]);
    assert_eq!(staged_sum.trim(), (2248500 + 1500).to_string());
    commit_via_control(&m, "derived results").unwrap();
    eventually("v3", || m.path("versions/v3/result.parquet").exists());
    let uri = m.path("versions/v3/result.parquet");
    let q = format!(
        "import pandas as pd; print(int(pd.read_parquet('{}').value.sum()))",
        uri.display()
    );
    let sum = run_ok(Command::new("python3").args(["-c", &q]));
    assert_eq!(sum.trim(), staged_sum.trim());
}

#[test]
fn foreground_mount_unmounts_cleanly_on_sigterm_and_sigint() {
    let env = Env::new();
    two_versions(&env);
    let dir = env.path("fg");
    std::fs::create_dir_all(&dir).unwrap();
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut child = env
            .command()
            .args(["mount", "ds"])
            .arg(&dir)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        eventually("the mount", || dir.join("versions/v1").exists());
        common::signal(child.id(), signal);
        let status = child.wait().unwrap();
        assert!(status.success(), "signal {signal}: exit {status}");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(dir.to_str().unwrap()),
            "still mounted after signal {signal}"
        );
    }
}

fn health(m: &Mount) -> String {
    String::from_utf8(std::fs::read(m.path(".detafs/health")).unwrap()).unwrap()
}

/// `versions/` is a kernel connection of its own, mounted inside the
/// mount: it goes with the mount (`detafs umount`, `fusermount3 -u -z`),
/// and a shell whose working folder is inside it keeps both mounted and
/// working, refused with a reason, until it leaves.
#[test]
fn versions_is_a_connection_of_its_own_that_goes_with_the_mount() {
    if common::local_only(
        "through a gateway an open leases its version: versions/ is served on the main connection",
    ) {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    assert!(mounted_at(&m.dir) && mounted_at(&m.path("versions")));
    assert!(health(&m).contains("\"versions_connection\": \"own\""));
    let inside = m.path("versions/v1/sub");
    let mut shell = Command::new("sh")
        .args(["-c", "read line"])
        .current_dir(&inside)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the shell inside versions/", || {
        std::fs::read_link(format!("/proc/{}/cwd", shell.id())).is_ok_and(|p| p == inside)
    });
    let out = env.command().arg("umount").arg(&m.dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&format!("in use by {}", shell.id())),
        "{err}"
    );
    assert!(mounted_at(&m.dir) && mounted_at(&m.path("versions")));
    assert_eq!(
        std::fs::read(m.path("versions/v2/a.csv")).unwrap(),
        std::fs::read(m.path("staging/a.csv")).unwrap()
    );
    drop(shell.stdin.take());
    shell.wait().unwrap();
    env.ok(&["umount", m.dir.to_str().unwrap()]);
    eventually("the daemon's end", || !m.alive());
    assert!(!mounted_at(&m.dir) && !mounted_at(&m.path("versions")));
    drop(m);
    // fusermount3's lazy unmount takes both, and the daemon ends.
    let m = env.mount(&[]);
    assert!(mounted_at(&m.path("versions")));
    run_ok(Command::new("fusermount3").arg("-u").arg("-z").arg(&m.dir));
    eventually("the daemon's end", || !m.alive());
    assert!(!mounted_at(&m.dir) && !mounted_at(&m.path("versions")));
    // A read-only mount is one connection (the kernel opens its files itself).
    drop(m);
    let m = env.mount(&["--read-only"]);
    assert!(!mounted_at(&m.path("versions")));
    assert!(health(&m).contains("\"versions_connection\": \"shared\""));
}

/// Once a staged file has its own copy, the kernel reads and writes it
/// itself (passthrough; this daemon is root). A write the daemon never sees
/// still cannot slip into a commit half-read: the commit holds after
/// reading the copy, the file is rewritten through a handle open all along,
/// and the version has the new bytes whole. An inode open through the
/// daemon (no copy yet) keeps later opens of it there: the kernel refuses
/// to mix the two.
#[test]
fn staged_files_pass_through_and_a_commit_never_takes_a_half_write() {
    if common::local_only("it checks passthrough, off where staged copies are sealed") {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let hold = common::Hold::new(&env, "staged-copy-read");
    let m = env.mount_failing(&[], &hold.spec);
    assert!(health(&m).contains("\"staged_io\": \"passthrough\""));
    let (old, new) = (noise(8 << 20, 1), noise(8 << 20, 2));
    let p = m.path("staging/p.bin");
    std::fs::write(&p, &old).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let before = health(&m);
    std::thread::scope(|s| {
        let committing = s.spawn(|| commit_via_control(&m, "while written"));
        hold.reached();
        f.write_all_at(&new, 0).unwrap();
        hold.release();
        committing.join().unwrap().unwrap();
    });
    // The writes passed through: the daemon saw only the commit message's.
    let writes = |h: &str| {
        let v: serde_json::Value = serde_json::from_str(h).unwrap();
        v["requests"]["write"].as_u64().unwrap_or(0)
    };
    assert_eq!(writes(&before) + 1, writes(&health(&m)));
    assert_eq!(std::fs::read(m.path("versions/v3/p.bin")).unwrap(), new);
    drop(f);
    assert_eq!(std::fs::read(&p).unwrap(), new);
    // a.csv has no copy: a reader opens it through the daemon; a writer
    // then copies it up and, the inode being open so, writes there too.
    let mut reader = std::fs::File::open(m.path("staging/a.csv")).unwrap();
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .open(m.path("staging/a.csv"))
        .unwrap();
    w.write_all(b"more\n").unwrap();
    let mut seen = String::new();
    reader.read_to_string(&mut seen).unwrap();
    drop((w, reader));
    let now = std::fs::read_to_string(m.path("staging/a.csv")).unwrap();
    assert!(now.ends_with("more\n"), "{now}");
    assert!(writes(&health(&m)) > writes(&before), "{}", health(&m));
}

#[test]
fn shell_tools_in_staging_and_only_the_owner_commits() {
    let env = Env::new();
    let (a, _) = two_versions(&env);
    let m = env.mount(&["--allow-other"]);
    let st = m.path("staging");
    let sh = |script: &str| run_ok(Command::new("sh").arg("-c").arg(script).current_dir(&st));
    sh("mkdir -p deep/er/est && ln -s ../a.csv deep/link && truncate -s 1000 sub/big.bin");
    sh("chmod 700 run.sh && touch -d '2001-02-03 04:05:06' a.csv && truncate -s 0 empty");
    run_ok(
        Command::new("rsync")
            .arg("-a")
            .arg(format!("{}/", a.display()))
            .arg(st.join("mirror")),
    );
    let want = fingerprint(&st);
    // Another user may not commit the owner's staging, nor see what it holds.
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    for script in [
        format!("echo 'as nobody' > {}", m.path(".detafs/commit").display()),
        format!("cat {}", m.path(".detafs/status").display()),
        format!("cat {}", m.path(".detafs/progress").display()),
        format!("echo . > {}", m.path(".detafs/restore").display()),
        format!("printf 'v1\\n' > {}", m.path(".detafs/checkout").display()),
    ] {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(&script)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Permission denied"),
            "{script}: {err}"
        );
    }
    assert_eq!(env.log().len(), 2, "nothing was committed");
    assert_eq!(fingerprint(&st), want, "nor restored or checked out");
    // The owner commits: the version records them as its author.
    common::commit_via_control(&m, "as the owner").unwrap();
    let log = env.log();
    assert_eq!(log[2]["author"], common::mount_author());
    let out = env.path("v3");
    env.ok(&["export", "ds", "v3", out.to_str().unwrap()]);
    assert_eq!(fingerprint(&out), want);
    assert_eq!(
        std::fs::read_link(out.join("deep/link")).unwrap(),
        Path::new("../a.csv")
    );
    assert_eq!(
        std::fs::metadata(out.join("sub/big.bin")).unwrap().len(),
        1000
    );
    let health: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["store_reachable"], true);
    assert_eq!(health["versions"], 3);
}

#[test]
fn a_commit_rebased_onto_another_leaves_staging_equal_to_the_new_version() {
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let m = env.mount(&[]);
    // Staged here: a change to a.csv and a new file.
    std::fs::write(m.path("staging/a.csv"), b"staged\n").unwrap();
    std::fs::write(m.path("staging/new.txt"), b"new").unwrap();
    // Meanwhile another committer changes other paths.
    let other = env.path("other");
    run_ok(Command::new("cp").arg("-a").arg(&b).arg(&other));
    std::fs::write(other.join("sub/deeper/note.txt"), b"theirs").unwrap();
    std::fs::remove_file(other.join("run.sh")).unwrap();
    env.commit(&other, "elsewhere");
    // The mount's commit lands on top of it (rebased) as v4.
    commit_via_control(&m, "ours").unwrap();
    let log = env.log();
    assert_eq!(log.len(), 4);
    let export = env.path("v4");
    env.ok(&["export", "ds", "v4", export.to_str().unwrap()]);
    assert_eq!(std::fs::read(export.join("a.csv")).unwrap(), b"staged\n");
    assert_eq!(
        std::fs::read(export.join("sub/deeper/note.txt")).unwrap(),
        b"theirs"
    );
    assert!(!export.join("run.sh").exists());
    // Staging shows the new version exactly, with nothing left to commit.
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert_eq!(fingerprint(&m.path("staging")), fingerprint(&export));
}

/// A conflict is resolved as docs/semantics.md says: the failed commit
/// leaves staging on the winner with our version of the path (status `C`);
/// committing again is refused until the path is touched, replaced or
/// edited; then the commit lands on top of the winner.
#[test]
fn a_conflict_through_the_mount_is_resolved_as_documented() {
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/a.csv"), b"ours\n").unwrap();
    std::fs::write(m.path("staging/mine.txt"), b"mine").unwrap();
    let other = env.path("other");
    run_ok(Command::new("cp").arg("-a").arg(&b).arg(&other));
    std::fs::write(other.join("a.csv"), b"theirs\n").unwrap();
    std::fs::write(other.join("theirs.txt"), b"theirs only").unwrap();
    env.commit(&other, "elsewhere");
    assert_eq!(errno_of(commit_via_control(&m, "ours")), libc::EBUSY);
    let why = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(why.contains("conflict") && why.contains("a.csv"), "{why}");
    assert!(
        why.contains("versions/v3/") && why.contains("touch"),
        "{why}"
    );
    assert_eq!(env.log().len(), 3, "nothing committed");
    // Staging stands on v3: theirs elsewhere, ours where both changed.
    let status = || std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status(), "C a.csv\nA mine.txt\n");
    assert_eq!(std::fs::read(m.path("staging/a.csv")).unwrap(), b"ours\n");
    assert_eq!(
        std::fs::read(m.path("staging/theirs.txt")).unwrap(),
        b"theirs only"
    );
    // Committing again changes nothing until the conflict is resolved.
    assert_eq!(errno_of(commit_via_control(&m, "ours again")), libc::EBUSY);
    let why = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
    assert!(why.contains("unresolved") && why.contains("a.csv"), "{why}");
    assert_eq!(env.log().len(), 3);
    // Resolve by editing (a merge of both), then commit.
    std::fs::write(m.path("staging/a.csv"), b"ours\ntheirs\n").unwrap();
    assert_eq!(status(), "M a.csv\nA mine.txt\n");
    commit_via_control(&m, "merged").unwrap();
    assert_eq!(env.ok(&["cat", "ds", "v4", "a.csv"]), "ours\ntheirs\n");
    assert_eq!(env.ok(&["cat", "ds", "v4", "theirs.txt"]), "theirs only");
    assert_eq!(env.ok(&["cat", "ds", "v4", "mine.txt"]), "mine");
    assert_eq!(status(), "");
}

/// Keeping our version is a `touch`; the CLI's commit says exit 3 until then.
#[test]
fn a_conflict_kept_as_ours_by_a_touch() {
    if common::local_only("the store's own CLI commits the store's staging, not a gateway host's") {
        return;
    }
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/a.csv"), b"ours\n").unwrap();
    let other = env.path("other");
    run_ok(Command::new("cp").arg("-a").arg(&b).arg(&other));
    std::fs::write(other.join("a.csv"), b"theirs\n").unwrap();
    env.commit(&other, "elsewhere");
    let out = env.run(&["commit", "ds", "-m", "ours"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = env.run(&["commit", "ds", "-m", "ours"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unresolved"),
        "{out:?}"
    );
    run_ok(Command::new("touch").arg(m.path("staging/a.csv")));
    env.ok(&["commit", "ds", "-m", "ours, after all"]);
    assert_eq!(env.ok(&["cat", "ds", "v4", "a.csv"]), "ours\n");
    // Nothing left: exit 4, through the mount as without one.
    let out = env.run(&["commit", "ds", "-m", "again"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

#[test]
fn a_deleted_object_is_eio_for_its_files_named_in_the_log_and_by_verify() {
    if common::local_only("it names the store's objects, which a gateway's host never sees") {
        return;
    }
    let env = Env::new();
    let (_, b) = two_versions(&env);
    let pack = env.objects.largest("packs"); // v2's big.bin
    env.objects.delete(&pack);
    let m = env.mount(&[]);
    let res = std::fs::read(m.path("versions/v2/sub/big.bin"));
    assert_eq!(errno_of(res), libc::EIO);
    // Files stored elsewhere (unchanged since v1) still read, and the
    // mount keeps serving.
    assert_eq!(
        std::fs::read(m.path("versions/v2/sub/deeper/note.txt")).unwrap(),
        std::fs::read(b.join("sub/deeper/note.txt")).unwrap()
    );
    assert!(m.path("versions/v1/sub/big.bin").exists());
    assert!(m.alive());
    let log = m.log();
    let pack_name = pack.rsplit('/').next().unwrap();
    assert!(
        log.contains("versions/v2/sub/big.bin")
            && log.contains("missing")
            && log.contains(pack_name),
        "daemon log: {log}"
    );
    let out = env.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&pack) && report.contains("v2:ds/sub/big.bin"),
        "{report}"
    );
}

#[test]
fn a_file_unlinked_while_open_lives_until_its_last_close() {
    use std::io::Seek;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let path = m.path("staging/scratch.bin");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    f.write_all(b"before unlink").unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(!path.exists());
    // fstat, fchmod and ftruncate come to the daemon without this handle.
    let meta = f.metadata().unwrap();
    assert_eq!(meta.len(), 13);
    assert_eq!(meta.nlink(), 0);
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .unwrap();
    assert_eq!(f.metadata().unwrap().mode() & 0o7777, 0o600);
    f.write_all(b", after").unwrap();
    f.set_len(20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 20);
    f.rewind().unwrap();
    let mut back = String::new();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "before unlink, after");
    // It is in no status, no commit, and gone with its last close.
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    drop(f);
    assert!(!path.exists());
    // Anonymous temporary files of Python's standard library work.
    let out = run_ok(Command::new("python3").args([
        "-c",
        "import os, sys, tempfile\n\
         with tempfile.TemporaryFile(dir=sys.argv[1]) as t:\n\
         \x20   t.write(b'x' * 100000); t.flush(); os.fchmod(t.fileno(), 0o640)\n\
         \x20   t.seek(0); n = len(t.read())\n\
         \x20   print(n, os.fstat(t.fileno()).st_size, oct(os.fstat(t.fileno()).st_mode & 0o777))",
        m.path("staging").to_str().unwrap(),
    ]));
    assert_eq!(out.trim(), "100000 100000 0o640");
    assert_eq!(
        std::fs::read_dir(m.path("staging")).unwrap().count(),
        std::fs::read_dir(m.path("versions/v2")).unwrap().count()
    );
}

/// A rename flag staging does not implement is refused (EINVAL), never
/// done as a plain rename; RENAME_NOREPLACE is honoured.
#[test]
fn a_rename_flag_staging_does_not_implement_is_refused() {
    let env = Env::new();
    let m = env.mount(&[]);
    let a = m.path("staging/a.txt");
    let b = m.path("staging/b.txt");
    std::fs::write(&a, "a").unwrap();
    std::fs::write(&b, "b").unwrap();
    let rename = |flags: libc::c_uint| {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        let flags = RenameFlags::from_bits_retain(flags);
        renameat2(AT_FDCWD, &a, AT_FDCWD, &b, flags).map_err(std::io::Error::from)
    };
    for flags in [libc::RENAME_WHITEOUT, libc::RENAME_EXCHANGE, 1 << 7] {
        let e = rename(flags).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EINVAL),
            "flags {flags:#x}: {e}"
        );
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "a");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "b");
    }
    let e = rename(libc::RENAME_NOREPLACE).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    rename(0).unwrap();
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "a");
}

/// The kernel passes a staged inode through to one file at a time. A copy
/// held open across a commit stays staged (a later open passes through to
/// it too, with the committed bytes); a copy replaced by a restore while a
/// program holds it open makes later opens EBUSY until that program
/// closes it (never EIO, never a write into the replaced copy).
#[test]
fn staged_files_held_open_across_a_commit_or_a_restore() {
    if common::local_only("it checks passthrough, off where staged copies are sealed") {
        return;
    }
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    assert!(health(&m).contains("\"staged_io\": \"passthrough\""));
    let p = m.path("staging/held.txt");
    std::fs::write(&p, b"first\n").unwrap();
    let reader = std::fs::File::open(&p).unwrap();
    commit_via_control(&m, "held open").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"first\n");
    assert_eq!(
        std::fs::read(m.path("versions/latest/held.txt")).unwrap(),
        b"first\n"
    );
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, "", "kept staged, unchanged: {status}");
    drop(reader);

    // Changed, held open by a writer, restored to what was committed.
    let mut writer = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    writer.write_all(b"second\n").unwrap();
    std::fs::write(m.path(".detafs/restore"), b"held.txt\n").unwrap();
    let busy = std::fs::read(&p).unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY), "{busy}");
    let busy = std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY), "{busy}");
    // The old handle writes into the file it has; staging holds v3's.
    writer.write_all(b"lost\n").unwrap();
    drop(writer);
    assert_eq!(std::fs::read(&p).unwrap(), b"first\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"third\n")
        .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"first\nthird\n");
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, "M held.txt\n");
}
