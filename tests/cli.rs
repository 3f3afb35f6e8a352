//! End-to-end tests of the command line on temporary stores.

mod common;

use common::{Env, fingerprint, noise, run_ok, sample_tree};
use std::process::Command;

#[test]
fn versions_export_byte_identical_with_modes_and_mtimes() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 1);
    let mut expected = Vec::new();
    assert_eq!(env.commit(&src, "first"), "v1");
    expected.push(fingerprint(&src));

    std::fs::write(src.join("a.csv"), b"id,v\n1,2\n2,3\n").unwrap();
    std::fs::remove_file(src.join("empty")).unwrap();
    std::fs::write(src.join("sub/new.txt"), b"new").unwrap();
    assert_eq!(env.commit(&src, "second"), "v2");
    expected.push(fingerprint(&src));

    std::fs::remove_dir_all(src.join("sub")).unwrap();
    assert_eq!(env.commit(&src, "third"), "v3");
    expected.push(fingerprint(&src));

    for (i, want) in expected.iter().enumerate() {
        let out = env.path(&format!("export{i}"));
        env.ok(&[
            "export",
            "ds",
            &format!("v{}", i + 1),
            out.to_str().unwrap(),
        ]);
        assert_eq!(&fingerprint(&out), want, "export of v{}", i + 1);
    }
    // A non-UTF-8 name is listed escaped, one entry per line.
    let ls = env.ok(&["ls", "ds", "1"]);
    assert!(ls.contains("caf\\xe9-latin1.txt"), "{ls}");

    let log = env.log();
    assert_eq!(log.len(), 3);
    assert_eq!(log[1]["files_added"], 1);
    assert_eq!(log[1]["files_changed"], 1);
    assert_eq!(log[1]["files_removed"], 1);
    assert_eq!(log[2]["files_removed"], 3);
    assert_eq!(log[0]["message"], "first");
    assert!(log[0]["delta_size"].as_u64().unwrap() > 1_500_000);
    assert!(!log[0]["author"].as_str().unwrap().is_empty());
    let text = env.ok(&["log", "ds"]);
    assert!(text.starts_with("v3 "), "newest first: {text}");

    assert_eq!(env.ok(&["cat", "ds", "2", "sub/new.txt"]), "new");
    assert_eq!(
        env.ok(&["cat", "ds", "latest", "a.csv"]),
        "id,v\n1,2\n2,3\n"
    );
    let diff = env.ok(&["diff", "ds", "v1", "v2"]);
    assert_eq!(diff, "M a.csv\nD empty\nA sub/new.txt\n");
    let stat = env.ok(&["diff", "ds", "v1", "v2", "--stat"]);
    assert!(
        stat.contains("3 files changed: 1 added, 1 modified, 1 removed"),
        "{stat}"
    );
    env.ok(&["verify"]);
}

#[test]
fn unchanged_data_costs_nothing_and_a_middle_edit_costs_a_few_chunks() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut big = noise(8 << 20, 7);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    env.commit(&src, "v1");

    // Same content in a second file and a touched mtime: no new chunk data.
    std::fs::write(src.join("copy.bin"), &big).unwrap();
    env.commit(&src, "copy");
    let log = env.log();
    assert!(
        log[1]["delta_size"].as_u64().unwrap() < 10_000,
        "{:?}",
        log[1]
    );

    let mid = big.len() / 2;
    big[mid..mid + 100_000].fill(1);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    env.commit(&src, "edit");
    let added = env.log()[2]["delta_size"].as_u64().unwrap();
    assert!(
        added < 100_000 + 2 * 256 * 1024 + 20_000,
        "edit stored {added} bytes"
    );
    // A 1 MiB edit of fresh data stores at most 3x its size, chunks around
    // it, seal and tree included (sealed or not).
    big[1 << 20..2 << 20].copy_from_slice(&noise(1 << 20, 8));
    std::fs::write(src.join("big.bin"), &big).unwrap();
    env.commit(&src, "edit 1 MiB");
    let added = env.log()[3]["delta_size"].as_u64().unwrap();
    assert!(added <= 3 << 20, "a 1 MiB edit stored {added} bytes");
    eprintln!("a 1 MiB edit stored {added} bytes");

    // Nothing changed: refused with its own exit code, no version made.
    let (code, err) = env.fails(&[
        "commit",
        "ds",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "again",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("nothing to commit"), "{err}");
    assert_eq!(env.log().len(), 4);
}

#[test]
fn content_repeated_within_a_file_is_stored_once() {
    // Chunks are encoded on another thread while the file is read: one
    // seen again before its first copy is packed must not be stored twice.
    let block = noise(300_000, 11);
    let file: Vec<u8> = block
        .iter()
        .copied()
        .cycle()
        .take(40 * block.len())
        .collect();
    // A plaintext store's chunker is the published one: the file's
    // distinct chunks are known here, and the store must hold each once
    // (a chunk stored twice adds at least 16 KiB; a tree and the packs'
    // headers take under 1 KiB). A sealed store's is keyed, and where the
    // cuts of each copy fall, hence how many distinct chunks the file has,
    // depends on the key (1.2 to 4 copies' worth over 36 keys measured):
    // there the bound is only that the copies are not all stored (40).
    let mut distinct = std::collections::HashSet::new();
    for c in detafs::snapshot::chunker::chunks(&file[..], file.len() as u64, 0) {
        distinct.insert(c.unwrap());
    }
    let once: u64 = distinct.iter().map(|c| c.len() as u64).sum();
    for (env, bound) in [
        (Env::new_plaintext(), once + 4096),
        (Env::new(), 12 * block.len() as u64),
    ] {
        let src = env.path("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("repeated.bin"), &file).unwrap();
        env.commit(&src, "v1");
        let added = env.log()[0]["delta_size"].as_u64().unwrap();
        assert!(
            added < bound,
            "{added} bytes stored for 40 copies of {} bytes ({} chunks of {once} bytes)",
            block.len(),
            distinct.len()
        );
        assert!(env.run(&["cat", "ds", "v1", "repeated.bin"]).stdout == file);
        env.ok(&["verify"]);
    }
}

#[test]
fn a_changed_large_file_is_cut_where_a_first_commit_of_its_bytes_would_cut() {
    // A large file committed from here before is cut again along its
    // previous chunks (`snapshot::rechunk`). Whatever the edit, its chunks
    // must be those a first commit of the same bytes finds: committed
    // again from another folder (no previous chunks there) to another
    // dataset, the same bytes add no chunk.
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut data = noise(6 << 20, 1);
    type Edit = fn(&mut Vec<u8>);
    let edits: [(&str, Edit); 5] = [
        ("overwrite", |d| {
            d[3 << 20..(3 << 20) + 100_000].copy_from_slice(&noise(100_000, 2))
        }),
        ("insert", |d| {
            drop(d.splice(100_000..100_000, noise(5_000, 3)))
        }),
        ("delete", |d| drop(d.drain(2 << 20..(2 << 20) + 70_000))),
        ("append", |d| d.extend_from_slice(b"one more row\n")),
        ("truncate", |d| d.truncate(5 << 20)),
    ];
    let write = |dir: &std::path::Path, data: &[u8]| {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("big.bin"), data).unwrap();
        // The stat cache keeps no file changed within its racy window:
        // wait, so that the next commit has this one's chunks to cut along.
        common::settle(dir);
    };
    write(&src, &data);
    env.commit(&src, "first");
    for (i, (name, edit)) in edits.iter().enumerate() {
        edit(&mut data);
        write(&src, &data);
        let out = env
            .command()
            .env("DETAFS_LOG", "detafs=debug")
            .args(["commit", "ds", "--from", src.to_str().unwrap(), "-m", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(log.contains("cut again along"), "{name}: {log}");
        let other = env.path(&format!("other{i}"));
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("big.bin"), &data).unwrap();
        let o = format!("o{i}");
        env.ok(&["dataset", "create", &o]);
        env.ok(&["commit", &o, "--from", other.to_str().unwrap(), "-m", name]);
        let added = env.log_of(&o)[0]["delta_size"].as_u64().unwrap();
        // A tree listing about a hundred chunks: a few KiB; one chunk more
        // than the first commit found is at least 16 KiB.
        assert!(
            added < 12 << 10,
            "{name}: {added} bytes added by the same bytes"
        );
        let v = (i + 2).to_string();
        assert!(
            env.run(&["cat", "ds", &v, "big.bin"]).stdout == data,
            "{name}"
        );
    }
    env.ok(&["verify"]);
}

#[test]
fn twenty_thousand_small_files_make_few_objects() {
    let env = Env::new();
    let src = env.path("src");
    for d in 0..100 {
        let dir = src.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..200 {
            std::fs::write(
                dir.join(format!("f{f}.txt")),
                noise(1000 + f * 7, d * 1000 + f as u64),
            )
            .unwrap();
        }
    }
    env.commit(&src, "many");
    let objects = env.objects.list("packs").len();
    assert!(objects <= 20, "{objects} pack objects for 20,000 files");
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(fingerprint(&out), fingerprint(&src));
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 3);
    env.commit(&src, "first");
    let before = env.objects.list("");
    let s = src.to_str().unwrap();

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["log", "nope"], "no dataset named \"nope\""),
        (
            vec!["commit", "nope", "--from", s, "-m", "x"],
            "no dataset named",
        ),
        (vec!["cat", "ds", "v9", "a.csv"], "has no version v9"),
        (
            vec!["cat", "ds", "banana", "a.csv"],
            "has no version banana",
        ),
        (vec!["cat", "ds", "b@nana", "a.csv"], "bad version"),
        (vec!["cat", "ds", "latest~x", "a.csv"], "bad version"),
        (
            vec!["cat", "ds", "v1", "missing.txt"],
            "missing.txt: no such file",
        ),
        (vec!["cat", "ds", "v1", "sub"], "not a regular file"),
        (
            vec!["commit", "ds", "--from", "/nonexistent/dir", "-m", "x"],
            "/nonexistent/dir",
        ),
        (
            vec!["commit", "ds", "--from", s, "-m", "  "],
            "empty commit message",
        ),
        (vec!["dataset", "create", "ds"], "already exists"),
        (vec!["dataset", "create", "../evil"], "invalid dataset name"),
        (vec!["diff", "ds", "v1", "v7"], "has no version v7"),
    ];
    for (args, want) in cases {
        let (code, err) = env.fails(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "one-line error for {args:?}: {err}"
        );
    }
    // A file inside DIR: commit --from it is not a directory.
    let (_, err) = env.fails(&["commit", "ds", "--from", &format!("{s}/a.csv"), "-m", "x"]);
    assert!(err.contains("not a directory"), "{err}");
    // Export into a non-empty directory.
    let (_, err) = env.fails(&["export", "ds", "v1", s]);
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(env.objects.list(""), before, "store unchanged");
    assert_eq!(env.log().len(), 1);
}

#[test]
fn stores_that_are_not_stores_are_refused() {
    // Folders; tests/s3.rs has the same cases for buckets.
    let env = Env::empty_local();
    let junk = env.path("junk");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(junk.join("photo.jpg"), b"x").unwrap();
    let j = junk.to_str().unwrap();
    let (_, err) = env.fails(&["--store", j, "init"]);
    assert!(err.contains("not empty and not a detafs store"), "{err}");
    let (_, err) = env.fails(&["--store", j, "dataset", "list"]);
    assert!(err.contains("is not a detafs store"), "{err}");
    let missing = env.path("missing-store");
    let (_, err) = env.fails(&["--store", missing.to_str().unwrap(), "log", "ds"]);
    assert!(err.contains("is not a detafs store"), "{err}");
    assert!(!missing.exists(), "a read command created the store folder");
    let (_, err) = env.fails(&["--store", "ftp://example/x", "dataset", "list"]);
    assert!(err.contains("unsupported store scheme"), "{err}");

    // init is idempotent; a newer format is refused.
    env.ok(&["init"]);
    assert!(env.ok(&["init"]).contains("already"));
    env.objects.write(
        "detafs.json",
        br#"{"format": 99, "store_id": "x"}"#.to_vec(),
    );
    let (_, err) = env.fails(&["dataset", "list"]);
    assert!(
        err.contains("format 99") && err.contains("upgrade"),
        "{err}"
    );
}

#[test]
fn unreadable_file_is_named_and_nothing_is_committed() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("fine.txt"), b"ok").unwrap();
    std::fs::write(src.join("secret.txt"), b"no").unwrap();
    let status = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(env.dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::set_permissions(
        src.join("secret.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    // Root reads it anyway: as root, run detafs as nobody.
    let mut cmd = match nix::unistd::geteuid().is_root() {
        true => {
            let mut cmd = std::process::Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(env!("CARGO_BIN_EXE_detafs"));
            cmd
        }
        false => std::process::Command::new(env!("CARGO_BIN_EXE_detafs")),
    };
    env.configure(&mut cmd)
        .args(["commit", "ds", "--from", src.to_str().unwrap(), "-m", "m"])
        .env("DETAFS_CACHE", env.path("cache-nobody"));
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "commit of an unreadable file succeeded"
    );
    assert!(
        err.contains("secret.txt") && err.contains("ermission denied"),
        "{err}"
    );
    assert!(env.log().is_empty());
}

#[test]
fn progress_output_is_silent_when_piped() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 5);
    let out = env.run(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "m"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v1\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn flipped_byte_is_named_by_verify_and_never_served() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 9);
    env.commit(&src, "first");
    // Find the pack holding big.bin's data: the largest pack.
    let pack = env.objects.largest("packs");
    let mut bytes = env.objects.read(&pack);
    let n = bytes.len() / 2;
    bytes[n] ^= 0x40;
    env.objects.write(&pack, bytes);

    let out = env.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    let name = pack.rsplit('/').next().unwrap();
    assert!(
        report.contains("corrupt: chunk") && report.contains(name),
        "{report}"
    );
    assert!(report.contains("v1:ds/sub/big.bin"), "{report}");
    assert_eq!(
        report.lines().filter(|l| l.starts_with("corrupt")).count(),
        1,
        "{report}"
    );

    let out = env.run(&["cat", "ds", "v1", "sub/big.bin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt") && err.contains("sub/big.bin"),
        "{err}"
    );
    let good = common::noise(1_500_000, 9);
    assert!(
        out.stdout.len() < good.len(),
        "served the whole file despite corruption"
    );
    assert_eq!(
        &out.stdout[..],
        &good[..out.stdout.len()],
        "served wrong bytes"
    );
    // Other files still read.
    assert_eq!(env.ok(&["cat", "ds", "v1", "sub/deeper/note.txt"]), "deep");
}

/// A pack cut short (a disk that filled, a copy stopped half-way): what
/// lies past its end is an error naming the file, never bytes made up;
/// what lies before it is still served, and nothing is changed.
#[test]
fn a_pack_cut_short_is_refused_not_read_past() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 9);
    env.commit(&src, "first");
    let pack = env.objects.largest("packs");
    let bytes = env.objects.read(&pack);
    let cut = bytes[..bytes.len() / 2].to_vec();
    env.objects.write(&pack, cut.clone());
    let out = env.run(&["cat", "ds", "v1", "sub/big.bin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sub/big.bin"), "{err}");
    let good = common::noise(1_500_000, 9);
    assert!(out.stdout.len() < good.len(), "served past the cut");
    assert_eq!(
        &out.stdout[..],
        &good[..out.stdout.len()],
        "served wrong bytes"
    );
    assert_eq!(env.objects.read(&pack), cut, "the pack was left as it was");
    assert_eq!(env.ok(&["cat", "ds", "v1", "sub/deeper/note.txt"]), "deep");
}

#[test]
fn missing_pack_and_broken_chain_are_reported() {
    // Records in the clear, to rewrite one (a sealed one cannot be: sealed.rs).
    let env = Env::new_plaintext();
    let src = env.path("src");
    sample_tree(&src, 2);
    env.commit(&src, "one");
    std::fs::write(src.join("more.txt"), b"more").unwrap();
    env.commit(&src, "two");
    std::fs::write(src.join("more.txt"), b"even more").unwrap();
    env.commit(&src, "three");
    env.ok(&["verify"]);

    // Rewrite v2's message: v3's parent hash no longer matches.
    let rec = "datasets/ds/records/00000000000000000002.json";
    let text = String::from_utf8(env.objects.read(rec))
        .unwrap()
        .replace("\"two\"", "\"TWO\"");
    env.objects.write(rec, text.into_bytes());
    let out = env.run(&["verify", "ds"]);
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("broken chain") && report.contains("00000000000000000003.json"),
        "{report}"
    );

    // Remove the last record: this host knew v3, the store lost it.
    env.objects
        .delete("datasets/ds/records/00000000000000000003.json");
    let report = String::from_utf8_lossy(&env.run(&["verify", "ds"]).stdout).into_owned();
    assert!(
        report.contains("v3..v3") && report.contains("missing from the store"),
        "{report}"
    );

    // Delete the largest pack: missing, naming versions and paths.
    env.objects.delete(&env.objects.largest("packs"));
    let report = String::from_utf8_lossy(&env.run(&["verify"]).stdout).into_owned();
    assert!(
        report.contains("missing: packs/") && report.contains("sub/big.bin"),
        "{report}"
    );
}

#[test]
fn gc_deletes_only_unreachable_objects_past_grace() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 4);
    env.commit(&src, "one");
    // Debris: a pack no record reaches.
    let debris = "packs/00/00aa000000000000000000000000000000000000000000000000000000000000";
    env.objects.write(debris, b"DTFSPAK1junk".to_vec());
    let out = env.run(&["verify"]);
    assert!(out.status.success(), "garbage is not an error");
    assert!(String::from_utf8_lossy(&out.stdout).contains("garbage: packs/00/00aa"));

    // Within the grace period nothing is deleted.
    assert!(!env.ok(&["gc"]).contains("00aa"));
    assert!(env.objects.exists(debris));
    let dry = env.ok(&["gc", "--grace", "0s", "--dry-run"]);
    assert!(dry.contains("would delete packs/00/00aa"), "{dry}");
    assert!(env.objects.exists(debris));
    env.ok(&["gc", "--grace", "0s"]);
    assert!(!env.objects.exists(debris));
    let out = env.path("out");
    env.ok(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(fingerprint(&out), fingerprint(&src));
    let verify = env.ok(&["verify"]);
    assert!(!verify.contains("garbage"), "{verify}");
}

#[test]
fn local_state_can_be_deleted_and_rebuilt() {
    let env = Env::new();
    let src = env.path("src");
    sample_tree(&src, 6);
    env.commit(&src, "one");
    std::fs::write(src.join("x"), b"x").unwrap();
    env.commit(&src, "two");
    std::fs::remove_dir_all(&env.cache).unwrap();
    assert_eq!(env.log().len(), 2);
    env.ok(&["reindex"]);
    assert_eq!(env.log().len(), 2);
    // Dedup still works after the rebuild: re-committing the same data adds no chunks.
    std::fs::write(src.join("y"), b"y").unwrap();
    env.commit(&src, "three");
    assert!(env.log()[2]["delta_size"].as_u64().unwrap() < 10_000);
    env.ok(&["verify"]);
}

#[test]
fn several_datasets_share_a_store() {
    let env = Env::new();
    env.ok(&["dataset", "create", "other"]);
    let list = env.ok(&["dataset", "list"]);
    assert_eq!(list, "ds\nother\n");
    let src = env.path("src");
    sample_tree(&src, 8);
    env.commit(&src, "in ds");
    env.ok(&[
        "commit",
        "other",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "same data",
    ]);
    let other: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(&["log", "other", "--json"])).unwrap();
    assert!(
        other[0]["delta_size"].as_u64().unwrap() < 10_000,
        "data shared across datasets"
    );
    // gc with two datasets keeps both.
    env.ok(&["gc", "--grace", "0s"]);
    env.ok(&["verify"]);
}

/// `commit --from src` while `path` is rewritten in place, `blocks` blocks
/// of `block` bytes a round, without a pause; its exit code and stderr.
fn commit_while_rewriting(
    env: &Env,
    src: &std::path::Path,
    path: &std::path::Path,
    blocks: usize,
    block: usize,
) -> (Option<i32>, String) {
    use std::io::{Seek, Write};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let round = rounds.load(Ordering::Relaxed) + 1;
                f.rewind().unwrap();
                for _ in 0..blocks {
                    f.write_all(&vec![round.to_le_bytes()[0]; block]).unwrap();
                }
                rounds.store(round, Ordering::Relaxed);
            }
        });
        // Each read is held until the writer has written the file again
        // since, so the check after it always sees a change.
        let read = common::Hold::each(env, "file-read");
        let mut commit = env.commit_command(src, "racing", &read.spec);
        let child = commit
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let id = child.id();
        let gone = || {
            std::fs::read_to_string(format!("/proc/{id}/stat")).map_or(true, |s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        };
        while !gone() {
            if read.is_held() {
                let seen = rounds.load(Ordering::Relaxed);
                common::within(std::time::Duration::from_secs(60), "a write", || {
                    rounds.load(Ordering::Relaxed) > seen + 1
                });
                read.step(gone);
            } else {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let out = child.wait_with_output().unwrap();
        stop.store(true, Ordering::Relaxed);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
}

#[test]
fn a_file_rewritten_during_commit_is_never_stored_as_a_mix() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let path = src.join("table.bin");
    std::fs::write(&path, vec![0u8; 8 << 20]).unwrap();
    let (code, err) = commit_while_rewriting(&env, &src, &path, 128, 64 << 10);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("table.bin changed while it was read"), "{err}");
    assert!(env.log().is_empty(), "nothing was committed");
    env.commit(&src, "settled");
    assert_eq!(
        env.run(&["cat", "ds", "v1", "table.bin"]).stdout,
        std::fs::read(&path).unwrap()
    );
}

#[test]
fn a_file_rewritten_while_cut_again_along_its_chunks_is_never_stored_as_a_mix() {
    // The same race where the file has chunks of a previous commit to be
    // cut again along (`snapshot::rechunk`): guesses read while it is
    // rewritten must not land either.
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let path = src.join("table.bin");
    std::fs::write(&path, noise(8 << 20, 4)).unwrap();
    // Older than the stat cache's racy window, so the commit keeps its row.
    common::settle(&src);
    env.commit(&src, "first");
    let (code, err) = commit_while_rewriting(&env, &src, &path, 128, 64 << 10);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("table.bin changed while it was read"), "{err}");
    assert_eq!(env.log().len(), 1, "nothing more was committed");
    env.commit(&src, "settled");
    assert_eq!(
        env.run(&["cat", "ds", "v2", "table.bin"]).stdout,
        std::fs::read(&path).unwrap()
    );
    env.ok(&["verify"]);
}

#[test]
fn a_small_file_rewritten_during_commit_is_never_stored_as_a_mix() {
    // Small files are read ahead on threads of their own: a change there
    // is caught as on the scan's thread.
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..40 {
        std::fs::write(src.join(format!("a{i:02}")), noise(3000, i)).unwrap();
    }
    let path = src.join("b.csv");
    std::fs::write(&path, vec![0u8; 8 << 10]).unwrap();
    let (code, err) = commit_while_rewriting(&env, &src, &path, 8, 1 << 10);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("b.csv changed while it was read"), "{err}");
    assert!(env.log().is_empty(), "nothing was committed");
    env.commit(&src, "settled");
    for name in ["a00", "a39", "b.csv"] {
        assert_eq!(
            env.run(&["cat", "ds", "v1", name]).stdout,
            std::fs::read(src.join(name)).unwrap()
        );
    }
}

#[test]
fn an_export_that_misses_a_pack_fails_naming_it_and_writes_no_wrong_byte() {
    // Files go to two writers while the trees are walked: the failure of one
    // ends the export, names the object, and no file holds a wrong byte.
    let env = Env::new();
    let src = env.path("src");
    for d in 0..6u64 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..40u64 {
            let body = noise(3000, d * 100 + f);
            std::fs::write(src.join(format!("d{d}/f{f}")), body).unwrap();
        }
    }
    std::fs::write(src.join("big.bin"), noise(40 << 20, 5)).unwrap();
    env.commit(&src, "v1");
    let lost = env.objects.largest("packs/");
    env.objects.delete(&lost);
    std::fs::remove_dir_all(&env.cache).unwrap();
    let out = env.path("out");
    let (code, err) = env.fails(&["export", "ds", "v1", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let id = lost.rsplit('/').next().unwrap();
    assert!(
        err.contains(id.split('.').next().unwrap()),
        "{lost} not named: {err}"
    );
    // What was written is what was committed, or a prefix of the file
    // being written when the export stopped.
    for entry in common::files_under(&out) {
        let rel = entry.strip_prefix(&out).unwrap();
        let (got, want) = (
            std::fs::read(&entry).unwrap(),
            std::fs::read(src.join(rel)).unwrap(),
        );
        assert!(want.starts_with(&got), "{rel:?}: a wrong byte");
    }
}

#[test]
fn the_stat_cache_takes_a_commits_files_only_once_it_lands() {
    let env = Env::new();
    let src = env.path("src");
    for d in 0..3 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..4 {
            std::fs::write(src.join(format!("d{d}/f{f}")), format!("{d} {f}")).unwrap();
        }
    }
    // Files changed (ctime) within the racy window are never stat-cached.
    let settle = || common::settle(&src);
    settle();
    env.commit(&src, "v1");
    let index = common::files_under(&env.cache)
        .into_iter()
        .find(|p| p.ends_with("index.sqlite"))
        .expect("an index");
    let rows = || {
        let out = common::run_ok(
            Command::new("sqlite3")
                .arg(&index)
                .arg("select count(*) from stat_cache;"),
        );
        out.trim().parse::<u64>().unwrap()
    };
    assert_eq!(rows(), 12);
    // A commit that dies after reading its files leaves the cache as it was.
    std::fs::write(src.join("d0/new"), b"new").unwrap();
    settle();
    let out = env
        .commit_command(&src, "lost", "before-record=panic")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(rows(), 12);
    env.commit(&src, "v2");
    assert_eq!(rows(), 13);
    assert_eq!(
        env.run(&["cat", "ds", "v2", "d0/new"]).stdout,
        b"new".to_vec()
    );
}

#[test]
fn data_of_a_deleted_and_collected_dataset_is_stored_again_not_referenced() {
    // Both hosts' indexes remember where the deleted dataset's chunks were
    // (and their stat caches which files those were); once gc has removed
    // those packs, no commit may point at them: not on the host that ran
    // gc, not on another, not in a commit that was under way.
    let env = Env::new();
    let other = env.other_host();
    let src = env.path("src");
    sample_tree(&src, 8);
    // Old enough to be stat-cached (files in the racy window are not).
    common::settle(&src);
    for (host, name) in [(&env, "old-a"), (&other, "old-b")] {
        host.ok(&["dataset", "create", name]);
        host.ok(&[
            "commit",
            name,
            "--from",
            src.to_str().unwrap(),
            "-m",
            "first",
        ]);
    }
    // A commit under way on the other host, past its scan when gc runs
    // (it began well before, and waits before its record).
    let racing = other.path("racing");
    sample_tree(&racing, 8);
    common::settle(&racing);
    other.ok(&[
        "commit",
        "old-b",
        "--from",
        racing.to_str().unwrap(),
        "-m",
        "index it",
    ]);
    let before_record = common::Hold::new(&other, "before-record");
    let under_way = other
        .commit_command(&racing, "under way", &before_record.spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    env.ok(&["dataset", "delete", "old-a"]);
    env.ok(&["dataset", "delete", "old-b"]);
    // Its uploads done, its record not yet made: gc runs now.
    before_record.reached();
    env.ok(&["gc", "--grace", "0s"]);
    before_record.release();
    let out = under_way.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("gc ran while this commit was made"), "{err}");
    assert!(other.log().is_empty(), "nothing was committed");
    // Both hosts now commit the same content again: stored anew.
    env.commit(&src, "same data, another dataset");
    other.ok(&[
        "commit",
        "ds",
        "--from",
        racing.to_str().unwrap(),
        "-m",
        "racing",
    ]);
    env.ok(&["verify"]);
    for (host, version, tree) in [(&env, "v1", &src), (&other, "v2", &racing)] {
        std::fs::remove_dir_all(&host.cache).unwrap();
        let out = host.path(&format!("out-{version}"));
        host.ok(&["export", "ds", version, out.to_str().unwrap()]);
        assert_eq!(fingerprint(&out), fingerprint(tree));
    }
}

#[test]
fn unchanged_folders_are_reused_and_every_kind_of_change_is_seen() {
    // A folder whose entries' stats are as at the last commit gets that
    // commit's tree without its files being read: each change below must
    // still reach the version, however deep.
    let env = Env::new();
    let src = env.path("src");
    for a in 0..3 {
        for b in 0..3 {
            let dir = src.join(format!("a{a}/b{b}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..3 {
                std::fs::write(dir.join(format!("f{f}")), format!("{a}{b}{f}")).unwrap();
            }
        }
    }
    std::os::unix::fs::symlink("b0/f0", src.join("a0/link")).unwrap();
    let settle = || common::settle(&src);
    let check = |n: usize| {
        settle();
        env.commit(&src, &format!("v{n}"));
        let out = env.path(&format!("out{n}"));
        env.ok(&["export", "ds", &format!("v{n}"), out.to_str().unwrap()]);
        assert_eq!(fingerprint(&out), fingerprint(&src), "v{n}");
    };
    check(1);
    let folders = || {
        let index = common::files_under(&env.cache)
            .into_iter()
            .find(|p| p.ends_with("index.sqlite"))
            .expect("an index");
        let out = common::run_ok(
            Command::new("sqlite3")
                .arg(index)
                .arg("select count(*) from folder_cache;"),
        );
        out.trim().parse::<u64>().unwrap()
    };
    // Every folder (the root, 3 and 9 below) is kept once its files are
    // settled.
    assert_eq!(folders(), 13);
    let deep = src.join("a2/b1");
    let changes: Vec<Box<dyn Fn()>> = vec![
        // Same size, new bytes.
        Box::new(|| std::fs::write(deep.join("f1"), "XYZ").unwrap()),
        Box::new(|| {
            std::fs::set_permissions(
                deep.join("f2"),
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .unwrap()
        }),
        Box::new(|| std::fs::rename(deep.join("f0"), deep.join("g0")).unwrap()),
        Box::new(|| std::fs::remove_file(src.join("a1/b1/f1")).unwrap()),
        Box::new(|| {
            common::run_ok(
                Command::new("touch")
                    .args(["-m", "-d", "2001-02-03"])
                    .arg(src.join("a0/b2")),
            );
        }),
        Box::new(|| {
            std::fs::remove_file(src.join("a0/link")).unwrap();
            std::os::unix::fs::symlink("b1/f1", src.join("a0/link")).unwrap();
        }),
        Box::new(|| std::fs::create_dir(src.join("a1/b1/new")).unwrap()),
        Box::new(|| std::fs::remove_dir_all(src.join("a2/b2")).unwrap()),
    ];
    for (i, change) in changes.iter().enumerate() {
        change();
        check(i + 2);
    }
    // Nothing changed: nothing to commit.
    settle();
    let out = env.run(&[
        "commit",
        "ds",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "same",
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_tree_deeper_than_a_version_may_hold_is_refused_whole() {
    let env = Env::new();
    let src = env.path("src");
    let mut deep = src.clone();
    for _ in 0..1030 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("f"), b"bottom").unwrap();
    let (code, err) = env.fails(&[
        "commit",
        "ds",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "deep",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("deeper than 1024 levels"), "{err}");
    assert!(env.log().is_empty());
}

#[test]
fn a_local_database_from_a_newer_detafs_is_refused_and_left_alone() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), "1").unwrap();
    env.commit(&src, "one");
    env.ok(&["checkout", "ds", "v1", "a.csv"]);
    let find = |name: &str| {
        let all = common::files_under(&env.cache)
            .into_iter()
            .chain(common::files_under(&env.staging()));
        all.into_iter()
            .find(|p| p.file_name().is_some_and(|n| n == name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let version = |db: &std::path::Path| {
        run_ok(Command::new("sqlite3").arg(db).arg("PRAGMA user_version"))
            .trim()
            .to_string()
    };
    for (name, what) in [
        ("staging.sqlite", "staging database"),
        ("index.sqlite", "local index"),
    ] {
        let db = find(name);
        assert_eq!(version(&db), "1", "{name} records its schema");
        run_ok(
            Command::new("sqlite3")
                .arg(&db)
                .arg("PRAGMA user_version = 7"),
        );
        let (code, err) = env.fails(&["status", "ds"]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!("the {what} at {}", db.display())),
            "{err}"
        );
        assert!(
            err.contains("newer detafs (schema 7; this one knows up to 1)"),
            "{err}"
        );
        assert_eq!(version(&db), "7", "left as it was");
        run_ok(
            Command::new("sqlite3")
                .arg(&db)
                .arg("PRAGMA user_version = 1"),
        );
    }
    assert_eq!(env.ok(&["status", "ds"]), "");
}
