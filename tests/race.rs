//! Two `detafs commit` processes on one dataset at once: disjoint changes both
//! land as consecutive versions; changes to the same path give exactly one
//! version and a conflict, never a lost or half-written version.

mod common;

use common::{Env, fingerprint, sample_tree};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// Starts `detafs commit` from `a` and from `b` at once; waits for both.
/// Commits `a` and `b` at once; `forced`: both are held before their
/// commit point until both have scanned the same base, then race for it.
fn commit_both(env: &Env, a: &Path, b: &Path, forced: bool) -> (Output, Output) {
    let holds = [
        common::Hold::named(env, "before-record", "a"),
        common::Hold::named(env, "before-record", "b"),
    ];
    let spawn = |dir: &Path, msg: &str, hold: &common::Hold| {
        env.commit_command(dir, msg, if forced { &hold.spec } else { "" })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (ca, cb) = (spawn(a, "a", &holds[0]), spawn(b, "b", &holds[1]));
    if forced {
        holds.iter().for_each(common::Hold::reached);
        holds.iter().for_each(common::Hold::release);
    }
    (
        ca.wait_with_output().unwrap(),
        cb.wait_with_output().unwrap(),
    )
}

fn copy_tree(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .args(["-a"])
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Two working copies of `from` for the two committers of a round.
fn two_copies(env: &Env, from: &Path, round: u32) -> (PathBuf, PathBuf) {
    let (a, b) = (
        env.path(&format!("a{round}")),
        env.path(&format!("b{round}")),
    );
    copy_tree(from, &a);
    copy_tree(from, &b);
    (a, b)
}

#[test]
fn disjoint_concurrent_commits_both_land_consecutively() {
    let env = Env::new();
    let base = env.path("base");
    sample_tree(&base, 1);
    env.commit(&base, "base");
    for round in 0..6 {
        // Every other round forced (`commit_both`); the others race
        // naturally.
        let forced = round % 2 == 0;
        let (a, b) = two_copies(&env, &base, round);
        std::fs::write(a.join(format!("from-a-{round}.txt")), b"a").unwrap();
        std::fs::write(b.join(format!("from-b-{round}.txt")), b"b").unwrap();
        std::fs::write(b.join("sub/deeper/note.txt"), format!("b{round}")).unwrap();
        let n = env.log().len();
        let (oa, ob) = commit_both(&env, &a, &b, forced);
        for o in [&oa, &ob] {
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let va = String::from_utf8(oa.stdout).unwrap().trim().to_string();
        let vb = String::from_utf8(ob.stdout).unwrap().trim().to_string();
        let mut got = [va.clone(), vb];
        got.sort();
        assert_eq!(
            got,
            [format!("v{}", n + 1), format!("v{}", n + 2)],
            "round {round}"
        );
        let out = env.path(&format!("out{round}"));
        env.ok(&["export", "ds", "latest", out.to_str().unwrap()]);
        let fp_out = fingerprint(&out);
        let (has_a, has_b) = (
            fp_out.contains_key(format!("from-a-{round}.txt").as_bytes()),
            fp_out.contains_key(format!("from-b-{round}.txt").as_bytes()),
        );
        let a_was_later = va == format!("v{}", n + 2);
        // The later version always holds its own change...
        assert!(if a_was_later { has_a } else { has_b }, "round {round}");
        // ...and, when both started from the same version (always so when
        // forced), the other one's too: rebased, not overwritten. Unforced,
        // the later one may have started after the first landed; then its
        // directory simply did not have the other file.
        if forced {
            assert!(has_a && has_b, "round {round}: a change was lost");
        }
        if has_b {
            assert_eq!(
                std::fs::read_to_string(out.join("sub/deeper/note.txt")).unwrap(),
                format!("b{round}")
            );
        }
        // Next round starts from the merged state.
        std::fs::remove_dir_all(&base).unwrap();
        copy_tree(&out, &base);
    }
    assert!(env.run(&["verify"]).status.success());
}

#[test]
fn conflicting_concurrent_commits_give_one_version_and_one_conflict() {
    let env = Env::new();
    let base = env.path("base");
    sample_tree(&base, 2);
    env.commit(&base, "base");
    for round in 0..6 {
        // Every other round forced (`commit_both`); the others race
        // naturally.
        let forced = round % 2 == 0;
        let current = env.path(&format!("cur{round}"));
        env.ok(&["export", "ds", "latest", current.to_str().unwrap()]);
        let (a, b) = two_copies(&env, &current, round);
        std::fs::write(a.join("a.csv"), format!("id\n{round}a\n")).unwrap();
        std::fs::write(b.join("a.csv"), format!("id\n{round}b\n")).unwrap();
        let n = env.log().len();
        let (oa, ob) = commit_both(&env, &a, &b, forced);
        let codes = [oa.status.code(), ob.status.code()];
        let log = env.log();
        if codes == [Some(0), Some(0)] {
            // Not concurrent after all: the second saw the first as its base
            // and replaced a.csv, a plain sequential history.
            assert!(!forced, "forced race did not conflict");
            assert_eq!(log.len(), n + 2);
            continue;
        }
        assert!(
            codes.contains(&Some(0)) && codes.contains(&Some(3)),
            "round {round}: {codes:?}"
        );
        let (winner, loser) = if codes[0] == Some(0) {
            ("a", &ob)
        } else {
            ("b", &oa)
        };
        let err = String::from_utf8_lossy(&loser.stderr);
        assert!(err.contains("conflict") && err.contains("a.csv"), "{err}");
        assert_eq!(log.len(), n + 1, "round {round}: exactly one new version");
        assert_eq!(
            env.ok(&["cat", "ds", "latest", "a.csv"]),
            format!("id\n{round}{winner}\n")
        );
    }
    assert!(env.run(&["verify"]).status.success());
}
