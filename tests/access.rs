//! The store's access policy (issue 13), through a real mount used by real
//! other Unix users: each runs as its own uid with its own groups
//! (setpriv), on an `--allow-other` mount run by root.

mod common;

use common::{Env, run_ok, within};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// uid 2001 in group 3001 ("analysts" below), 2002 commits, 2003 is
/// named by no statement. No names: principals are then the numbers.
const ANALYST: (u32, u32, Option<u32>) = (2001, 2001, Some(3001));
const WRITER: (u32, u32, Option<u32>) = (2002, 2002, None);
const OUTSIDER: (u32, u32, Option<u32>) = (2003, 2003, None);
/// The analyst's uid without the analysts group.
const ANALYST_ALONE: (u32, u32, Option<u32>) = (2001, 2001, None);

/// A policy's start: root administers everything.
macro_rules! admins {
    () => {
        r#"
policies:
  - name: admins
    effect: allow
    principals: ["user:root"]
    actions: ["dataset:*"]
    resources: ["*"]
"#
    };
}

const POLICY: &str = concat!(
    admins!(),
    r#"  - name: analysts_see_published
    effect: allow
    principals: ["group:3001"]
    actions: ["dataset:read", "dataset:versions"]
    resources: ["datasets/ds/versions/published"]
  - name: analysts_no_private
    effect: deny
    principals: ["group:3001"]
    actions: ["dataset:read"]
    resources: ["datasets/ds/versions/*/files/private/*"]
  - name: writers
    effect: allow
    principals: ["user:2002"]
    actions: ["dataset:versions", "dataset:commit"]
    resources: ["datasets/ds", "datasets/ds/versions/*"]
"#
);

/// Runs `script` with sh as `who`, in `dir`.
fn as_user(who: (u32, u32, Option<u32>), dir: &Path, script: &str) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", who.0))
        .arg(format!("--regid={}", who.1));
    match who.2 {
        Some(g) => cmd.arg(format!("--groups={g}")),
        None => cmd.arg("--clear-groups"),
    };
    cmd.args(["sh", "-c", script])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

/// What `script` prints as `who` (whatever its exit status).
fn seen(who: (u32, u32, Option<u32>), dir: &Path, script: &str) -> String {
    String::from_utf8_lossy(&as_user(who, dir, script).stdout).into_owned()
}

/// Whether `script` succeeds as `who`; its stderr.
fn tried(who: (u32, u32, Option<u32>), dir: &Path, script: &str) -> (bool, String) {
    let out = as_user(who, dir, script);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `stat PATH` as `who` fails, and exactly as for a name that does not
/// exist in the same folder.
fn same_answer_as_a_name_that_does_not_exist(who: (u32, u32, Option<u32>), dir: &Path, path: &str) {
    let (ok, err) = tried(who, dir, &format!("stat {path}"));
    assert!(!ok, "{path} is seen");
    let (folder, _) = path.rsplit_once('/').unwrap();
    let absent = format!("{folder}/no-such-name");
    let (ok, other) = tried(who, dir, &format!("stat {absent}"));
    assert!(!ok);
    assert_eq!(err.replace(path, "NAME"), other.replace(&absent, "NAME"));
}

/// Three versions; v2 tagged `published`. Each has pub/, private/ and a
/// top-level file.
fn three_versions(env: &Env) {
    let src = env.path("src");
    for d in ["pub", "private", "raw"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    for v in 1..=3 {
        std::fs::write(src.join("pub/a.csv"), format!("public {v}\n")).unwrap();
        std::fs::write(src.join("private/secret.csv"), format!("secret {v}\n")).unwrap();
        std::fs::write(src.join("top.txt"), format!("top {v}\n")).unwrap();
        env.commit(&src, &format!("v{v}"));
    }
    env.ok(&["tag", "ds", "v2", "published"]);
}

/// The mount's audit trail: the lines of decisions about `uid`, once the
/// writer thread has written every decision made so far.
fn trail(env: &Env, uid: u32) -> Vec<serde_json::Value> {
    let health = env.path("mnt").join(".detafs/health");
    within(Duration::from_secs(30), "the audit trail written", || {
        let h: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&health).unwrap()).unwrap();
        h["trail_unwritten"] == 0
    });
    let mut found = Vec::new();
    let mut stack = vec![env.staging()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.file_name() == "audit.jsonl" {
                found.push(e.path());
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    std::fs::read_to_string(&found[0])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["uid"] == uid)
        .collect()
}

fn set_policy(env: &Env, text: &str) -> String {
    let file = env.path("policy.yaml");
    std::fs::write(&file, text).unwrap();
    env.ok(&["policy", "set", file.to_str().unwrap(), "-m", "test"])
}

#[test]
fn each_user_sees_reads_and_commits_what_the_policy_allows_and_nothing_else() {
    let env = Env::new();
    three_versions(&env);
    set_policy(&env, POLICY);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    // Root (an admin) walks everything first: the kernel's caches now hold
    // every name, and must not hand them to anyone else.
    let all = run_ok(Command::new("find").arg(".").current_dir(&d));
    assert!(all.contains("./versions/v1/private/secret.csv"), "{all}");
    run_ok(
        Command::new("ls")
            .arg("-lR")
            .arg("versions/")
            .current_dir(&d),
    );

    // The analyst: only the published version, without private/.
    let find = seen(ANALYST, &d, "find versions | sort");
    assert_eq!(
        find,
        "versions\nversions/latest\nversions/published\nversions/v2\nversions/v2/pub\nversions/v2/pub/a.csv\nversions/v2/raw\nversions/v2/top.txt\n"
    );
    let ls = seen(ANALYST, &d, "ls -R versions/v2 | grep -c private");
    assert_eq!(ls.trim(), "0");
    assert_eq!(seen(ANALYST, &d, "readlink versions/latest"), "v2\n");
    assert_eq!(
        seen(ANALYST, &d, "cat versions/latest/pub/a.csv"),
        "public 2\n"
    );
    // A hidden version or path is a name that does not exist.
    for path in [
        "versions/v1",
        "versions/v3/top.txt",
        "versions/v2/private",
        "versions/v2/private/secret.csv",
        "staging",
    ] {
        let (ok, err) = tried(ANALYST, &d, &format!("stat {path}"));
        assert!(!ok && err.contains("No such file"), "{path}: {err}");
    }
    // The log shows the versions it may see.
    let log = seen(ANALYST, &d, "cat .detafs/log");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("\"version\":2"), "{log}");
    // No commit.
    let (ok, err) = tried(ANALYST, &d, "echo sneaky > .detafs/commit");
    assert!(!ok && err.contains("Permission denied"), "{err}");

    // Its groups are those of the process: without the analysts group the
    // same uid sees nothing.
    assert_eq!(seen(ANALYST_ALONE, &d, "ls versions"), "");
    assert_eq!(seen(OUTSIDER, &d, "find versions"), "versions\n");
    assert_eq!(seen(OUTSIDER, &d, "cat .detafs/log"), "");
    // Named by no statement that can show a version of ds, it may not
    // search versions/ at all (the kernel's check): a name there answers
    // alike whether it exists or not.
    same_answer_as_a_name_that_does_not_exist(OUTSIDER, &d, "versions/published");
    same_answer_as_a_name_that_does_not_exist(OUTSIDER, &d, "versions/v1/top.txt");

    // The writer lists every version but may read no file, and commits as
    // itself.
    assert_eq!(
        seen(WRITER, &d, "ls versions | tr '\\n' ' '"),
        "latest published v1 v2 v3 "
    );
    let (ok, err) = tried(WRITER, &d, "cat versions/v3/top.txt");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    std::fs::write(m.path("staging/new.txt"), b"staged by root").unwrap();
    let (ok, err) = tried(WRITER, &d, "echo 'from the writer' > .detafs/commit");
    assert!(ok, "{err}");
    let log = env.log();
    assert_eq!(log[3]["message"], "from the writer");
    assert_eq!(log[3]["author"], "uid:2002");
    // The audit trail has a line per decision: the analyst's look at v1
    // (the kernel asks again after a name is not found: a line each), its
    // refused commit.
    let before = trail(&env, 2001).len();
    let (ok, _) = tried(ANALYST, &d, "cat versions/v1/top.txt");
    assert!(!ok);
    let lines = trail(&env, 2001);
    assert!(lines.len() > before, "{lines:?}");
    for l in &lines[before..] {
        assert_eq!(l["action"], "dataset:versions");
        assert_eq!(l["resource"], "datasets/ds/versions/v1");
        assert_eq!(l["allowed"], false);
        assert_eq!(
            l["principals"],
            serde_json::json!(["user:2001", "group:2001", "group:3001"])
        );
    }
    let before = trail(&env, 2001).len();
    assert_eq!(seen(ANALYST, &d, "cat versions/v2/pub/a.csv"), "public 2\n");
    let lines = trail(&env, 2001);
    let new: Vec<_> = lines[before..]
        .iter()
        .map(|l| (l["action"].clone(), l["allowed"].clone()))
        .collect();
    // The open is decided and written; v2's name is kept by the kernel
    // (every user let into versions/ sees it), so no look at it is asked.
    assert_eq!(new, [("dataset:read".into(), true.into())]);
    assert_eq!(lines.last().unwrap()["by"], "analysts_see_published");
    assert!(
        lines
            .iter()
            .any(|l| l["action"] == "dataset:commit" && l["allowed"] == false),
        "{lines:?}"
    );
    // The analyst does not see v4 (not published); the writer does.
    assert_eq!(seen(ANALYST, &d, "readlink versions/latest"), "v2\n");
    within(Duration::from_secs(10), "v4 in versions/", || {
        seen(WRITER, &d, "ls versions").contains("v4")
    });
    assert!(!seen(ANALYST, &d, "ls versions").contains("v4"));
    assert!(m.alive());
}

#[test]
fn a_policy_change_reaches_a_running_mount_and_a_bad_one_changes_nothing() {
    let env = Env::new();
    three_versions(&env);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    // No policy: Unix permissions only, everyone sees everything.
    assert_eq!(
        seen(OUTSIDER, &d, "ls versions | tr '\\n' ' '"),
        "latest published v1 v2 v3 "
    );
    // Everyone walks everything: the kernel keeps those names, for a day.
    for who in [OUTSIDER, ANALYST] {
        assert!(seen(who, &d, "find versions").contains("versions/v2/private/secret.csv"));
    }
    set_policy(&env, POLICY);
    within(
        Duration::from_secs(10),
        "the policy to reach the mount",
        || seen(OUTSIDER, &d, "ls versions").is_empty(),
    );
    // What the kernel kept from before answers no one: a new policy drops it.
    same_answer_as_a_name_that_does_not_exist(OUTSIDER, &d, "versions/v1/top.txt");
    for (who, path) in [
        (ANALYST, "versions/v1/top.txt"),
        (ANALYST, "versions/v2/private/secret.csv"),
        (ANALYST, "versions/v2/private"),
    ] {
        let (ok, err) = tried(who, &d, &format!("stat {path}"));
        assert!(!ok && err.contains("No such file"), "{path}: {err}");
    }
    assert_eq!(seen(ANALYST, &d, "cat versions/v2/top.txt"), "top 2\n");
    // A bad policy is refused with its position; the one in force stays.
    let file = env.path("bad.yaml");
    std::fs::write(&file, POLICY.replace("dataset:commit", "dataset:comit")).unwrap();
    let (code, err) = env.fails(&["policy", "set", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("line 21 column") && err.contains("unknown action \"dataset:comit\""),
        "{err}"
    );
    let locked = POLICY.replace("[\"dataset:*\"]", "[\"dataset:read\"]");
    std::fs::write(&file, locked).unwrap();
    let (_, err) = env.fails(&["policy", "set", file.to_str().unwrap()]);
    assert!(err.contains("lock out every admin"), "{err}");
    assert_eq!(env.ok(&["policy", "log"]).lines().count(), 1);
    // The outsider is let in to v1 only.
    let opened = POLICY.replace(
        "  - name: writers",
        "  - name: outsider_v1\n    effect: allow\n    principals: [\"user:2003\"]\n    actions: [\"dataset:versions\", \"dataset:read\"]\n    resources: [\"datasets/ds/versions/v1\"]\n  - name: writers",
    );
    set_policy(&env, &opened);
    within(Duration::from_secs(10), "the new policy", || {
        seen(OUTSIDER, &d, "ls versions | tr '\\n' ' '") == "latest v1 "
    });
    assert_eq!(seen(OUTSIDER, &d, "cat versions/latest/top.txt"), "top 1\n");
    assert_eq!(env.ok(&["policy", "log"]).lines().count(), 2);
    assert!(m.alive());
}

#[test]
fn policy_check_explains_and_setting_needs_admin() {
    let env = Env::new();
    three_versions(&env);
    assert!(env.ok(&["policy", "show"]).contains("no policy"));
    set_policy(&env, POLICY);
    assert_eq!(env.ok(&["policy", "show"]), POLICY);
    let check =
        |who: &str, action: &str, res: &str| env.run(&["policy", "check", who, action, res]);
    let out = check(
        "group:3001",
        "dataset:read",
        "datasets/ds/versions/published/files/private/secret.csv",
    );
    assert_eq!(out.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("statement \"analysts_no_private\" denies it")
    );
    let out = check("user:2002", "dataset:commit", "datasets/ds");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"writers\" allows it"));
    let out = check("user:2003", "dataset:versions", "datasets/ds/versions/v1");
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stdout).contains("denied by default"));
    let out = check("root", "dataset:admin", "datasets/*");
    assert_eq!(out.status.code(), Some(0));
    let (code, err) = env.fails(&["policy", "check", "root", "dataset:fly", "datasets/ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown action"), "{err}");
    // Root is no admin under this one: once set, root can set no other.
    let ops_only = POLICY.replace("user:root", "user:ops");
    set_policy(&env, &ops_only);
    let file = env.path("again.yaml");
    std::fs::write(&file, POLICY).unwrap();
    let (code, err) = env.fails(&["policy", "set", file.to_str().unwrap()]);
    assert_eq!(code, 5);
    assert!(err.contains("needs dataset:admin"), "{err}");
    // Nor tag, commit, create or collect: the CLI keeps to the policy too.
    let src = env.path("src");
    for args in [
        vec!["tag", "ds", "v1", "first"],
        vec![
            "commit",
            "ds",
            "--from",
            src.to_str().unwrap(),
            "-m",
            "again",
        ],
        vec!["dataset", "create", "other"],
        vec!["gc", "--dry-run"],
    ] {
        let (code, err) = env.fails(&args);
        assert_eq!(code, 5, "{args:?}");
        assert!(
            err.contains("not allowed") && err.contains("denied by default"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(env.log().len(), 3);
    // History: newest first, chained.
    let log: serde_json::Value =
        serde_json::from_str(&env.ok(&["policy", "log", "--json"])).unwrap();
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["parent"], log[1]["hash"]);
    assert_eq!(env.ok(&["policy", "show", "--version", "1"]), POLICY);
}

#[test]
fn audit_lists_versions_tags_and_policy_changes_and_flags_a_tampered_record() {
    let env = Env::new_plaintext();
    three_versions(&env);
    set_policy(&env, POLICY);
    let audit = |extra: &[&str]| {
        let mut args = vec!["audit", "ds"];
        args.extend(extra);
        env.run(&args)
    };
    let out = audit(&["--json"]);
    assert!(out.status.success());
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["ok"], true);
    let versions = a["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[1]["parent"], versions[0]["hash"]);
    assert_eq!(versions[2]["message"], "v3");
    assert!(
        versions
            .iter()
            .all(|v| v["chained"] == true && v["author"] == "root")
    );
    assert_eq!(a["tags"][0]["tag"], "published");
    assert_eq!(a["tags"][0]["holds"], true);
    assert_eq!(a["policy"].as_array().unwrap().len(), 1);
    let text = String::from_utf8(audit(&[]).stdout).unwrap();
    assert!(text.contains("tag published -> v2  ok"), "{text}");
    // Someone with bucket access rewrites v2's message: v3 no longer chains
    // to it, the tag names a record that is gone, this host saw another.
    let key = "datasets/ds/records/00000000000000000002.json";
    let forged = String::from_utf8(env.objects.read(key))
        .unwrap()
        .replace("\"v2\"", "\"rewritten\"");
    env.objects.write(key, forged.into_bytes());
    let out = audit(&["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["ok"], false);
    assert_eq!(a["versions"][2]["chained"], false);
    assert_eq!(a["tags"][0]["holds"], false);
    let problems = a["problems"].to_string();
    assert!(
        problems.contains("parent hash does not match record v2"),
        "{problems}"
    );
    assert!(
        problems.contains("differs from the one this host saw"),
        "{problems}"
    );
    let text = String::from_utf8(audit(&[]).stdout).unwrap();
    assert!(text.contains("BROKEN"), "{text}");
    // A policy record rewritten under a later one breaks the policy's chain.
    set_policy(&env, &POLICY.replace("user:2002", "user:2004"));
    let key = "policy/records/00000000000000000001.json";
    let forged = String::from_utf8(env.objects.read(key))
        .unwrap()
        .replace("\"test\"", "\"forged\"");
    env.objects.write(key, forged.into_bytes());
    let a: serde_json::Value = serde_json::from_slice(&audit(&["--json"]).stdout).unwrap();
    assert_eq!(a["policy"][1]["chained"], false);
    assert!(
        a["problems"].to_string().contains("policy v2"),
        "{}",
        a["problems"]
    );
}

#[test]
fn a_broken_policy_history_shuts_a_mount_for_everyone() {
    let env = Env::new_plaintext();
    three_versions(&env);
    set_policy(&env, POLICY);
    set_policy(&env, &POLICY.replace("user:2002", "user:2004"));
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    // v1 rewritten: v2 no longer follows it, so no policy can be trusted.
    let key = "policy/records/00000000000000000001.json";
    let forged = String::from_utf8(env.objects.read(key))
        .unwrap()
        .replace("\"test\"", "\"forged\"");
    env.objects.write(key, forged.into_bytes());
    let m = env.mount(&["--allow-other"]);
    assert_eq!(seen(ANALYST, &m.dir, "ls versions"), "");
    assert_eq!(seen((0, 0, None), &m.dir, "ls versions"), "");
    assert!(m.log().contains("policy history is broken"), "{}", m.log());
    let (code, err) = env.fails(&["policy", "show"]);
    assert_eq!(code, 1);
    assert!(err.contains("broken"), "{err}");
}

/// How many times the daemon decided whether the analyst sees v1 while
/// the analyst read a file of it `times` times (each a process of its own,
/// so each look the kernel asks for is written to the trail).
fn asked_about_v1(env: &Env, times: usize) -> usize {
    let before = trail(env, 2001).len();
    for _ in 0..times {
        assert_eq!(
            seen(ANALYST, &env.path("mnt"), "cat versions/v1/top.txt"),
            "top 1\n"
        );
    }
    trail(env, 2001)[before..]
        .iter()
        .filter(|l| l["action"] == "dataset:versions" && l["resource"] == "datasets/ds/versions/v1")
        .count()
}

/// A user the test makes when it chooses (and removes when done, whatever
/// happens). One that a killed run left behind is removed first, and the
/// uid is one neither the users' nor the groups' database holds, so the
/// test starts from a system where the user does not exist.
struct MadeUser {
    name: &'static str,
    uid: u32,
}

impl MadeUser {
    fn reserve(name: &'static str) -> MadeUser {
        let _ = Command::new("userdel").arg(name).output();
        let taken = |db: &str, id: u32| {
            Command::new("getent")
                .args([db, &id.to_string()])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let uid = (2005..3000)
            .find(|&id| !taken("passwd", id) && !taken("group", id))
            .expect("a free uid");
        MadeUser { name, uid }
    }

    fn make(&self) {
        run_ok(Command::new("useradd").args([
            "--uid",
            &self.uid.to_string(),
            "--no-create-home",
            "--user-group",
            self.name,
        ]));
    }
}

impl Drop for MadeUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).output();
    }
}

#[test]
fn a_version_all_readers_see_is_kept_by_the_kernel_and_still_hidden_from_the_rest() {
    let late_user = MadeUser::reserve("detafs-late");
    let env = Env::new();
    three_versions(&env);
    // Readers: a group and one user (made later), who the kernel can tell
    // apart by versions/'s group and owner.
    let policy = concat!(
        admins!(),
        r#"  - name: readers
    effect: allow
    principals: ["group:3001", "user:detafs-late"]
    actions: ["dataset:read", "dataset:versions"]
    resources: ["datasets/ds/versions/*"]
"#
    );
    set_policy(&env, policy);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    let mode = || {
        let ls = run_ok(
            Command::new("ls")
                .arg("-ldn")
                .arg("versions")
                .current_dir(&d),
        );
        let f: Vec<String> = ls.split_whitespace().map(String::from).collect();
        (f[0].clone(), f[2].clone(), f[3].clone())
    };
    // Only the readers' group (and root) may search versions/.
    assert_eq!(mode(), ("dr--r-xr--".into(), "0".into(), "3001".into()));
    // A reader walks v1: its name is now in the kernel's cache, shared by
    // every user of the mount.
    assert!(seen(ANALYST, &d, "find versions/v1").contains("versions/v1/private/secret.csv"));
    assert_eq!(asked_about_v1(&env, 2), 0, "the kernel kept v1");
    // The others find versions/ empty, and a name in it answers as one
    // that does not exist, kept by the kernel or not.
    assert_eq!(seen(OUTSIDER, &d, "ls -a versions | tr '\\n' ' '"), ". .. ");
    for path in ["versions/v1", "versions/v1/top.txt", "versions/v3/pub"] {
        same_answer_as_a_name_that_does_not_exist(OUTSIDER, &d, path);
        same_answer_as_a_name_that_does_not_exist(ANALYST_ALONE, &d, path);
        same_answer_as_a_name_that_does_not_exist(WRITER, &d, path);
    }
    let (ok, err) = tried(OUTSIDER, &d, "cat versions/v1/top.txt");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // A user the policy names but who did not exist yet is let in once
    // made, within the poll interval: versions/ becomes theirs.
    let late = (late_user.uid, late_user.uid, None);
    same_answer_as_a_name_that_does_not_exist(late, &d, "versions/v1/top.txt");
    late_user.make();
    within(Duration::from_secs(10), "the new user to be let in", || {
        seen(late, &d, "cat versions/v1/top.txt 2>&1") == "top 1\n"
    });
    assert_eq!(
        mode(),
        (
            "dr-xr-xr--".into(),
            late_user.uid.to_string(),
            "3001".into()
        )
    );
    same_answer_as_a_name_that_does_not_exist(OUTSIDER, &d, "versions/v1/top.txt");
    // A policy that hides v1 from the analysts: what the kernel kept of v1
    // is dropped, they no longer find it; the late user still does.
    set_policy(
        &env,
        &format!(
            "{policy}  - name: no_v1_for_analysts\n    effect: deny\n    principals: [\"group:3001\"]\n    actions: [\"dataset:versions\"]\n    resources: [\"datasets/ds/versions/v1\"]\n"
        ),
    );
    within(Duration::from_secs(10), "the new policy", || {
        !seen(ANALYST, &d, "ls versions").contains("v1")
    });
    for path in [
        "versions/v1",
        "versions/v1/top.txt",
        "versions/v1/pub/a.csv",
    ] {
        let (ok, err) = tried(ANALYST, &d, &format!("stat {path}"));
        assert!(!ok && err.contains("No such file"), "{path}: {err}");
    }
    assert_eq!(seen(ANALYST, &d, "cat versions/v2/top.txt"), "top 2\n");
    assert_eq!(seen(late, &d, "cat versions/v1/top.txt"), "top 1\n");
    // Readers the kernel cannot tell apart by one owner and one group (two
    // groups): everyone may search versions/ again, and names are asked
    // for each caller, so the outsider still finds nothing.
    set_policy(
        &env,
        &policy.replace("\"user:detafs-late\"", "\"group:3002\""),
    );
    within(Duration::from_secs(10), "the third policy", || {
        mode().0 == "drwxr-xr-x"
    });
    assert!(seen(ANALYST, &d, "find versions/v1").contains("versions/v1/top.txt"));
    assert_eq!(asked_about_v1(&env, 2), 2, "v1 asked for each caller");
    for path in ["versions/v1", "versions/v1/top.txt"] {
        let (ok, err) = tried(OUTSIDER, &d, &format!("stat {path}"));
        assert!(!ok && err.contains("No such file"), "{path}: {err}");
    }
    assert!(m.alive());
}

/// A deny naming a folder alone (no star): the folder is told apart from
/// its version and so is everything below it, though the files' own names
/// match no pattern, even after root walked them into the kernel's cache
/// and while the version's name is kept there.
#[test]
fn a_folder_denied_by_its_own_name_hides_what_is_below_it() {
    let env = Env::new();
    three_versions(&env);
    let policy = concat!(
        admins!(),
        r#"  - name: readers
    effect: allow
    principals: ["group:3001"]
    actions: ["dataset:read", "dataset:versions"]
    resources: ["datasets/ds/versions/*"]
  - name: no_private_folder
    effect: deny
    principals: ["group:3001"]
    actions: ["dataset:read"]
    resources: ["datasets/ds/versions/*/files/private/"]
"#
    );
    set_policy(&env, policy);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    let all = run_ok(Command::new("find").arg("versions").current_dir(&d));
    assert!(all.contains("versions/v2/private/secret.csv"), "{all}");
    assert!(seen(ANALYST, &d, "find versions/v2").contains("versions/v2/pub/a.csv"));
    assert!(!seen(ANALYST, &d, "find versions/v2").contains("private"));
    for path in ["versions/v2/private", "versions/v2/private/secret.csv"] {
        let (ok, err) = tried(ANALYST, &d, &format!("stat {path}"));
        assert!(!ok && err.contains("No such file"), "{path}: {err}");
    }
    let (ok, _) = tried(ANALYST, &d, "cat versions/v2/private/secret.csv");
    assert!(!ok);
    assert_eq!(seen(ANALYST, &d, "cat versions/v2/top.txt"), "top 2\n");
    assert!(m.alive());
}

#[test]
fn a_policy_set_after_a_read_only_mount_started_shuts_it_until_it_is_mounted_again() {
    // Without a policy, a read-only mount lets the kernel open files
    // without asking, which no later policy could be applied to: the
    // mount then refuses everyone, rather than serve what it may not.
    let env = Env::new();
    three_versions(&env);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--read-only", "--allow-other"]);
    let d = m.dir.clone();
    assert_eq!(seen(ANALYST, &d, "cat versions/v2/top.txt"), "top 2\n");
    // Listings the kernel keeps (it opens directories itself too).
    assert!(seen(ANALYST, &d, "ls versions/v1/private").contains("secret.csv"));
    let health = std::fs::read(m.path(".detafs/health")).unwrap();
    assert!(
        String::from_utf8_lossy(&health).contains("\"opens_skipped\": true"),
        "{}",
        String::from_utf8_lossy(&health)
    );
    set_policy(&env, POLICY);
    within(Duration::from_secs(10), "the mount shut", || {
        !tried(ANALYST, &d, "cat versions/v1/private/secret.csv").0
    });
    // Files nobody read yet, and the dataset's names, for everyone.
    for who in [ANALYST, OUTSIDER] {
        let (ok, _) = tried(who, &d, "cat versions/v3/pub/a.csv");
        assert!(!ok, "{who:?} read a file under a policy no open applied");
        assert_eq!(seen(who, &d, "ls versions 2>/dev/null"), "", "{who:?}");
        let kept = seen(who, &d, "ls versions/v1/private 2>/dev/null");
        assert_eq!(kept, "", "{who:?} listed a folder under a policy");
    }
    // (Its content lives a second: what it said may be that old.)
    within(Duration::from_secs(5), "health says shut", || {
        let health = std::fs::read(m.path(".detafs/health")).unwrap();
        String::from_utf8_lossy(&health).contains("\"policy\": \"shut\"")
    });
    drop(m);
    // Mounted again, the policy is applied at every open.
    let m = env.mount(&["--read-only", "--allow-other"]);
    let d = m.dir.clone();
    assert_eq!(
        seen(ANALYST, &d, "cat versions/published/pub/a.csv"),
        "public 2\n"
    );
    assert!(!tried(ANALYST, &d, "cat versions/v2/private/secret.csv").0);
    assert!(!tried(OUTSIDER, &d, "cat versions/v2/top.txt").0);
    let health = std::fs::read(m.path(".detafs/health")).unwrap();
    assert!(String::from_utf8_lossy(&health).contains("\"opens_skipped\": false"));
}

/// A read-write mount serves `versions/` on a connection of its own where
/// the kernel opens files itself; a policy that comes later detaches it,
/// and from then on every open is judged on the main connection.
#[test]
fn a_policy_set_after_a_read_write_mount_started_is_applied_at_every_open() {
    let env = Env::new();
    three_versions(&env);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    let health = || String::from_utf8(std::fs::read(m.path(".detafs/health")).unwrap()).unwrap();
    assert!(
        health().contains("\"versions_connection\": \"own\""),
        "{}",
        health()
    );
    assert!(seen(ANALYST, &d, "cat versions/v2/private/secret.csv").contains("secret"));
    set_policy(&env, POLICY);
    within(Duration::from_secs(10), "versions/ judged", || {
        health().contains("\"versions_connection\": \"shared\"")
            && !tried(ANALYST, &d, "cat versions/v2/private/secret.csv").0
    });
    assert_eq!(
        seen(ANALYST, &d, "cat versions/published/pub/a.csv"),
        "public 2\n"
    );
    assert!(!tried(OUTSIDER, &d, "cat versions/v2/top.txt").0);
    assert!(seen(ANALYST, &d, "ls versions").contains("published"));
    assert!(!seen(ANALYST, &d, "ls versions/v2").contains("private"));
    assert!(m.alive());
}

/// What a caller may not see does not exist for it through the control
/// files either: a user who may commit but not see v1 cannot put v1 (or a
/// denied path of another version) into staging with `.detafs/checkout`,
/// and `.detafs/health` counts only the versions the caller may see.
#[test]
fn checkout_and_health_reach_no_version_or_path_the_caller_may_not_see() {
    let env = Env::new();
    three_versions(&env);
    run_ok(Command::new("chmod").arg("755").arg(env.dir.path()));
    set_policy(
        &env,
        concat!(
            admins!(),
            r#"  - name: writers
    effect: allow
    principals: ["user:2002"]
    actions: ["dataset:versions", "dataset:read", "dataset:commit"]
    resources: ["datasets/ds", "datasets/ds/versions/*"]
  - name: not_v1
    effect: deny
    principals: ["user:2002"]
    actions: ["dataset:versions"]
    resources: ["datasets/ds/versions/v1"]
  - name: no_private
    effect: deny
    principals: ["user:2002"]
    actions: ["dataset:read"]
    resources: ["datasets/ds/versions/*/files/private/*"]
"#
        ),
    );
    let m = env.mount(&["--allow-other"]);
    let d = m.dir.clone();
    let staged_top = || std::fs::read_to_string(m.path("staging/top.txt")).unwrap();
    assert_eq!(staged_top(), "top 3\n");
    for request in ["v1", "1", "latest~2", "v1\\ntop.txt"] {
        tried(
            WRITER,
            &d,
            &format!("printf '{request}\\n' > .detafs/checkout"),
        );
        assert_eq!(staged_top(), "top 3\n", "{request} reached v1");
    }
    // A version it may see, but a path of it that is hidden.
    tried(
        WRITER,
        &d,
        "printf 'v2\\nprivate/secret.csv\\n' > .detafs/checkout",
    );
    assert_eq!(
        std::fs::read_to_string(m.path("staging/private/secret.csv")).unwrap(),
        "secret 3\n"
    );
    // What it may see, it checks out.
    let (ok, err) = tried(WRITER, &d, "printf 'v2\\ntop.txt\\n' > .detafs/checkout");
    assert!(ok, "{err}");
    assert_eq!(staged_top(), "top 2\n");
    // The writer's request is whole at its last close, and its undo brings
    // back what its checkout replaced; a user who may not commit may not
    // undo either.
    let (ok, err) = tried(
        WRITER,
        &d,
        "{ echo v2; sleep 0.1; echo pub/a.csv; } > .detafs/checkout",
    );
    assert!(ok, "{err}");
    let staged_pub = || std::fs::read_to_string(m.path("staging/pub/a.csv")).unwrap();
    assert_eq!(
        (staged_pub(), staged_top()),
        ("public 2\n".into(), "top 2\n".into())
    );
    let (ok, _) = tried(ANALYST, &d, "echo > .detafs/undo");
    assert!(!ok);
    assert_eq!(staged_pub(), "public 2\n");
    let (ok, err) = tried(WRITER, &d, "echo > .detafs/undo");
    assert!(ok, "{err}");
    assert_eq!(
        (staged_pub(), staged_top()),
        ("public 3\n".into(), "top 2\n".into())
    );
    // Health counts the versions each caller may see.
    let versions = |who| {
        let text = seen(who, &d, "cat .detafs/health");
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["versions"].clone()
    };
    assert_eq!(versions(WRITER), 2);
    let root = std::fs::read_to_string(m.path(".detafs/health")).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&root).unwrap()["versions"],
        3
    );
}
