//! Commits interrupted at every step, by failpoints and by SIGKILL at random
//! moments: no partial version is ever visible, `verify` reports only
//! garbage, `gc` removes it, and the next commit succeeds.

mod common;

use common::{Env, fingerprint, noise, sample_tree};
use std::time::{Duration, Instant};

fn assert_clean_after_gc(env: &Env) {
    let out = env.run(&["verify"]);
    assert!(
        out.status.success(),
        "verify found errors: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    env.ok(&["gc", "--grace", "0s"]);
    let report = env.ok(&["verify"]);
    assert!(!report.contains("garbage"), "gc left garbage: {report}");
}

fn exports_match(env: &Env, version: &str, want: &std::collections::BTreeMap<Vec<u8>, String>) {
    let out = env.path(&format!("export-{version}-{}", rand_u64()));
    env.ok(&["export", "ds", version, out.to_str().unwrap()]);
    assert_eq!(&fingerprint(&out), want, "export of {version}");
}

fn rand_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

#[test]
fn failpoints_before_the_record_leave_no_version() {
    for fp in ["pack-uploaded", "before-record"] {
        let env = Env::new();
        let src = env.path("src");
        sample_tree(&src, 1);
        env.commit(&src, "base");
        std::fs::write(src.join("sub/big.bin"), noise(2_000_000, 99)).unwrap();
        let before = fingerprint(&src);

        let out = env
            .commit_command(&src, "doomed", &format!("{fp}=panic"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{fp}: commit survived its failpoint");
        assert_eq!(env.log().len(), 1, "{fp}: a partial version became visible");
        assert_eq!(fingerprint(&src), before, "{fp}: source changed");
        let report = env.ok(&["verify"]);
        assert!(
            report.contains("garbage"),
            "{fp}: debris not reported: {report}"
        );
        assert_clean_after_gc(&env);

        assert_eq!(env.commit(&src, "retry"), "v2");
        exports_match(&env, "v2", &before);
        env.ok(&["verify"]);
    }
}

#[test]
fn failpoint_after_the_record_means_the_commit_landed() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 2);
    let out = env
        .commit_command(&src, "landed", "after-record=panic")
        .output()
        .unwrap();
    assert!(!out.status.success());
    // The record exists, so the version exists, although the local index was not updated.
    let log = env.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["message"], "landed");
    exports_match(&env, "v1", &fingerprint(&src));
    std::fs::write(src.join("next.txt"), b"next").unwrap();
    assert_eq!(env.commit(&src, "next"), "v2");
    assert_clean_after_gc(&env);
}

#[test]
fn sigkill_at_random_moments_never_leaves_a_partial_version() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 3);
    for i in 0..20 {
        std::fs::write(src.join(format!("f{i}.bin")), noise(400_000, i)).unwrap();
    }
    env.commit(&src, "base");
    // How long a commit of fresh data takes here.
    std::fs::write(src.join("probe.bin"), noise(8_000_000, 1)).unwrap();
    let t = Instant::now();
    env.commit(&src, "probe");
    let full = u64::try_from(t.elapsed().as_micros()).unwrap() + 1;

    let mut landed = std::collections::HashMap::new();
    let mut seed = 0x5eed_u64;
    for round in 0..25u64 {
        std::fs::write(src.join("probe.bin"), noise(8_000_000, round + 100)).unwrap();
        std::fs::write(src.join(format!("round{round}.txt")), round.to_string()).unwrap();
        let want = fingerprint(&src);
        let versions_before = env.log().len();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_micros(seed % (full * 12 / 10));
        let mut child = env
            .command()
            .args(["commit", "ds", "--from", src.to_str().unwrap(), "-m"])
            .arg(format!("round {round}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        child.wait().unwrap();

        let log = env.log();
        assert!(
            log.len() == versions_before || log.len() == versions_before + 1,
            "round {round}: {} versions after {versions_before}",
            log.len()
        );
        if log.len() > versions_before {
            let v = format!("v{}", log.len());
            exports_match(&env, &v, &want);
            landed.insert(round, v);
        }
        let out = env.run(&["verify"]);
        assert!(
            out.status.success(),
            "round {round}: verify found errors: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    eprintln!("{} of 25 killed commits had already landed", landed.len());
    assert_clean_after_gc(&env);
    std::fs::write(src.join("final.txt"), b"final").unwrap();
    let v = env.commit(&src, "after the storm");
    exports_match(&env, &v, &fingerprint(&src));
}
