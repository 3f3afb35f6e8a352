//! Entries beyond files, directories and symlinks, through every path a
//! version takes: made in `staging/`, committed, seen in `versions/`,
//! exported, committed again with `commit --from`.

mod common;

use common::{Env, commit_via_control, run_ok};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

/// (name, type letter, permission bits, device number as major:minor).
type Seen = Vec<(String, char, u32, String)>;

/// The special entries of folder `dir`, as `ls -l` would tell them.
fn specials(dir: &Path) -> Seen {
    let mut seen: Seen = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let t = m.file_type();
            let letter = if t.is_fifo() {
                'p'
            } else if t.is_socket() {
                's'
            } else if t.is_char_device() {
                'c'
            } else if t.is_block_device() {
                'b'
            } else {
                '-'
            };
            let dev = if letter == 'c' || letter == 'b' {
                format!("{}:{}", libc::major(m.rdev()), libc::minor(m.rdev()))
            } else {
                String::new()
            };
            let name = e.file_name().into_string().unwrap();
            (name, letter, m.mode() & 0o7777, dev)
        })
        .filter(|s| s.1 != '-')
        .collect();
    seen.sort();
    seen
}

fn expected() -> Seen {
    vec![
        ("disk".into(), 'b', 0o640, "7:200".into()),
        ("fifo".into(), 'p', 0o640, String::new()),
        ("null".into(), 'c', 0o666, "1:3".into()),
        ("sock".into(), 's', 0o755, String::new()),
    ]
}

/// A sealed (format 2) store, whatever `DETAFS_TEST_PLAINTEXT` says:
/// format 1 trees cannot hold these entries.
fn sealed_env() -> Env {
    let env = Env::empty();
    env.ok(&["init"]);
    env.ok(&["dataset", "create", "ds"]);
    env
}

/// Makes the four kinds in `dir` with the usual tools.
fn make_specials(dir: &Path) {
    let at = |name: &str| dir.join(name).to_str().unwrap().to_string();
    run_ok(Command::new("mkfifo").args(["-m", "0640", &at("fifo")]));
    run_ok(Command::new("mknod").args(["-m", "0666", &at("null"), "c", "1", "3"]));
    run_ok(Command::new("mknod").args(["-m", "0640", &at("disk"), "b", "7", "200"]));
    // A socket is made by bind(2).
    run_ok(Command::new("python3").args([
        "-c",
        "import os, socket, sys\n\
         s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o755)",
        &at("sock"),
    ]));
}

#[test]
fn fifos_sockets_and_devices_round_trip_through_every_path() {
    let env = sealed_env();
    let m = env.mount(&[]);
    let staging = m.path("staging");
    make_specials(&staging);
    assert_eq!(specials(&staging), expected(), "in staging");
    // The mount is nodev: a device node in it opens nothing.
    let opened = std::fs::File::open(staging.join("null"));
    assert_eq!(opened.unwrap_err().raw_os_error(), Some(libc::EACCES));
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status.lines().count(), 4, "{status}");
    commit_via_control(&m, "specials").unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert_eq!(
        specials(&m.path("versions/v1")),
        expected(),
        "in versions/v1"
    );
    // A read-only file system refuses to make them.
    let fifo = m.path("versions/v1/new-fifo");
    let out = Command::new("mkfifo").arg(&fifo).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));

    // `ls` of the CLI names them as ls -l does.
    let ls = env.ok(&["ls", "ds", "v1"]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("c0666") && l.contains("null (1, 3)")),
        "{ls}"
    );
    assert!(
        ls.lines()
            .any(|l| l.starts_with("p0640") && l.ends_with("fifo")),
        "{ls}"
    );

    // Export recreates them (devices as root, which this test runs as).
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(specials(&out), expected(), "exported");

    // commit --from records them, not skips them.
    env.ok(&["dataset", "create", "again"]);
    env.ok(&[
        "commit",
        "again",
        "--from",
        out.to_str().unwrap(),
        "-m",
        "again",
    ]);
    let out2 = env.path("out2");
    env.ok(&["export", "again", "v1", out2.to_str().unwrap()]);
    assert_eq!(specials(&out2), expected(), "exported after commit --from");

    // Without CAP_MKNOD (as any user but root), devices are left out with a
    // clear message and everything else is exported.
    let out3 = env.path("out3");
    let mut export = Command::new("setpriv");
    export
        .args(["--bounding-set=-mknod", "--inh-caps=-mknod"])
        .arg(env!("CARGO_BIN_EXE_detafs"))
        .args(["export", "ds", "v1", out3.to_str().unwrap()]);
    let done = env.configure(&mut export).output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    assert!(err.contains("only root may make one"), "{err}");
    let kinds: Vec<char> = specials(&out3).iter().map(|s| s.1).collect();
    assert_eq!(kinds, ['p', 's']);

    // Removed, renamed and re-moded like any entry, and committed so.
    std::fs::rename(staging.join("fifo"), staging.join("fifo2")).unwrap();
    std::fs::remove_file(staging.join("disk")).unwrap();
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status.lines().count(), 3, "{status}");
    commit_via_control(&m, "moved").unwrap();
    let names: Vec<String> = specials(&m.path("versions/v2"))
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(names, ["fifo2", "null", "sock"]);
    assert!(m.alive());
}

#[test]
fn a_format_1_store_refuses_them_plainly() {
    let env = Env::new_plaintext();
    let m = env.mount(&[]);
    let out = Command::new("mkfifo")
        .arg(m.path("staging/fifo"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{out:?}"
    );
    // commit --from leaves them out, saying so.
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    make_specials(&src);
    let out = env.run(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("a format 1 store cannot hold it"), "{err}");
    assert_eq!(env.ok(&["ls", "ds", "v1"]).lines().count(), 1);
}

/// (atime, mtime, ctime) of `path`, in nanoseconds.
/// Waits until the clock that stamps staged files is past `path`'s ctime,
/// so the next change of it shows in its times. The kernel stamps a staged
/// copy's writes with its coarse clock (a tick behind the daemon's own
/// time at most): a probe file written beside the copies tells when that
/// clock has moved past.
fn clock_past_ctime(env: &Env, path: &Path) {
    let ctime = times(path).2;
    let probe = env.staging().join("clock-probe");
    common::within(
        std::time::Duration::from_secs(10),
        "the clock to move",
        || {
            std::fs::write(&probe, b"tick").unwrap();
            times(&probe).1 > ctime
        },
    );
    std::fs::remove_file(&probe).unwrap();
}

fn times(path: &Path) -> (i128, i128, i128) {
    let m = std::fs::symlink_metadata(path).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    (
        ns(m.atime(), m.atime_nsec()),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec()),
    )
}

#[test]
fn staging_keeps_atime_and_ctime_apart_from_the_mtime() {
    let env = Env::new();
    let m = env.mount(&[]);
    let f = m.path("staging/f");
    std::fs::write(&f, b"data").unwrap();
    let (a0, m0, c0) = times(&f);
    // Created, then written: the write moved mtime and ctime, not the atime.
    assert!(a0 <= m0 && m0 <= c0, "{a0} {m0} {c0}");
    let touch = |args: &[&str]| run_ok(Command::new("touch").args(args).arg(&f));
    // Access time alone, to the nanosecond; the mtime stays.
    touch(&["-a", "-d", "2001-02-03 04:05:06.123456789 UTC"]);
    let (a1, m1, c1) = times(&f);
    assert_eq!(a1, 981_173_106_123_456_789);
    assert_eq!(m1, m0);
    assert!(c1 >= c0);
    // Modification time alone, past 2038; the atime stays.
    touch(&["-m", "-d", "2040-01-01 00:00:00 UTC"]);
    let (a2, m2, c2) = times(&f);
    assert_eq!((a2, m2), (a1, 2_208_988_800_000_000_000));
    assert!(c2 >= c1);
    // chmod moves the ctime only.
    clock_past_ctime(&env, &f);
    let before = times(&f);
    run_ok(Command::new("chmod").arg("600").arg(&f));
    let after = times(&f);
    assert_eq!((after.0, after.1), (before.0, before.1));
    assert!(after.2 > before.2, "{before:?} {after:?}");
    // A write moves mtime and ctime, not the atime; a read moves nothing
    // (staging keeps atimes as a noatime mount does).
    clock_past_ctime(&env, &f);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .and_then(|mut file| std::io::Write::write_all(&mut file, b" more"))
        .unwrap();
    let written = times(&f);
    assert_eq!(written.0, after.0);
    // (The mtime was in 2040: now is earlier.)
    assert!(
        written.1 < after.1 && written.2 > after.2,
        "{after:?} {written:?}"
    );
    assert_eq!(std::fs::read(&f).unwrap(), b"data more");
    assert_eq!(times(&f), written);
    // A rename moves the ctime and keeps the rest.
    clock_past_ctime(&env, &f);
    let g = m.path("staging/g");
    std::fs::rename(&f, &g).unwrap();
    let renamed = times(&g);
    assert_eq!((renamed.0, renamed.1), (written.0, written.1));
    assert!(renamed.2 > written.2);
    // The same after the daemon restarts: the times are in staging's rows.
    drop(m);
    let m = env.mount(&[]);
    assert_eq!(times(&m.path("staging/g")), renamed);
}

#[test]
fn directory_link_counts_follow_mkdir_rename_and_rmdir() {
    let env = Env::new();
    // A committed folder with two subfolders, not listed yet in staging.
    let src = env.path("src");
    for d in ["top/a", "top/b", "other"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    env.commit(&src, "folders");
    let m = env.mount(&[]);
    let nlink = |rel: &str| std::fs::metadata(m.path(rel)).unwrap().nlink();
    assert_eq!(nlink("staging/top"), 4);
    assert_eq!(nlink("staging"), 4);
    // A version keeps no count: 1, which tells find not to rely on it.
    assert_eq!(
        (nlink("versions/v1/top"), nlink("versions/v1/top/a")),
        (1, 1)
    );
    std::fs::create_dir(m.path("staging/top/c")).unwrap();
    assert_eq!(nlink("staging/top"), 5);
    std::fs::rename(m.path("staging/top/a"), m.path("staging/other/a")).unwrap();
    assert_eq!((nlink("staging/top"), nlink("staging/other")), (4, 3));
    std::fs::remove_dir(m.path("staging/top/b")).unwrap();
    assert_eq!(nlink("staging/top"), 3);
    // Files are not counted.
    std::fs::write(m.path("staging/top/file"), b"x").unwrap();
    assert_eq!(nlink("staging/top"), 3);
}

#[test]
fn an_atime_set_apart_is_committed_shown_in_versions_and_exported() {
    let env = sealed_env();
    let m = env.mount(&[]);
    let (f, d) = (m.path("staging/f"), m.path("staging/d"));
    std::fs::write(&f, b"data").unwrap();
    std::fs::create_dir(&d).unwrap();
    std::fs::write(m.path("staging/plain"), b"p").unwrap();
    for p in [&f, &d] {
        run_ok(
            Command::new("touch")
                .args(["-a", "-d", "2001-02-03 04:05:06.5 UTC"])
                .arg(p),
        );
    }
    let staged = [times(&f), times(&d), times(&m.path("staging/plain"))];
    commit_via_control(&m, "atimes").unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "",
        "a commit leaves staging equal to the version"
    );
    let atime = 981_173_106_500_000_000;
    for (i, name) in ["f", "d", "plain"].iter().enumerate() {
        let (a, mt, _) = times(&m.path(&format!("versions/v1/{name}")));
        assert_eq!((a, mt), (staged[i].0, staged[i].1), "{name}");
    }
    assert_eq!(staged[0].0, atime);
    assert_eq!(staged[1].0, atime);
    // An entry without an atime of its own shows its mtime.
    assert_eq!(staged[2].0, staged[2].1);
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(times(&out.join("f")).0, atime);
    assert_eq!(times(&out.join("d")).0, atime);
    // Changing only an atime is a change to commit (a time-only one, T).
    run_ok(
        Command::new("touch")
            .args(["-a", "-d", "2002-01-01 UTC"])
            .arg(&f),
    );
    let status = std::fs::read_to_string(m.path(".detafs/status")).unwrap();
    assert_eq!(status, "T f\n");
    commit_via_control(&m, "atime only").unwrap();
    assert_eq!(times(&m.path("versions/v2/f")).0, 1_009_843_200_000_000_000);
}

#[test]
fn a_format_1_store_keeps_no_atime_apart() {
    let env = Env::new_plaintext();
    let m = env.mount(&[]);
    let f = m.path("staging/f");
    std::fs::write(&f, b"data").unwrap();
    run_ok(
        Command::new("touch")
            .args(["-a", "-d", "2001-01-01 UTC"])
            .arg(&f),
    );
    let (a, mt, _) = times(&f);
    assert_eq!(a, mt, "its versions could not hold it");
    commit_via_control(&m, "one").unwrap();
    assert_eq!(times(&m.path("versions/v1/f")).1, mt);
}

#[test]
fn hard_links_in_staging_share_one_inode_until_the_last_name_goes() {
    use std::io::Write;
    let env = Env::new();
    let m = env.mount(&[]);
    let (a, b) = (m.path("staging/a"), m.path("staging/sub/b"));
    std::fs::create_dir(m.path("staging/sub")).unwrap();
    std::fs::write(&a, b"one").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
    assert_eq!(meta(&a).ino(), meta(&b).ino());
    assert_eq!((meta(&a).nlink(), meta(&b).nlink()), (2, 2));
    // One file: a write or chmod through one name is seen through the other.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&b)
        .unwrap()
        .write_all(b" two")
        .unwrap();
    run_ok(Command::new("chmod").arg("600").arg(&a));
    assert_eq!(std::fs::read(&a).unwrap(), b"one two");
    assert_eq!(meta(&b).mode() & 0o7777, 0o600);
    // A link to a folder, or an existing name, is refused.
    let err = std::fs::hard_link(m.path("staging/sub"), m.path("staging/d2")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    let err = std::fs::hard_link(&a, &b).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    // Renaming one name onto another of the same file changes nothing.
    std::fs::rename(&a, &b).unwrap();
    assert!(a.exists() && b.exists());
    // cp -al gives every file of a tree a second name.
    let c = m.path("staging/c");
    run_ok(
        Command::new("cp")
            .arg("-al")
            .arg(m.path("staging/sub"))
            .arg(&c),
    );
    assert_eq!(meta(&a).nlink(), 3);
    assert_eq!(meta(&c.join("b")).ino(), meta(&a).ino());
    // It survives the daemon.
    drop(m);
    let m = env.mount(&[]);
    let (a, b, cb) = (
        m.path("staging/a"),
        m.path("staging/sub/b"),
        m.path("staging/c/b"),
    );
    assert_eq!(meta(&a).nlink(), 3);
    assert_eq!(meta(&cb).ino(), meta(&a).ino());
    // Removing the first name keeps the file under the others, with its
    // inode number (an open descriptor goes on working).
    let ino = meta(&a).ino();
    let mut open = std::fs::OpenOptions::new().append(true).open(&b).unwrap();
    std::fs::remove_file(&a).unwrap();
    assert_eq!((meta(&b).ino(), meta(&b).nlink()), (ino, 2));
    open.write_all(b" three").unwrap();
    drop(open);
    assert_eq!(std::fs::read(&cb).unwrap(), b"one two three");
    std::fs::remove_dir_all(m.path("staging/sub")).unwrap();
    assert_eq!(meta(&cb).nlink(), 1);
    assert_eq!(std::fs::read(&cb).unwrap(), b"one two three");
    // Committed: each name is in the version.
    commit_via_control(&m, "links").unwrap();
    assert_eq!(
        std::fs::read(m.path("versions/v1/c/b")).unwrap(),
        b"one two three"
    );
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    std::fs::remove_file(&cb).unwrap();
    assert!(!cb.exists());
    assert!(m.alive());
}

/// (inode, link count) of `path`.
fn inode(path: &Path) -> (u64, u64) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.ino(), m.nlink())
}

#[test]
fn link_groups_round_trip_through_commit_versions_export_and_commit_from() {
    let env = sealed_env();
    let m = env.mount(&[]);
    let st = m.path("staging");
    std::fs::create_dir_all(st.join("d/deep")).unwrap();
    std::fs::write(st.join("a"), b"shared").unwrap();
    std::fs::hard_link(st.join("a"), st.join("d/deep/b")).unwrap();
    std::fs::hard_link(st.join("a"), st.join("d/c")).unwrap();
    std::fs::write(st.join("alone"), b"alone").unwrap();
    run_ok(Command::new("mkfifo").arg(st.join("p")));
    std::fs::hard_link(st.join("p"), st.join("d/p2")).unwrap();
    commit_via_control(&m, "links").unwrap();
    // versions/v1: one inode per file, whatever the name, with its count.
    let v = m.path("versions/v1");
    let a = inode(&v.join("a"));
    assert_eq!(a.1, 3);
    assert_eq!(inode(&v.join("d/deep/b")), a);
    assert_eq!(inode(&v.join("d/c")), a);
    assert_eq!(inode(&v.join("alone")).1, 1);
    assert_eq!(inode(&v.join("d/p2")), inode(&v.join("p")));
    assert_eq!(std::fs::read(v.join("d/c")).unwrap(), b"shared");
    // Export makes them links again.
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    let e = inode(&out.join("a"));
    assert_eq!(e.1, 3);
    assert_eq!(inode(&out.join("d/deep/b")), e);
    assert_eq!(inode(&out.join("d/p2")).1, 2);
    assert_eq!(std::fs::read(out.join("d/deep/b")).unwrap(), b"shared");
    // commit --from keeps them, and commits the same tree twice over.
    env.ok(&["dataset", "create", "again"]);
    let from = [
        "commit",
        "again",
        "--from",
        out.to_str().unwrap(),
        "-m",
        "x",
    ];
    env.ok(&from);
    let (code, _) = env.fails(&from);
    assert_eq!(code, 4, "the same tree is nothing to commit");
    let out2 = env.path("out2");
    env.ok(&["export", "again", "v1", out2.to_str().unwrap()]);
    assert_eq!(inode(&out2.join("a")).1, 3);
    assert_eq!(inode(&out2.join("d/c")), inode(&out2.join("a")));
    // A staging that starts from the version (a new mount, after its own
    // staging is gone) holds one file under the three names again: a
    // write through one is read through the others.
    drop(m);
    std::fs::remove_dir_all(env.path("staging")).ok();
    let m = env.mount(&["--staging-dir", env.path("staging2").to_str().unwrap()]);
    let st = m.path("staging");
    assert_eq!(inode(&st.join("d/c")), inode(&st.join("a")));
    assert_eq!(inode(&st.join("a")).1, 3);
    std::fs::write(st.join("d/deep/b"), b"changed").unwrap();
    assert_eq!(std::fs::read(st.join("a")).unwrap(), b"changed");
    std::fs::remove_file(st.join("d/c")).unwrap();
    commit_via_control(&m, "changed").unwrap();
    let v2 = m.path("versions/v2");
    assert_eq!(inode(&v2.join("a")).1, 2);
    assert_eq!(inode(&v2.join("d/deep/b")), inode(&v2.join("a")));
    assert_eq!(std::fs::read(v2.join("a")).unwrap(), b"changed");
    assert!(!v2.join("d/c").exists());
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        ""
    );
    assert!(m.alive());
}

#[test]
fn a_file_takes_at_most_65000_names_as_on_ext4() {
    let env = Env::new();
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/a"), b"x").unwrap();
    std::fs::hard_link(m.path("staging/a"), m.path("staging/b")).unwrap();
    drop(m);
    // 64,998 more names, written straight into staging's database: making
    // them one by one through the kernel would take minutes.
    let db = walk_for(&env.staging(), "staging.sqlite");
    let db = rusqlite::Connection::open(db).unwrap();
    let added = db
        .execute(
            "WITH RECURSIVE n(i) AS (SELECT 3 UNION ALL SELECT i + 1 FROM n WHERE i < 65000)
             INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, upper, link)
             SELECT b.parent, CAST('n' || n.i AS BLOB), b.kind, 0, 0, 0, b.mtime_s, b.mtime_ns, 0, 0, b.link
             FROM n, nodes AS b WHERE b.name = CAST('b' AS BLOB)",
            [],
        )
        .unwrap();
    assert_eq!(added, 64_998);
    drop(db);
    let m = env.mount(&[]);
    assert_eq!(inode(&m.path("staging/n65000")).1, 65_000);
    let err = std::fs::hard_link(m.path("staging/a"), m.path("staging/one-more")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EMLINK));
    assert!(!m.path("staging/one-more").exists());
    // A name fewer, and one can be added again.
    std::fs::remove_file(m.path("staging/n65000")).unwrap();
    std::fs::hard_link(m.path("staging/a"), m.path("staging/one-more")).unwrap();
    assert_eq!(inode(&m.path("staging/a")).1, 65_000);
    assert!(m.alive());
}

/// The one file called `name` under `dir`.
fn walk_for(dir: &Path, name: &str) -> std::path::PathBuf {
    let found: Vec<_> = walkdir(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == name))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}
