//! S3 as a shared store, against the LocalStack server scripts/test.sh starts
//! on 127.0.0.1:4566: configuration errors, the conditional-create probe,
//! commits under injected store faults, killed committers, and a fleet of
//! hosts committing to one bucket, which also runs on Azure Blob Storage
//! (Azurite on 127.0.0.1:10000), with the probe there. (The other suites
//! also run against S3 and Azure with DETAFS_TEST_STORE=s3 or azure.)

mod common;

use common::faults::{Faulty, Overwriting};
use common::objects;
use common::{Env, commit_via_control, fingerprint, noise, run_ok, sample_tree, within};
use detafs::commit::CommitMeta;
use detafs::repo::{Options, Repo};
use detafs::staging::{Kind, ROOT, Staging};
use detafs::store::Store;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn bucket_problems_get_clear_errors() {
    let env = Env::empty_s3();
    env.objects.write("photo.jpg", b"x".to_vec());
    let (_, err) = env.fails(&["init"]);
    assert!(err.contains("not empty and not a detafs store"), "{err}");

    let bucket = env.bucket.clone().unwrap();
    let fresh = format!("s3://{bucket}/elsewhere");
    let (_, err) = env.fails(&["--store", &fresh, "dataset", "list"]);
    assert!(err.contains("is not a detafs store"), "{err}");

    let (_, err) = env.fails(&["--store", "s3://", "dataset", "list"]);
    assert!(err.contains("no bucket"), "{err}");

    // https is verified: LocalStack's self-signed certificate is refused.
    let out = env
        .command()
        .args(["--store", &fresh, "--store-timeout", "3s", "init"])
        .env("AWS_ENDPOINT_URL", "https://127.0.0.1:4566")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a self-signed certificate was accepted"
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(
        env.objects.list("").len() == 1,
        "nothing was written: {:?}",
        env.objects.list("")
    );
}

#[test]
fn the_probe_refuses_a_store_that_ignores_conditional_create() {
    let bucket = objects::new_bucket(objects::S3_ENDPOINT);
    let raw = objects::s3_store(objects::S3_ENDPOINT, &bucket, "");
    let honest = Store::from_object_store(
        raw.clone(),
        "s3://honest",
        Duration::from_secs(5),
        &detafs::runtime::Runtime::new().unwrap(),
    )
    .unwrap();
    honest.probe().unwrap();
    assert!(
        objects::Objects::s3(objects::S3_ENDPOINT, &bucket, "")
            .list("probes")
            .is_empty(),
        "the probe cleans up"
    );

    let liar = Arc::new(Overwriting(raw));
    let store = Store::from_object_store(
        liar,
        "s3://liar",
        Duration::from_secs(5),
        &detafs::runtime::Runtime::new().unwrap(),
    )
    .unwrap();
    let err = store.probe().unwrap_err().to_string();
    assert!(
        err.contains("does not honour conditional create") && err.contains("overwrites"),
        "{err}"
    );
}

#[test]
fn a_real_server_that_overwrites_is_refused() {
    // s3rver (scripts/s3rver.sh, 127.0.0.1:4568) ignores If-None-Match.
    let env = Env::empty_local();
    let prefix = format!("p{}", rand::random::<u32>());
    let out = env
        .command()
        .args(["--store", &format!("s3://liar/{prefix}"), "init"])
        .envs(objects::S3_ENV)
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:4568")
        .env("AWS_ACCESS_KEY_ID", "S3RVER")
        .env("AWS_SECRET_ACCESS_KEY", "S3RVER")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "init accepted an overwriting store");
    assert!(
        err.contains("does not honour conditional create") && err.contains("overwrites"),
        "{err}"
    );
    let listing = Command::new("curl")
        .args([
            "-fsS",
            &format!("http://127.0.0.1:4568/liar?prefix={prefix}"),
        ])
        .output()
        .unwrap();
    assert!(
        listing.status.success(),
        "s3rver is not running (scripts/s3rver.sh)"
    );
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        !listing.contains("<Key>"),
        "init left objects behind: {listing}"
    );
}

/// The content of a version as a map (path → bytes), read with the CLI.
fn exported(env: &Env, version: &str) -> BTreeMap<String, Vec<u8>> {
    let out = env.path(&format!("export-{version}-{}", rand::random::<u32>()));
    env.ok(&["export", "ds", version, out.to_str().unwrap()]);
    let mut map = BTreeMap::new();
    for e in std::fs::read_dir(&out).unwrap() {
        let e = e.unwrap();
        map.insert(
            e.file_name().into_string().unwrap(),
            std::fs::read(e.path()).unwrap(),
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
    map
}

/// Stages a new file, and every third round appends to an earlier one,
/// retrying each step through the faulty store as a user would.
fn stage_round(repo: &Repo, st: &Staging, model: &mut BTreeMap<String, Vec<u8>>, round: u64) {
    // Stage a new file, and rewrite an earlier one every third round.
    let name = format!("r{round:03}.bin");
    let data = noise(2000 + (usize::try_from(round).unwrap() * 37) % 5000, round);
    let node = loop {
        match st.create(repo, ROOT, name.as_bytes(), Kind::File, 0o644, 0, 0, b"", 0) {
            Ok(n) => break n,
            Err(detafs::Error::Fs { .. }) => {
                break st.lookup(repo, ROOT, name.as_bytes()).unwrap().unwrap();
            }
            Err(e) => eprintln!("create: {e}"),
        }
    };
    std::fs::write(st.upper_path(node.id), &data).unwrap();
    model.insert(name, data);
    if round % 3 == 2 {
        let old = format!("r{:03}.bin", round - 2);
        let id = st.lookup(repo, ROOT, old.as_bytes()).unwrap().unwrap().id;
        // Made writable as the mount does: a plan, its copy written, then
        // published (again if the file changed meanwhile).
        let path = loop {
            let plan = match st.plan_copy_up(id, true) {
                Ok(Ok(path)) => break path,
                Ok(Err(plan)) => plan,
                Err(e) => {
                    eprintln!("copy up: {e}");
                    continue;
                }
            };
            if let Err(e) = plan.write(repo) {
                eprintln!("copy up: {e}");
                plan.discard();
                continue;
            }
            match st.publish_copy(plan) {
                Ok(Some(path)) => break path,
                Ok(None) => {}
                Err(e) => eprintln!("copy up: {e}"),
            }
        };
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(b"appended").unwrap();
        model.get_mut(&old).unwrap().extend_from_slice(b"appended");
    }
}

#[test]
fn two_hundred_commits_under_injected_faults_land_whole_or_fail_cleanly() {
    let env = Env::new_s3();
    let bucket = env.bucket.clone().unwrap();
    let faulty = Arc::new(Faulty::new(
        objects::s3_store(objects::S3_ENDPOINT, &bucket, "store"),
        200,
        0xfa17,
    ));
    // A deadline this short lets some operations run out of retries, so
    // both outcomes occur.
    let rt = detafs::runtime::Runtime::new().unwrap();
    let store =
        Store::from_object_store(faulty.clone(), &env.store, Duration::from_millis(150), &rt)
            .unwrap();
    let opts = Options {
        store: None,
        cache_dir: Some(env.path("faulty-cache")),
        cache_size: 1 << 30,
        cache_memory: None,
        store_timeout: Duration::from_secs(5),
        key_file: Some(env.key_file.clone()),
        passphrase: None,
        sse: None,
        object_lock: None,
        runtime: rt,
    };
    let repo = Repo::with_store(store, &opts).unwrap();
    let staging_dir = env.path("faulty-staging");
    let st = loop {
        // Opening syncs records through the faulty store: retry like a user.
        match Staging::open(&repo, &staging_dir, "ds") {
            Ok(st) => break st,
            Err(e) => eprintln!("open staging: {e}"),
        }
    };

    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let (mut landed, mut failed, mut ambiguous) = (0, 0, 0);
    for round in 0..200u64 {
        stage_round(&repo, &st, &mut model, round);
        let versions_before = env.log().len();
        let meta = CommitMeta {
            content_only: false,
            dataset: "ds",
            message: &format!("round {round}"),
            author: "fault-test",
        };
        let res = detafs::commit::staged::commit_staging(
            &repo,
            &meta,
            || Ok(&st),
            Default::default,
            &detafs::progress::Quiet,
        );
        let log = env.log();
        match res {
            Ok(record) => {
                landed += 1;
                assert_eq!(
                    usize::try_from(record.version).unwrap(),
                    versions_before + 1,
                    "round {round}"
                );
                assert_eq!(log.len(), versions_before + 1, "round {round}");
            }
            Err(e) => {
                assert!(
                    log.len() == versions_before || log.len() == versions_before + 1,
                    "round {round}: {} versions after {versions_before}",
                    log.len()
                );
                if log.len() == versions_before {
                    failed += 1;
                } else {
                    // The record was created but its answer lost past the deadline.
                    ambiguous += 1;
                }
                eprintln!("round {round}: commit failed: {e}");
                // Staging still holds every staged byte.
                for (name, want) in &model {
                    let n = loop {
                        match st.lookup(&repo, ROOT, name.as_bytes()) {
                            Ok(n) => break n.unwrap(),
                            Err(e) => eprintln!("lookup: {e}"),
                        }
                    };
                    if n.upper {
                        assert_eq!(&std::fs::read(st.upper_path(n.id)).unwrap(), want);
                    }
                }
            }
        }
        if log.len() > versions_before {
            let v = format!("v{}", log.len());
            assert_eq!(exported(&env, &v), model, "round {round}: {v} is not whole");
        }
    }
    eprintln!(
        "200 commits, {} faults injected: {landed} landed, {failed} failed cleanly, {ambiguous} landed with the answer lost",
        faulty.injected.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(landed > 20 && failed > 0, "both outcomes occur");
    // Whatever failed is garbage at worst, never an error.
    let out = env.run(&["verify"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    env.ok(&["gc", "--grace", "0s"]);
    let report = env.ok(&["verify"]);
    assert!(!report.contains("garbage:"), "{report}");
    // The last staged state commits fine without faults (the last round's
    // commit may have failed).
    let clean = Repo::with_store(
        Store::from_object_store(
            objects::s3_store(objects::S3_ENDPOINT, &bucket, "store"),
            &env.store,
            Duration::from_secs(30),
            &opts.runtime,
        )
        .unwrap(),
        &opts,
    )
    .unwrap();
    let meta = CommitMeta {
        content_only: false,
        dataset: "ds",
        message: "the rest",
        author: "fault-test",
    };
    match detafs::commit::staged::commit_staging(
        &clean,
        &meta,
        || Ok(&st),
        Default::default,
        &detafs::progress::Quiet,
    ) {
        Ok(_) | Err(detafs::Error::NothingToCommit(_)) => {}
        Err(e) => panic!("commit without faults: {e}"),
    }
    let latest = env.log().len();
    assert_eq!(exported(&env, &format!("v{latest}")), model);
}

/// Stages `files` through a short-lived mount of `env`.
fn stage(env: &Env, files: &[(&str, Vec<u8>)]) {
    let m = env.mount(&[]);
    for (name, data) in files {
        std::fs::write(m.path(&format!("staging/{name}")), data).unwrap();
    }
    // Unmounted, its daemon gone with its lock on staging.
    drop(m);
}

#[test]
fn committers_killed_at_random_moments_lose_nothing() {
    let env = Env::new_s3();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("base.txt"), b"base").unwrap();
    env.commit(&src, "base");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    model.insert("base.txt".into(), b"base".to_vec());

    // How long a commit of staging takes here.
    stage(&env, &[("probe.bin", noise(4_000_000, 0))]);
    model.insert("probe.bin".into(), noise(4_000_000, 0));
    let t = Instant::now();
    env.ok(&["commit", "ds", "-m", "probe"]);
    let full = u64::try_from(t.elapsed().as_micros()).unwrap() + 1;

    let mut seed = 0xdead_beef_u64;
    let mut landed = 0;
    for round in 0..50u64 {
        let big = noise(4_000_000, round + 1);
        let small = round.to_string().into_bytes();
        stage(
            &env,
            &[
                ("probe.bin", big.clone()),
                (&format!("round{round}.txt"), small.clone()),
            ],
        );
        model.insert("probe.bin".into(), big);
        model.insert(format!("round{round}.txt"), small);
        let before = env.log().len();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut child = env
            .command()
            .args(["commit", "ds", "-m"])
            .arg(format!("round {round}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(seed % (full * 12 / 10)));
        let _ = child.kill();
        child.wait().unwrap();
        let after = env.log().len();
        assert!(after == before || after == before + 1, "round {round}");
        if after > before {
            landed += 1;
            // A version that exists is whole.
            assert_eq!(exported(&env, &format!("v{after}")), model, "round {round}");
        }
    }
    eprintln!("{landed} of 50 killed commits had landed");
    // Nothing staged was lost: one more commit gives exactly the model.
    let out = env.run(&["commit", "ds", "-m", "after the storm"]);
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 4,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let latest = env.log().len();
    assert_eq!(exported(&env, &format!("v{latest}")), model);
    let out = env.run(&["verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let status = env.ok(&["status", "ds"]);
    assert!(status.trim().is_empty(), "{status}");
}

#[test]
fn a_fleet_of_two_hosts_commits_to_one_bucket_and_a_third_replays_it() {
    fleet(Env::new_s3());
}

#[test]
fn a_fleet_of_two_hosts_commits_to_one_azure_container_and_a_third_replays_it() {
    fleet(Env::new_azure());
}

#[test]
fn the_probe_passes_on_azure_and_cleans_up() {
    let env = Env::empty_azure();
    env.ok(&["init"]);
    assert!(env.objects.list("probes").is_empty(), "the probe cleans up");
    // A second init finds the store (its marker's create is refused).
    let again = env.run(&["init"]);
    let said = String::from_utf8_lossy(&again.stdout).to_string()
        + &String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("already a store"), "{said}");
}

/// Two hosts commit through their mounts at once while a third follows the
/// history; then each sees the other's commits.
fn fleet(a: Env) {
    let b = a.other_host();
    let replayer = a.other_host();
    let ma = a.mount(&[]);
    let mb = b.mount(&[]);
    const EACH: usize = 12;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // The replayer follows the history while it grows: numbers are
        // consecutive and each record chains to the one before.
        let watcher = s.spawn(|| {
            let mut seen = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let log = replayer.log();
                for (i, v) in log.iter().enumerate() {
                    assert_eq!(v["version_id"], format!("v{}", i + 1));
                }
                assert!(log.len() >= seen, "history shrank");
                seen = log.len();
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let commit = &|m: &common::Mount, host: &str| {
            for i in 0..EACH {
                std::fs::write(
                    m.path(&format!("staging/{host}-{i}.txt")),
                    format!("{host} {i}"),
                )
                .unwrap();
                commit_via_control(m, &format!("{host} commit {i}")).unwrap();
            }
        };
        let (ra, rb) = (&ma, &mb);
        let ta = s.spawn(move || commit(ra, "a"));
        let tb = s.spawn(move || commit(rb, "b"));
        ta.join().unwrap();
        tb.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        watcher.join().unwrap();
    });

    let log = replayer.log();
    assert_eq!(log.len(), 2 * EACH, "every commit appears");
    let mut messages: Vec<String> = log
        .iter()
        .map(|v| v["message"].as_str().unwrap().to_string())
        .collect();
    messages.sort();
    messages.dedup();
    assert_eq!(
        messages.len(),
        2 * EACH,
        "every commit appears exactly once"
    );
    replayer.ok(&["verify"]);
    // Both mounts see the whole history and the same final content.
    let last = format!("versions/v{}", 2 * EACH);
    for m in [&ma, &mb] {
        within(Duration::from_secs(5), "the other host's versions", || {
            m.path(&last).exists()
        });
        let files = std::fs::read_dir(m.path(&last)).unwrap().count();
        assert_eq!(files, 2 * EACH);
        assert_eq!(fingerprint(&m.path("staging")), fingerprint(&m.path(&last)));
    }

    // A commit on one host appears on the other within its poll interval
    // (200 ms here) plus the time to list the new record.
    std::fs::write(ma.path("staging/late.txt"), b"late").unwrap();
    commit_via_control(&ma, "late").unwrap();
    let next = format!("versions/v{}/late.txt", 2 * EACH + 1);
    let took = within(Duration::from_secs(5), "the late version on b", || {
        mb.path(&next).exists()
    });
    eprintln!("host b saw host a's commit after {took:?}");
}

#[test]
fn two_hosts_open_one_bucket_with_their_own_key_slots() {
    let a = Env::new_s3();
    run_ok(
        a.command()
            .env("DETAFS_NEW_PASSWORD", "host b's own passphrase")
            .args(["key", "add", "--passphrase"]),
    );
    // Host b was given the passphrase, not the key file.
    let mut b = a.other_host();
    b.key_file = b.path("no-such.key");
    b.password = Some("host b's own passphrase".into());
    {
        let ma = a.mount(&[]);
        let mb = b.mount(&[]);
        std::fs::write(ma.path("staging/a.txt"), b"from a").unwrap();
        commit_via_control(&ma, "a's commit").unwrap();
        within(Duration::from_secs(5), "a's version on b", || {
            mb.path("versions/v1/a.txt").exists()
        });
        std::fs::write(mb.path("staging/b.txt"), b"from b").unwrap();
        commit_via_control(&mb, "b's commit").unwrap();
        within(Duration::from_secs(5), "b's version on a", || {
            ma.path("versions/v2/b.txt").exists()
        });
        assert_eq!(
            std::fs::read(ma.path("versions/v2/b.txt")).unwrap(),
            b"from b"
        );
        assert_eq!(
            std::fs::read(mb.path("versions/v2/a.txt")).unwrap(),
            b"from a"
        );
    }
    b.ok(&["verify"]);
    // A wrong passphrase on b: one error, nothing written.
    let before = a.objects.list("");
    let mut wrong = b.other_host();
    wrong.password = Some("not b's passphrase".into());
    let src = wrong.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x.txt"), b"x").unwrap();
    let (code, err) = wrong.fails(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(a.objects.list(""), before);
    // Revoking b's slot locks b out; a goes on with its key file.
    let list = a.ok(&["key", "list"]);
    let slot = list
        .lines()
        .find(|l| l.contains("passphrase"))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no passphrase slot in {list}"));
    a.ok(&["key", "remove", slot]);
    let (code, err) = b.fails(&["log", "ds"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(a.log().len(), 2);
}

#[test]
fn gc_on_another_host_spares_a_commit_in_flight() {
    let a = Env::new_s3();
    let b = a.other_host();
    let src = a.path("src");
    common::sample_tree(&src, 3);
    a.commit(&src, "one");
    std::fs::write(src.join("new.bin"), noise(3_000_000, 9)).unwrap();
    // Host a uploads its packs, then is held just before its commit point.
    let before_record = common::Hold::new(&a, "before-record");
    let committing = a
        .commit_command(&src, "in flight", &before_record.spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    before_record.reached();
    let dry = b.ok(&["gc", "--grace", "0s", "--dry-run"]);
    assert!(
        !dry.trim().is_empty(),
        "the commit's packs are unreachable while in flight"
    );
    // gc with a grace longer than the commit deletes none of them.
    let out = b.ok(&["gc"]);
    assert!(out.trim().is_empty(), "{out}");
    before_record.release();
    let out = committing.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.log().len(), 2);
    let report = b.ok(&["verify"]);
    assert!(
        !report.contains("garbage:") && !report.contains("missing"),
        "{report}"
    );
    let read = b.run(&["cat", "ds", "v2", "new.bin"]).stdout;
    assert_eq!(
        read,
        noise(3_000_000, 9),
        "host b reads what host a committed"
    );
}

#[test]
fn server_side_encryption_is_asked_of_every_upload_and_checked() {
    for (sse, header) in [("aes256", "AES256"), ("kms", "aws:kms")] {
        let env = Env::empty_s3();
        let with = |args: &[&str]| run_ok(env.command().env("DETAFS_SSE", sse).args(args));
        with(&["init"]);
        with(&["dataset", "create", "ds"]);
        let src = env.path("src");
        sample_tree(&src, 1);
        with(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "v1"]);
        with(&["tag", "ds", "v1", "first"]);
        let seen = objects::sse_of_objects(&env);
        assert!(seen.len() >= 6, "{seen:?}");
        assert!(seen.iter().all(|s| s == header), "{sse}: {seen:?}");
    }
    // Not for a local folder (detafs encrypts it itself).
    let local = Env::empty_local();
    let (code, err) = {
        let out = local
            .command()
            .args(["--sse", "aes256", "init"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1));
    assert!(err.contains("(SSE) is asked of S3 stores only"), "{err}");
    let out = local
        .command()
        .args(["--sse", "des", "init"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad --sse is a usage error");
}

#[test]
fn a_server_that_does_not_apply_server_side_encryption_is_refused_at_once() {
    // s3rver (scripts/s3rver.sh, 127.0.0.1:4568) ignores the header.
    let env = Env::empty_local();
    let prefix = format!("p{}", rand::random::<u32>());
    let started = std::time::Instant::now();
    let out = env
        .command()
        .args(["--store", &format!("s3://liar/{prefix}"), "--sse", "aes256"])
        .args(["--store-timeout", "10m", "init"])
        .envs(objects::S3_ENV)
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:4568")
        .env("AWS_ACCESS_KEY_ID", "S3RVER")
        .env("AWS_SECRET_ACCESS_KEY", "S3RVER")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("server-side encryption not applied"), "{err}");
    assert!(err.contains("asked for AES256"), "{err}");
    // Refused, not retried for the store timeout.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
}

/// Two gateways on one bucket: what one serves the other serves alike
/// (bytes and ETag), what is staged through one is committed through the
/// other, and the version is read through either at once.
#[test]
fn two_gateways_on_one_bucket_serve_one_history_over_s3() {
    use common::gateway::{s3_curl, s3_key, serve_with};
    let env = Env::new_s3();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), "a\n1\n").unwrap();
    env.commit(&src, "v1");
    let key = s3_key(&env, "w", "read,commit");
    let other = env.other_host();
    let (a, b) = (
        serve_with(&env, &["--s3-listen", "127.0.0.1:0"]),
        serve_with(&other, &["--s3-listen", "127.0.0.1:0"]),
    );
    let (a, b) = (a.s3.clone().unwrap(), b.s3.clone().unwrap());
    let head = |at: &str| s3_curl(at, &key, &["-I"], "ds/v1/a.csv");
    let (ha, hb) = (head(&a), head(&b));
    assert_eq!((ha.0, hb.0), (200, 200));
    let etag = |h: &[u8]| {
        String::from_utf8_lossy(h)
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("etag:"))
            .map(|l| l[5..].trim().to_string())
    };
    assert!(etag(&ha.1).is_some() && etag(&ha.1) == etag(&hb.1));
    // Staged through a (staging is in the store), committed through b.
    let staged = env.path("b.csv");
    std::fs::write(&staged, "b\n2\n").unwrap();
    let put = |at: &str, path: &str, file: &std::path::Path| {
        s3_curl(at, &key, &["-T", file.to_str().unwrap()], path)
    };
    assert_eq!(put(&a, "ds/staging/b.csv", &staged).0, 200);
    let message = env.path("message");
    std::fs::write(&message, "staged through a").unwrap();
    let (code, _) = put(&b, "ds/staging/.detafs-commit", &message);
    assert_eq!(code, 200);
    assert_eq!(
        s3_curl(&b, &key, &[], "ds/latest/b.csv"),
        (200, b"b\n2\n".to_vec())
    );
    assert_eq!(
        s3_curl(&b, &key, &[], "ds/v2/a.csv"),
        (200, b"a\n1\n".to_vec())
    );
    assert_eq!(env.log().last().unwrap()["message"], "staged through a");
}

/// HEAD of `key` in `bucket` on the test server: its headers, lowercased.
fn head_of(bucket: &str, key: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-sSI",
            &format!("{}/{bucket}/store/{key}", objects::S3_ENDPOINT),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_lowercase()
}

/// `--object-lock D`: every object never rewritten (packs, records, the
/// lifecycle log) is uploaded under S3 Object Lock in compliance mode until
/// D from then, others (the marker, leases) are not; a bucket without
/// Object Lock is refused before the first locked write, and no version
/// younger than D is expired. (LocalStack keeps the lock's headers but
/// does not refuse them on a bucket without Object Lock: the bucket's
/// configuration is read by detafs itself.)
#[test]
fn object_lock_locks_what_is_never_rewritten_and_checks_the_bucket() {
    let locked = objects::new_bucket_with(
        objects::S3_ENDPOINT,
        &["x-amz-bucket-object-lock-enabled: true"],
    );
    let env = Env::empty_s3_in(objects::S3_ENDPOINT, locked.clone());
    let lock = |args: &[&str]| {
        let mut c = env.command_for(args);
        c.env("DETAFS_OBJECT_LOCK", "1d");
        c.output().unwrap()
    };
    for args in [&["init"][..], &["dataset", "create", "ds"]] {
        let out = lock(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..2 {
        std::fs::write(src.join("a.csv"), format!("a,{i}\n")).unwrap();
        let out = lock(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "c"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let until = |h: &str| {
        let line = h
            .lines()
            .find_map(|l| l.strip_prefix("x-amz-object-lock-retain-until-date: "))?;
        humantime::parse_rfc3339(&line.trim().to_uppercase()).ok()
    };
    let day = std::time::SystemTime::now() + Duration::from_secs(86_400);
    let mut locked_keys = 0;
    for (key, _) in env.objects.list("") {
        let h = head_of(&locked, &key);
        let lockable = key.starts_with("packs/")
            || key.contains("/records/")
            || key.contains("/lifecycle/")
            || key.ends_with("/dataset.json");
        if lockable {
            assert!(
                h.contains("x-amz-object-lock-mode: compliance"),
                "{key}: {h}"
            );
            let t = until(&h).unwrap_or_else(|| panic!("{key}: {h}"));
            let off = t
                .duration_since(day)
                .or_else(|e| Ok::<_, ()>(e.duration()))
                .unwrap();
            assert!(off < Duration::from_secs(600), "{key} locked until {t:?}");
            locked_keys += 1;
        } else {
            assert!(
                !h.contains("x-amz-object-lock-mode"),
                "{key} is rewritten or deleted: not locked"
            );
        }
    }
    assert!(locked_keys >= 4, "{locked_keys}");
    let out = lock(&["forget", "ds", "v1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("younger than the minimum age of 1day"));

    // A bucket without Object Lock: refused at the first locked write.
    let plain = Env::empty_s3_at(objects::S3_ENDPOINT);
    let mut init = plain.command_for(&["init"]);
    assert!(
        init.env("DETAFS_OBJECT_LOCK", "1d")
            .output()
            .unwrap()
            .status
            .success()
    );
    let mut create = plain.command_for(&["dataset", "create", "ds"]);
    let out = create.env("DETAFS_OBJECT_LOCK", "1d").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no Object Lock enabled"), "{err}");
    assert!(
        plain.objects.list("datasets/").is_empty(),
        "nothing written"
    );
}
