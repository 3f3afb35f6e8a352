//! Staged work is never lost: a control-file request is carried out once,
//! at the end of its open as the kernel defines it, never from a writer
//! that died mid-way; the kernel sees staging as the daemon has it when a
//! request is done; a version has one name; `last-error` is the last
//! request's.

mod common;

use common::{Env, Hold, Mount, status, two_versions};
use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// Staged work a careless request would lose: a change and a file never
/// committed.
fn stage_work(m: &Mount) {
    std::fs::write(m.path("staging/a.csv"), "changed").unwrap();
    std::fs::write(m.path("staging/new.txt"), "never committed").unwrap();
}

const STAGED: [&str; 2] = ["M a.csv", "A new.txt"];

/// `sh -c SCRIPT` run in the mount's folder; its output, asserting success.
fn sh(m: &Mount, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&m.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn last_error(m: &Mount) -> String {
    std::fs::read_to_string(m.path(".detafs/last-error")).unwrap()
}

/// The forms where a copy of the request's descriptor is closed before
/// the request is whole (a command of a shell group, a `dup`, a child
/// that inherits it) do what the whole request says: check out d/b.csv
/// of v1, and nothing else.
#[test]
fn a_request_is_carried_out_at_its_last_close_only() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let forms = [
        // `true` inherits the descriptor and closes it first.
        "{ echo v1; /bin/true; echo d/b.csv; } > .detafs/checkout",
        "{ echo v1; sh -c 'exit 0'; printf 'd/b.csv\\n'; } > .detafs/checkout",
        // A duplicate closed mid-way (python's os.dup), and a child that
        // inherits the descriptor and exits before the rest is written.
        "exec 3>.detafs/checkout; printf 'v1\\n' >&3; exec 4>&3; exec 4>&-; printf 'd/b.csv\\n' >&3; exec 3>&-",
        "exec 3>.detafs/checkout; printf 'v1\\n' >&3; sh -c 'exec 3>&-'; printf 'd/b.csv\\n' >&3; exec 3>&-",
        // A read of the mount after a child's close: it waits a while at
        // most for a RELEASE that is not coming (`fs/orders.rs`).
        "exec 3>.detafs/checkout; printf 'v1\\n' >&3; sh -c 'exec 3>&-'; cat staging/a.csv; printf 'd/b.csv\\n' >&3; exec 3>&-",
    ];
    for form in forms {
        stage_work(&m);
        sh(&m, "rm -rf staging/d");
        sh(&m, form);
        assert_eq!(
            status(&env),
            ["M a.csv", "A d/b.csv", "A new.txt"],
            "{form}"
        );
        assert_eq!(
            std::fs::read_to_string(m.path("staging/new.txt")).unwrap(),
            "never committed",
            "{form}"
        );
        assert_eq!(last_error(&m), "", "{form}");
    }
}

/// A writer killed after any byte of its request, or failing, changes
/// nothing, and `last-error` says why; the whole request written by a
/// writer that exits normally is carried out.
#[test]
fn a_writer_killed_mid_request_changes_nothing() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    stage_work(&m);
    let write_then = |file: &str, text: &str, end: &str| {
        let script = format!("exec 3>.detafs/{file}; printf '%s' \"$1\" >&3; {end}");
        let out = Command::new("sh")
            .args(["-c", &script, "writer", text])
            .current_dir(&m.dir)
            .output()
            .unwrap();
        out.status
    };
    let orders = [("checkout", "v1\nd/b.csv\n"), ("restore", "a.csv\n")];
    for (file, text) in orders {
        for cut in 1..=text.len() {
            let part = &text[..cut];
            for end in ["kill -9 $$", "kill -TERM $$", "exit 3"] {
                let st = write_then(file, part, end);
                assert!(!st.success(), "{end}");
                assert_eq!(status(&env), STAGED, "{file} {part:?} then {end}");
                let why = last_error(&m);
                assert!(
                    why.contains("killed by signal") || why.contains("exited with status 3"),
                    "{file} {part:?} then {end}: {why}"
                );
            }
        }
    }
    // Whole, closed normally: carried out.
    assert!(write_then("restore", "a.csv\n", "exit 0").success());
    assert_eq!(status(&env), ["A new.txt"]);
    assert_eq!(last_error(&m), "");
}

/// The shell's next command sees a request carried out: the close returns
/// before the daemon hears of it, and every request after it waits.
#[test]
fn the_next_command_sees_the_request_carried_out() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let out = sh(
        &m,
        "for i in 1 2 3 4 5 6 7 8 9 10; do \
           echo v1 > .detafs/checkout; cat staging/a.csv; echo; \
           echo . > .detafs/restore; cat staging/a.csv; echo; \
         done",
    );
    assert_eq!(out, "1\n11\n".repeat(10));
}

/// A RELEASE the kernel sends late (held in the daemon here, as a loaded
/// kernel's background queue holds it) still orders the shell's next
/// command: from the close on, the mount waits for it.
#[test]
fn a_late_release_still_orders_the_next_command() {
    let env = Env::new();
    two_versions(&env);
    let late = Hold::new(&env, "order-release");
    // Longer than any wait of the test's own: only the RELEASE ends it.
    let m = env.mount_env(&late.spec, &[("DETAFS_TEST_RELEASE_WAIT", "600s")]);
    // Children closing the copies they inherited (a shell writing the
    // request, another doing nothing) are not the request's end: the
    // `cat` after them is not held (else the RELEASE held here would
    // never come); the opener's close is.
    let shell = Command::new("sh")
        .current_dir(&m.dir)
        .args([
            "-c",
            "exec 3>.detafs/checkout; sh -c \"printf 'v1\\n' >&3\"; sh -c true; cat staging/a.csv; echo; \
             exec 3>&-; cat staging/a.csv; echo; \
             echo . > .detafs/restore; cat staging/a.csv",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    late.reached();
    late.release();
    let out = shell.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "11\n1\n11");
}

/// An append after a checkout that replaced the file goes to the file's
/// end, even while the kernel still holds the size it had before (what it
/// is told to drop is held back here, as a loaded kernel may take it late),
/// with the kernel passing writes through to the copy or not.
#[test]
fn an_append_after_a_checkout_goes_to_the_files_end() {
    for passthrough in [true, false] {
        appends_to_the_end(passthrough);
    }
}

fn appends_to_the_end(passthrough: bool) {
    let env = Env::new();
    two_versions(&env);
    let notices = Hold::new(&env, "kernel-notice");
    let spec = match passthrough {
        true => notices.spec.clone(),
        false => format!("{};passthrough=return(fail)", notices.spec),
    };
    let m = env.mount_env(&spec, &[]);
    std::fs::write(m.path("staging/a.csv"), "t0\n").unwrap();
    let out = Command::new("sh")
        .current_dir(&m.dir)
        .args([
            "-c",
            "printf 'v1\\n.\\n' > .detafs/checkout; echo t4 >> staging/a.csv; cat staging/a.csv",
        ])
        .output()
        .unwrap();
    notices.release();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1t4\n",
        "passthrough {passthrough}"
    );
    assert_eq!(std::fs::read(m.path("staging/a.csv")).unwrap(), b"1t4\n");
}

/// The CLI reads back the handle it wrote its request through: it learns
/// the outcome from the request itself, and a refused one changes nothing.
#[test]
fn the_cli_learns_the_outcome_of_its_own_request() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    stage_work(&m);
    let (_, err) = env.fails(&["checkout", "ds", "v9", "a.csv"]);
    assert!(err.contains("v9"), "{err}");
    let (_, err) = env.fails(&["restore", "ds", "nowhere.csv"]);
    assert!(err.contains("nowhere.csv"), "{err}");
    assert_eq!(status(&env), STAGED);
    // The same read through a shell: `done`, or the refusal.
    let said = sh(
        &m,
        "exec 3<>.detafs/restore; printf 'a.csv\\n' >&3; cat <&3; exec 3>&-",
    );
    assert_eq!(said, "done\n");
    assert_eq!(status(&env), ["A new.txt"]);
    let out = Command::new("sh")
        .args([
            "-c",
            "exec 3<>.detafs/checkout; printf 'v9\\n' >&3; cat <&3",
        ])
        .current_dir(&m.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(last_error(&m).contains("v9"), "{}", last_error(&m));
}

/// `.detafs/last-error` describes the last request only.
#[test]
fn last_error_describes_the_last_request_only() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    stage_work(&m);
    sh(&m, "echo v9 > .detafs/checkout");
    assert!(last_error(&m).contains("v9"), "{}", last_error(&m));
    sh(&m, "echo a.csv > .detafs/restore");
    assert_eq!(last_error(&m), "");
    sh(&m, "echo nowhere > .detafs/restore");
    assert!(last_error(&m).contains("nowhere"));
    sh(&m, "echo refresh > .detafs/refresh");
    assert_eq!(last_error(&m), "");
}

/// Names a restore or checkout removes or brings back are what the
/// kernel sees as soon as the request is done: a shell's `>`, `>>` and
/// Python's `open('w')` create the name again at once; `stat` and a
/// listing agree.
#[test]
fn a_name_a_restore_removed_can_be_created_at_once() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    for (i, create) in [
        "echo again > staging/x.txt",
        "echo again >> staging/x.txt",
        "python3 -c \"open('staging/x.txt', 'w').write('again\\n')\"",
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(m.path("staging/x.txt"), "staged").unwrap();
        // Looked up and its attributes cached by the kernel.
        assert_eq!(std::fs::metadata(m.path("staging/x.txt")).unwrap().len(), 6);
        // Through the control file, and through the CLI.
        let out = match i % 2 {
            0 => sh(
                &m,
                &format!("echo x.txt > .detafs/restore; {create}; cat staging/x.txt"),
            ),
            _ => {
                env.ok(&["restore", "ds", "x.txt"]);
                sh(&m, &format!("{create}; cat staging/x.txt"))
            }
        };
        assert_eq!(out, "again\n", "{create}");
        sh(&m, "echo x.txt > .detafs/restore");
        assert!(
            std::fs::metadata(m.path("staging/x.txt")).is_err(),
            "{create}"
        );
        let listed = std::fs::read_dir(m.path("staging"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .any(|n| n == "x.txt");
        assert!(!listed, "{create}");
    }
    // Looked up, its attributes kept by the kernel, then restored away by
    // the CLI (or a program that reads the request's handle back): `stat`
    // says so as soon as it returns.
    for _ in 0..5 {
        std::fs::write(m.path("staging/y.txt"), "staged").unwrap();
        let y = m.path("staging/y.txt");
        assert!(std::fs::metadata(&y).is_ok() && std::fs::metadata(&y).is_ok());
        env.ok(&["restore", "ds", "y.txt"]);
        assert!(std::fs::metadata(&y).is_err());
    }
    // A checkout that brings a name back and takes one away.
    std::fs::write(m.path("staging/c.csv"), "mine").unwrap();
    let ino = std::fs::metadata(m.path("staging/c.csv")).unwrap().ino();
    let out = sh(
        &m,
        "printf 'v1\\n' > .detafs/checkout; cat staging/d/b.csv; ls staging; \
         echo made > staging/c.csv; cat staging/c.csv",
    );
    assert_eq!(out, "2a.csv\nd\nmade\n");
    assert_ne!(
        std::fs::metadata(m.path("staging/c.csv")).unwrap().ino(),
        ino
    );
}

/// A version has one name, `vN`: the mount and the CLI agree on every
/// other spelling (missing), on both connections and read-only mounts.
#[test]
fn a_version_has_one_name() {
    let spellings = [
        "v1", "v2", "v+1", "v01", "v001", "v-1", "v 1", "v1 ", "v", "v0", "vv1", "V1", "v1.0",
        "v٣", "v１", "v0x1", "v1e0", "v00", "v10", "v2~1", "latest~1", "+1", "01", "1",
    ];
    for extra in [&[][..], &["--read-only"][..]] {
        let env = Env::new();
        two_versions(&env);
        let m = env.mount(extra);
        for s in spellings {
            let mounted = std::fs::symlink_metadata(m.path(&format!("versions/{s}"))).is_ok();
            let cli = env.run(&["ls", "ds", s]).status.success();
            let canonical = matches!(s, "v1" | "v2");
            assert_eq!(mounted, canonical, "versions/{s} {extra:?}");
            // The CLI takes N, latest~N and TAG~N too; never another
            // spelling of vN.
            let cli_form = canonical || matches!(s, "1" | "v2~1" | "latest~1");
            assert_eq!(cli, cli_form, "detafs ls ds {s:?}");
        }
        // A shell standing in versions/v1 keeps that name.
        let pwd = sh(&m, "cd versions/v1 && ls ../v01 >/dev/null 2>&1; pwd");
        assert!(pwd.trim_end().ends_with("versions/v1"), "{pwd}");
    }
}

/// Ctrl-C of `detafs commit` cancels that command's own commit only: one
/// waiting for its turn beside a running commit is withdrawn ("nothing
/// was committed"), and the running one lands with its own message and
/// changes.
#[test]
fn a_cancel_stops_only_its_own_commit() {
    let env = Env::new();
    two_versions(&env);
    let frozen = common::Hold::new(&env, "staging-frozen");
    let m = env.mount_failing(&[], &frozen.spec);
    std::fs::write(m.path("staging/a.csv"), "A's change").unwrap();
    let progress = || -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(m.path(".detafs/progress")).unwrap()).unwrap()
    };
    let first = Command::new("sh")
        .args(["-c", "echo A > .detafs/commit"])
        .current_dir(&m.dir)
        .spawn()
        .unwrap();
    frozen.reached();
    let second = env
        .command_for(&["commit", "ds", "-m", "B"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // B's write waits in the kernel, which lets one write to the commit
    // file in at a time, or in the daemon for its turn. (A thread of B in
    // a `write` system call that waits on the mount: B's other requests
    // before it, its open of the commit file among them, come before B
    // takes Ctrl-C, and a signal then would end it unasked.)
    let waits = |pid: u32| {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks.flatten().any(|t| {
            let writing = std::fs::read_to_string(t.path().join("syscall"))
                .is_ok_and(|s| s.split_whitespace().next() == Some("1"));
            writing
                && std::fs::read_to_string(t.path().join("wchan"))
                    .is_ok_and(|w| w.starts_with("fuse_file_write") || w.contains("request_wait"))
        }) || progress()["waiting"] == 1
    };
    common::within(std::time::Duration::from_secs(20), "B waiting", || {
        waits(second.id())
    });
    assert!(common::signal(second.id(), libc::SIGINT));
    // Withdrawn; A is not touched.
    common::within(std::time::Duration::from_secs(20), "B withdrawn", || {
        progress()["withdrawn"] == 1 || progress()["cancelling"] == true
    });
    assert_eq!(progress()["committing"], true);
    assert_eq!(progress()["cancelling"], false);
    frozen.release();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success());
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("nothing was committed"), "{err}");
    let log = env.log();
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["message"], "A");
    assert_eq!(status(&env), Vec::<String>::new());
    // A cancel that names a commit not under way touches nothing.
    let said = Command::new("sh")
        .args(["-c", "exec 3<>.detafs/cancel; echo 99 >&3; cat <&3"])
        .current_dir(&m.dir)
        .output()
        .unwrap();
    assert!(!said.status.success());
    assert!(last_error(&m).contains("no commit"), "{}", last_error(&m));
}

/// The trash's entries as `detafs trash --json` lists them, newest first:
/// (entry, what, paths, bytes).
fn trash(env: &Env) -> Vec<(u64, String, Vec<String>, u64)> {
    let v: serde_json::Value = serde_json::from_str(&env.ok(&["trash", "ds", "--json"])).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["entry"].as_u64().unwrap(),
                e["what"].as_str().unwrap().to_string(),
                e["paths"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_string())
                    .collect(),
                e["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn read(m: &Mount, rel: &str) -> Vec<u8> {
    std::fs::read(m.path(rel)).unwrap()
}

/// What a restore or checkout replaces, files never committed included, is
/// kept: `detafs restore --undo` and `.detafs/undo` bring it back (the
/// newest, or an entry by number), and an undo is undone the same way;
/// `detafs trash` lists it; a commit keeps nothing there.
#[test]
fn discarded_work_is_brought_back() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    stage_work(&m);
    std::fs::create_dir_all(m.path("staging/new/deep")).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(m.path("staging/new/deep/x.bin"), &big).unwrap();
    std::fs::hard_link(m.path("staging/new.txt"), m.path("staging/new/link.txt")).unwrap();
    std::fs::remove_file(m.path("staging/c.csv")).unwrap();
    let before = status(&env);
    assert_eq!(
        before,
        [
            "M a.csv",
            "D c.csv",
            "A new/deep/x.bin",
            "A new/link.txt",
            "A new.txt",
        ]
    );

    env.ok(&["restore", "ds"]);
    assert!(status(&env).is_empty());
    let kept = trash(&env);
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].1.as_str(), &kept[0].2[..]),
        ("restore", &[".".to_string()][..])
    );
    assert!(kept[0].3 >= big.len() as u64, "{kept:?}");
    env.ok(&["restore", "ds", "--undo"]);
    assert_eq!(status(&env), before);
    assert_eq!(read(&m, "staging/a.csv"), b"changed");
    assert_eq!(read(&m, "staging/new/deep/x.bin"), big);
    assert_eq!(read(&m, "staging/new/link.txt"), b"never committed");
    let ino = |rel: &str| std::fs::metadata(m.path(rel)).unwrap().ino();
    assert_eq!(ino("staging/new.txt"), ino("staging/new/link.txt"));
    assert!(!m.path("staging/c.csv").exists());
    // The undo kept what it replaced (the restored staging): undone again,
    // and again.
    assert_eq!(trash(&env)[0].1, format!("undo of {}", kept[0].0));
    env.ok(&["restore", "ds", "--undo"]);
    assert!(status(&env).is_empty());
    env.ok(&["restore", "ds", "--undo"]);
    assert_eq!(status(&env), before);

    // Through the mount's control files: a path, then a checkout of all.
    sh(&m, "echo a.csv > .detafs/restore");
    assert_eq!(read(&m, "staging/a.csv"), b"11");
    sh(&m, "echo v1 > .detafs/checkout");
    assert_eq!(read(&m, "staging/d/b.csv"), b"2");
    assert!(!m.path("staging/new.txt").exists());
    let newest = trash(&env);
    assert_eq!(newest[0].1, "checkout v1");
    assert_eq!(
        (newest[1].1.as_str(), &newest[1].2[..]),
        ("restore", &["a.csv".to_string()][..])
    );
    assert_eq!(sh(&m, "exec 3<>.detafs/undo; echo >&3; cat <&3"), "done\n");
    assert_eq!(read(&m, "staging/new.txt"), b"never committed");
    assert_eq!(read(&m, "staging/a.csv"), b"11");
    assert!(!m.path("staging/d/b.csv").exists());
    // An older entry by its number: a.csv as it was before its restore.
    env.ok(&["restore", "ds", "--undo", &newest[1].0.to_string()]);
    assert_eq!(read(&m, "staging/a.csv"), b"changed");
    assert_eq!(status(&env), before);
    // A file in the way of a checked-out path's folders is kept too. (The
    // request is read back: the kernel may walk through `d` as the file it
    // keeps for up to a second after a request it was not told of in time;
    // docs/semantics.md.)
    sh(&m, "rm -rf staging/d; echo in the way > staging/d");
    assert_eq!(
        sh(
            &m,
            "exec 3<>.detafs/checkout; printf 'v1\\nd/b.csv\\n' >&3; cat <&3"
        ),
        "done\n"
    );
    assert_eq!(read(&m, "staging/d/b.csv"), b"2");
    env.ok(&["restore", "ds", "--undo"]);
    assert_eq!(read(&m, "staging/d"), b"in the way\n");
    sh(&m, "rm staging/d; mkdir staging/d");
    assert_eq!(status(&env), before);
    // Bad requests change nothing and say why.
    let (_, err) = env.fails(&["restore", "ds", "--undo", "999"]);
    assert!(err.contains("999"), "{err}");
    sh(&m, "echo nonsense > .detafs/undo");
    assert!(last_error(&m).contains("nonsense"), "{}", last_error(&m));
    assert_eq!(status(&env), before);

    // A commit is history, not trash; health tells what the trash holds.
    let entries = trash(&env).len();
    env.ok(&["commit", "ds", "-m", "kept"]);
    assert_eq!(trash(&env).len(), entries);
    let health: serde_json::Value = serde_json::from_slice(&read(&m, ".detafs/health")).unwrap();
    assert_eq!(health["trash"]["entries"], entries, "{health}");
    let bytes: u64 = trash(&env).iter().map(|e| e.3).sum();
    assert_eq!(health["trash"]["bytes"], bytes);
}

/// Without a mount, the command that owns staging keeps and brings back
/// the same; the trash keeps within the size set, the newest entry
/// whatever its size.
#[test]
fn the_trash_keeps_within_its_bounds() {
    let env = Env::new();
    two_versions(&env);
    env.ok(&["checkout", "ds", "v1"]);
    let v1 = status(&env);
    env.ok(&["restore", "ds"]);
    assert!(status(&env).is_empty());
    env.ok(&["restore", "ds", "--undo"]);
    assert_eq!(status(&env), v1);
    let (_, err) = env.fails(&["trash", "ds", "--max-size", "lots"]);
    assert!(err.contains("lots"), "{err}");

    // A limits file that does not decode never fails a restore; the trash
    // command names it.
    let limits = std::fs::read_dir(env.staging())
        .unwrap()
        .flatten()
        .map(|e| e.path().join("ds/trash.json"))
        .find(|p| p.parent().unwrap().join("staging.sqlite").exists())
        .unwrap();
    std::fs::write(&limits, "not json").unwrap();
    env.ok(&["checkout", "ds", "v1"]);
    env.ok(&["restore", "ds"]);
    let (_, err) = env.fails(&["trash", "ds"]);
    assert!(err.contains("trash.json"), "{err}");
    std::fs::remove_file(&limits).unwrap();
    env.ok(&["trash", "ds", "--max-size", "1000"]);
    let m = env.mount(&[]);
    for (name, size) in [("one", 600), ("two", 600), ("three", 5000)] {
        std::fs::write(m.path(&format!("staging/{name}")), vec![1u8; size]).unwrap();
        env.ok(&["restore", "ds", name]);
    }
    let kept = trash(&env);
    assert_eq!(kept[0].2, ["three"]);
    assert_eq!(kept[0].3, 5000);
    assert!(
        kept.iter().all(|e| e.2 != ["one"] && e.2 != ["two"]),
        "{kept:?}"
    );
    // A smaller bound set while mounted applies at once: the newest stays.
    env.ok(&["trash", "ds", "--max-size", "1"]);
    assert_eq!(trash(&env).len(), 1);
    env.ok(&["restore", "ds", "--undo"]);
    assert_eq!(read(&m, "staging/three").len(), 5000);
}

/// A step of `restores_and_undos_agree_with_the_model`.
#[derive(Clone, Debug)]
enum Step {
    /// `>`, `>>` or Python's `open('w')` of a name, with a text.
    Write(usize, u8, u8),
    Remove(usize),
    /// A name, or (None) everything.
    Restore(Option<usize>),
    Checkout(u64, Option<usize>),
    Undo,
}

const NAMES: [&str; 5] = ["a.csv", "c.csv", "x.txt", "d/b.csv", "d/y.txt"];

/// A staged file: its content and the version it reads through from
/// (None: written in staging).
type Staged = Option<(String, Option<u64>)>;

/// Staging as the model has it: files, whether `d/` exists, and the
/// version its root still equals (nothing changed since a restore or
/// checkout of everything).
#[derive(Clone, Debug, PartialEq)]
struct State {
    files: std::collections::BTreeMap<String, (String, Option<u64>)>,
    d: bool,
    clean: Option<u64>,
}

enum Kept {
    All(State),
    Path(String, Staged),
}

/// v1 and v2 (`two_versions`) as staging has them after a checkout.
fn version(v: u64) -> State {
    let files: &[(&str, &str)] = match v {
        1 => &[("a.csv", "1"), ("d/b.csv", "2")],
        _ => &[("a.csv", "11"), ("c.csv", "3")],
    };
    State {
        files: files
            .iter()
            .map(|(n, c)| (n.to_string(), (c.to_string(), Some(v))))
            .collect(),
        d: true,
        clean: Some(v),
    }
}

/// What the model expects of a step: the state after it; entries kept.
fn model_step(now: &mut State, trash: &mut Vec<Kept>, step: &Step) {
    let path_op = |now: &mut State, trash: &mut Vec<Kept>, name: &str, v: u64| {
        let target = version(v).files.get(name).cloned();
        let staged = now.files.get(name).cloned();
        if target.is_none() && staged.is_none() {
            return; // refused: neither staged nor in that version
        }
        if staged != target {
            trash.push(Kept::Path(name.into(), staged));
        }
        match target {
            Some(t) => now.files.insert(name.into(), t),
            None => now.files.remove(name),
        };
        now.d |= name.starts_with("d/");
        now.clean = None;
    };
    let all_op = |now: &mut State, trash: &mut Vec<Kept>, v: u64| {
        if now.clean != Some(v) {
            trash.push(Kept::All(now.clone()));
        }
        *now = version(v);
    };
    match *step {
        Step::Write(n, how, t) => {
            let name = NAMES[n];
            let text = format!("t{t}");
            let content = match how % 3 {
                0 => format!("{text}\n"),
                1 => match now.files.get(name) {
                    Some((c, _)) => format!("{c}{text}\n"),
                    None => format!("{text}\n"),
                },
                _ => text,
            };
            now.files.insert(name.into(), (content, None));
            now.d |= name.starts_with("d/");
            now.clean = None;
        }
        Step::Remove(n) => {
            if now.files.remove(NAMES[n]).is_some() {
                now.clean = None;
            }
        }
        Step::Restore(None) => all_op(now, trash, 2),
        Step::Restore(Some(n)) => path_op(now, trash, NAMES[n], 2),
        Step::Checkout(v, None) => all_op(now, trash, v),
        Step::Checkout(v, Some(n)) => path_op(now, trash, NAMES[n], v),
        Step::Undo => match trash.pop() {
            None => {}
            Some(Kept::All(state)) => {
                trash.push(Kept::All(now.clone()));
                *now = state;
            }
            Some(Kept::Path(name, staged)) => {
                trash.push(Kept::Path(name.clone(), now.files.get(&name).cloned()));
                match staged {
                    Some(s) => now.files.insert(name.clone(), s),
                    None => now.files.remove(&name),
                };
                now.d |= name.starts_with("d/");
                now.clean = None;
            }
        },
    }
}

/// The step as a shell runs it in the mount, with a create right after
/// each request (the model then holds both).
fn shell_step(step: &Step) -> String {
    let path = |n: &Option<usize>| n.map_or(".", |n| NAMES[n]);
    match step {
        Step::Write(n, how, t) => {
            let name = NAMES[*n];
            let dir = if name.starts_with("d/") {
                "mkdir -p staging/d; "
            } else {
                ""
            };
            match how % 3 {
                0 => format!("{dir}echo t{t} > staging/{name}"),
                1 => format!("{dir}echo t{t} >> staging/{name}"),
                _ => format!("{dir}python3 -c \"open('staging/{name}', 'w').write('t{t}')\""),
            }
        }
        Step::Remove(n) => format!("rm -f staging/{}", NAMES[*n]),
        Step::Restore(n) => request("restore", &format!("{}\\n", path(n))),
        Step::Checkout(v, n) => request("checkout", &format!("v{v}\\n{}\\n", path(n))),
        Step::Undo => request("undo", "\\n"),
    }
}

/// A request written to `.detafs/FILE` as a shell writes it: the next
/// command runs once it is carried out. Its outcome is the model's to
/// check.
fn request(file: &str, text: &str) -> String {
    format!("printf '{text}' > .detafs/{file}")
}

/// Staging as the mount shows it, in the model's terms (origins aside).
fn seen(m: &Mount) -> (std::collections::BTreeMap<String, String>, bool) {
    let mut files = std::collections::BTreeMap::new();
    for dir in ["", "d/"] {
        let Ok(entries) = std::fs::read_dir(m.path(&format!("staging/{dir}"))) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                let name = format!("{dir}{}", e.file_name().to_str().unwrap());
                files.insert(name, std::fs::read_to_string(e.path()).unwrap());
            }
        }
    }
    (files, m.path("staging/d").is_dir())
}

fn a_step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let name = 0..NAMES.len();
    let path = proptest::option::weighted(0.8, 0..NAMES.len());
    prop_oneof![
        3 => (name.clone(), any::<u8>(), 0..10u8).prop_map(|(n, h, t)| Step::Write(n, h, t)),
        1 => name.prop_map(Step::Remove),
        2 => path.clone().prop_map(Step::Restore),
        2 => (1..=2u64, path).prop_map(|(v, p)| Step::Checkout(v, p)),
        2 => Just(Step::Undo),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(12),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Restores, checkouts and undos through the mount's control files,
    /// each followed at once by shell-style creates, agree with a model
    /// of staging and its trash: every name is what the model says the
    /// moment the request is done, and every undo brings back exactly
    /// what the last request replaced.
    #[test]
    fn restores_and_undos_agree_with_the_model(
        steps in proptest::collection::vec(a_step(), 1..14)
    ) {
        let env = Env::new();
        two_versions(&env);
        let m = env.mount(&[]);
        let (mut now, mut trash) = (version(2), Vec::new());
        let mut script = Vec::new();
        let mut i = 0;
        while i < steps.len() {
            let step = &steps[i];
            let mut line = shell_step(step);
            model_step(&mut now, &mut trash, step);
            i += 1;
            // A request, then the next write in the same shell.
            if let (false, Some(next @ Step::Write(..))) =
                (matches!(step, Step::Write(..)), steps.get(i))
            {
                line = format!("{line}; {}", shell_step(next));
                model_step(&mut now, &mut trash, next);
                i += 1;
            }
            sh(&m, &line);
            script.push(line);
            let want: std::collections::BTreeMap<String, String> =
                now.files.iter().map(|(n, (c, _))| (n.clone(), c.clone())).collect();
            proptest::prop_assert_eq!(seen(&m), (want, now.d), "after {:?}", script);
        }
    }
}

/// A count as `Display` writes it: digits, no sign, no leading zero.
fn count(s: &str) -> Option<u64> {
    let canonical = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && !(s.len() > 1 && s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// Random spellings through the mount's `versions/` and the CLI agree
/// with the rule, written out here on its own: `versions/` holds `vN`
/// alone (and `latest`); the CLI takes `vN`, `N` and `latest`, each with
/// `~N` back.
#[test]
fn random_version_spellings_follow_one_rule() {
    let env = Env::new();
    two_versions(&env);
    let m = env.mount(&[]);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64);
    let mut runner =
        proptest::test_runner::TestRunner::new(proptest::test_runner::Config::with_cases(cases));
    let spelling = "(v|V|latest|lat|)[0-9+~ v\\-٣１x.]{0,4}";
    runner
        .run(&spelling, |s| {
            // `.` and `..` are the folder and its parent, not names.
            proptest::prop_assume!(!s.is_empty() && s != "." && s != "..");
            let named = |s: &str| s.strip_prefix('v').and_then(count);
            let mounted = std::fs::symlink_metadata(m.path(&format!("versions/{s}"))).is_ok();
            let want = s == "latest" || named(&s).is_some_and(|n| (1..=2).contains(&n));
            proptest::prop_assert_eq!(mounted, want, "versions/{}", s);
            let cli = env.run(&["ls", "ds", "--", &s]).status.success();
            let want = (|| {
                let (base, back) = match s.split_once('~') {
                    Some((b, n)) => (b, count(n)?),
                    None => (s.as_str(), 0),
                };
                let n = match base {
                    "latest" => 2,
                    b if b.starts_with('v') => named(b)?,
                    b => count(b)?,
                };
                Some(n > back && n - back <= 2)
            })()
            .unwrap_or(false);
            proptest::prop_assert_eq!(cli, want, "detafs ls ds {:?}", s);
            Ok(())
        })
        .unwrap();
}

/// A request while a commit runs through the mount is carried out at
/// once (the commit works from what it froze): the version holds what was
/// staged when it began, staging keeps the request's result, and what the
/// request replaced is in the trash.
#[test]
fn a_request_during_a_commit_is_carried_out_and_kept_apart() {
    let env = Env::new();
    two_versions(&env);
    let frozen = common::Hold::new(&env, "staging-frozen");
    let m = env.mount_failing(&[], &frozen.spec);
    stage_work(&m);
    let commit = Command::new("sh")
        .args(["-c", "echo mine > .detafs/commit"])
        .current_dir(&m.dir)
        .spawn()
        .unwrap();
    frozen.reached();
    assert_eq!(
        sh(&m, "echo a.csv > .detafs/restore; cat staging/a.csv"),
        "11"
    );
    frozen.release();
    assert!(commit.wait_with_output().unwrap().status.success());
    assert_eq!(env.ok(&["cat", "ds", "v3", "a.csv"]), "changed");
    assert_eq!(env.ok(&["cat", "ds", "v3", "new.txt"]), "never committed");
    assert_eq!(read(&m, "staging/a.csv"), b"11");
    assert_eq!(status(&env), ["M a.csv"]);
    env.ok(&["restore", "ds", "--undo"]);
    assert!(
        status(&env).is_empty(),
        "a.csv as it was staged, as v3 has it"
    );
}
