//! Staged work is never lost: a control-file request is carried out once,
//! at the end of its open as the kernel defines it, never from a writer
//! that died mid-way; the kernel sees staging as the daemon has it when a
//! request is done; a version has one name; `last-error` is the last
//! request's.

mod common;

use common::{Env, Mount};
use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// v1: a.csv "1", d/b.csv "2"; v2: a.csv "11", c.csv "3", no d/.
fn two_versions(env: &Env) {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a.csv"), "1").unwrap();
    std::fs::write(src.join("d/b.csv"), "2").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("a.csv"), "11").unwrap();
    std::fs::remove_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("c.csv"), "3").unwrap();
    env.commit(&src, "v2");
}

fn status(env: &Env) -> Vec<String> {
    env.ok(&["status", "ds"])
        .lines()
        .map(str::to_string)
        .collect()
}

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
        .command()
        .args(["commit", "ds", "-m", "B"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // B's write waits in the kernel, which lets one write to the commit
    // file in at a time, or in the daemon for its turn.
    let waits = |pid: u32| {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks.flatten().any(|t| {
            std::fs::read_to_string(t.path().join("wchan"))
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
