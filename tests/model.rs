//! The file-system core against a reference model, without the kernel:
//! random sequences of operations are applied to `MountFs` (staging over a
//! local store) and to a plain temporary folder; after every step both
//! trees must be equal, and after every commit the new version must equal
//! the folder too. Results must agree as well: both succeed, or both fail
//! with the same errno. Threaded steps run an operation while a commit
//! builds (the version is staging before it or after it, never a mix) or
//! a write that copies a file up while another caller stats and reads
//! (which sees the bytes before or after the write). Failures proptest shrinks are kept below as named
//! regression tests.

mod common;

use common::Env;
use common::model::{Core, Model, Op, step};
use proptest::prelude::*;

fn check(ops: &[Op]) {
    let env = Env::new_local();
    let model = Model::new(&env);
    let mut core = Core::open(&env);
    for (step, op) in ops.iter().enumerate() {
        if model.follows_symlink(op) {
            continue;
        }
        let before = model.tree();
        // A write that creates its file is a create, then a write: a
        // commit may freeze staging between the two.
        let created = match op {
            Op::DuringCommit(w) => match &**w {
                Op::Write { path, .. } => model.read(path).is_err().then(|| path.clone()),
                _ => None,
            },
            _ => None,
        };
        // What a read during a write may see: the bytes before it or after.
        let read_before = match op {
            Op::ReadDuringWrite(_, path) => Some(model.read(path)),
            _ => None,
        };
        let want = model.apply(op);
        let (got, seen) = core.apply_seeing(op);
        assert_eq!(got, want, "step {step}: {op:?}");
        let want = model.tree();
        assert_eq!(
            core.tree("staging", ""),
            want,
            "step {step}: {op:?}: staging"
        );
        if let (Some((path, read)), Some(earlier)) = (seen, read_before) {
            // A write that creates its file is a create, then a write: the
            // read may come between and find the file empty.
            let created_empty = earlier.is_err() && read == Ok(Vec::new());
            assert!(
                read == earlier || read == model.read(&path) || created_empty,
                "step {step}: {op:?}: read {path} as neither before nor after"
            );
        }
        match op {
            Op::Commit => {
                if let Some(latest) = core.latest() {
                    let v = core.tree("versions", &latest);
                    assert_eq!(v, want, "step {step}: {latest}");
                }
            }
            // Staging as the commit froze it: before the step or after.
            Op::DuringCommit(_) => {
                if let Some(latest) = core.latest() {
                    let v = core.tree("versions", &latest);
                    let between = created.as_ref().is_some_and(|path| {
                        let mut v = v.clone();
                        let made = v.remove(path);
                        v == before
                            && made.is_some_and(|m| {
                                m.starts_with("file") && m.ends_with(" 0 e3b0c44298fc1c14")
                            })
                    });
                    assert!(
                        v == before || v == want || between,
                        "step {step}: {op:?}: {latest} is neither before nor after"
                    );
                }
            }
            _ => {}
        }
    }
}

proptest! {
    // PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_core_behaves_like_a_plain_folder(ops in prop::collection::vec(step(), 1..40)) {
        check(&ops);
    }
}

// Failures proptest found and shrank (tests/model.proptest-regressions
// keeps their seeds), kept as named tests.

/// A FIFO alone in staging: made in the core as in the folder.
#[test]
fn shrunk_a_fifo_alone_in_staging() {
    check(&[Op::Mkfifo("x".into())]);
}

/// A hard link of a folder onto a name it has: refused alike.
#[test]
fn shrunk_a_folder_linked_onto_its_own_name() {
    check(&[
        Op::Mkdir("a".into()),
        Op::Mkdir("y".into()),
        Op::Link("y".into(), "y".into()),
    ]);
}

/// A read during a write that creates its file, beside a commit and a
/// concurrent write (found once in a plain `cargo test`: the read came
/// between the create and the write, and found the file empty).
#[test]
fn shrunk_a_read_during_a_write_that_creates_its_file() {
    let write = |path: &str, offset, len, seed| Op::Write {
        path: path.into(),
        offset,
        len,
        seed,
    };
    check(&[
        write("c", 36852, 6296, 9692294003719652731),
        Op::Commit,
        Op::ReadDuringWrite(
            Box::new(write("y", 45405, 61677, 477547113746784315)),
            "y".into(),
        ),
        Op::DuringCommit(Box::new(write("a", 4902, 12228, 6071440631163092684))),
        write("a/c", 65346, 67179, 12559924961733502713),
        Op::Mkfifo("a/c".into()),
    ]);
}

/// A commit's staged copies are removed in the background after it
/// returns; files written again at once (copied up under the same names)
/// must keep their new bytes, through a remount too.
#[test]
fn writes_right_after_a_commit_outlive_its_sweep() {
    let env = Env::new_local();
    let model = Model::new(&env);
    let mut core = Core::open(&env);
    let write = |i: usize, seed| Op::Write {
        path: format!("c/f{i}"),
        offset: 0,
        len: 100,
        seed,
    };
    let mut ops = vec![Op::Mkdir("c".into())];
    ops.extend((0..3000).map(|i| write(i, 1)));
    ops.push(Op::Commit);
    ops.extend((0..3000).rev().map(|i| write(i, 2)));
    ops.push(Op::Remount);
    for op in &ops {
        assert_eq!(core.apply(op), model.apply(op), "{op:?}");
    }
    assert_eq!(core.tree("staging", ""), model.tree());
}

/// The kernel's request thread tries lookups, attributes and opens where
/// nothing may wait (`detafs::nowait`): what needs staging's database (or
/// the store, or the disk) is refused there, to be run again on a worker,
/// never answered otherwise; what memory holds is answered.
#[test]
fn where_nothing_may_wait_staging_is_refused_and_memory_answers() {
    use detafs::fs::{ROOT, VERSIONS};
    use detafs::nowait::attempt;
    let env = Env::new_local();
    let mut core = Core::open(&env);
    let write = Op::Write {
        path: "x".into(),
        offset: 0,
        len: 10,
        seed: 1,
    };
    core.apply(&write).unwrap();
    core.apply(&Op::Commit).unwrap();
    let fs = core.fs();
    let staging = fs.lookup(ROOT, b"staging").unwrap().ino;
    let control = fs.lookup(ROOT, b".detafs").unwrap().ino;
    let status = fs.lookup(control, b"status").unwrap().ino;
    let refused =
        |r: Result<detafs::fs::Attr, detafs::Error>| matches!(r, Err(detafs::Error::WouldBlock));
    assert!(refused(attempt(|| fs.lookup(ROOT, b"staging"))));
    assert!(refused(attempt(|| fs.lookup(staging, b"x"))));
    assert!(refused(attempt(|| fs.getattr(staging))));
    assert!(refused(attempt(|| fs.getattr(status))));
    assert!(attempt(|| fs.getattr(ROOT)).is_ok());
    assert!(attempt(|| fs.lookup(VERSIONS, b"latest")).is_ok());
    let missing = attempt(|| fs.lookup(VERSIONS, b"v9"));
    assert!(
        matches!(missing, Err(detafs::Error::Fs { .. })),
        "{missing:?}"
    );
    // Where waiting is allowed, the same requests are answered.
    assert_eq!(fs.lookup(staging, b"x").unwrap().size, 10);
    assert!(fs.getattr(status).is_ok());
}

/// `.detafs/status` is read on a connection of its own: it answers, with
/// what staging holds, while staging's lock is held (here by an fsync
/// held at `staging-sync`), and sees changes made after it was read.
#[cfg(feature = "failpoints")]
#[test]
fn status_is_read_while_staging_is_locked() {
    use detafs::fs::{Caller, ROOT};
    let env = Env::new_local();
    let mut core = Core::open(&env);
    for op in [
        Op::Write {
            path: "a".into(),
            offset: 0,
            len: 10,
            seed: 1,
        },
        Op::Commit,
        Op::Write {
            path: "b".into(),
            offset: 0,
            len: 10,
            seed: 2,
        },
    ] {
        core.apply(&op).unwrap();
    }
    let fs = core.fs();
    let root = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
    };
    let status = || {
        let control = fs.lookup(ROOT, b".detafs").unwrap().ino;
        let ino = fs.lookup(control, b"status").unwrap().ino;
        let fh = fs.open(ino, libc::O_RDONLY, &root).unwrap().fh;
        let mut text = Vec::new();
        fs.read(fh, 0, 4096, &mut text).unwrap();
        fs.release(fh);
        String::from_utf8(text).unwrap()
    };
    assert_eq!(status(), "A b\n");
    let staging = fs.lookup(ROOT, b"staging").unwrap().ino;
    let b = fs.lookup(staging, b"b").unwrap().ino;
    let fh = fs.open(b, libc::O_RDWR, &root).unwrap().fh;
    let release = env.path("release-sync");
    fail::cfg("staging-sync", &format!("return({})", release.display())).unwrap();
    std::thread::scope(|s| {
        let syncing = s.spawn(|| fs.fsync(fh));
        let held = env.path("release-sync.held");
        while !held.exists() {
            std::thread::yield_now();
        }
        // Staging's lock is held now: status answers anyway.
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || tx.send(status()).unwrap());
        let seen = rx.recv_timeout(std::time::Duration::from_secs(120));
        std::fs::write(&release, b"").unwrap();
        assert_eq!(seen.expect("status waited on staging's lock"), "A b\n");
        syncing.join().unwrap().unwrap();
    });
    fail::cfg("staging-sync", "off").unwrap();
    fs.release(fh);
    core.apply(&Op::Write {
        path: "a".into(),
        offset: 0,
        len: 3,
        seed: 3,
    })
    .unwrap();
    let fs = core.fs();
    let control = fs.lookup(ROOT, b".detafs").unwrap().ino;
    let ino = fs.lookup(control, b"status").unwrap().ino;
    let fh = fs.open(ino, libc::O_RDONLY, &root).unwrap().fh;
    let mut text = Vec::new();
    fs.read(fh, 0, 4096, &mut text).unwrap();
    assert_eq!(text, b"M a\nA b\n");
}
