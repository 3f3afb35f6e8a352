//! Format 2, sealed stores: nothing in the clear at rest, a wrong key
//! changes nothing, every changed byte is detected, key slots, and format 1
//! stores of the previous release still read and write.

mod common;

use common::{Env, commit_via_control, run_ok};
use std::path::Path;
use std::process::Command;

/// Every file under `dir`, with its bytes.
fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Where `needle` is in the clear under `dir` (file names included).
fn in_the_clear(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    files(dir)
        .into_iter()
        .filter(|(p, b)| holds(b, needle) || holds(p.as_os_str().as_encoded_bytes(), needle))
        .map(|(p, _)| p)
        .collect()
}

#[test]
fn nothing_of_a_dataset_is_in_the_clear_at_rest() {
    let env = Env::new_local();
    let body = hex::encode(rand::random::<[u8; 16]>());
    let name = hex::encode(rand::random::<[u8; 16]>());
    let src = env.path("src");
    std::fs::create_dir_all(src.join("tables")).unwrap();
    // Compressible text around the marker, and the marker as a file name.
    let text = format!("city,mm\n{}\n{body}\n", "Nairobi,3\n".repeat(5000));
    std::fs::write(src.join("tables/weather.csv"), &text).unwrap();
    std::fs::write(src.join(format!("{name}.txt")), "named").unwrap();
    env.commit(&src, "v1");
    // Through the mount too: read everything, stage and commit.
    let m = env.mount(&[]);
    common::fingerprint(&m.path("versions/v1"));
    std::fs::write(m.path("staging/more.csv"), format!("x,{body}\n")).unwrap();
    commit_via_control(&m, "through the mount").unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path("versions/v2/tables/weather.csv")).unwrap(),
        text
    );
    let log = m.log();
    drop(m);
    let out = env.path("out");
    env.ok(&["export", "ds", "v2", out.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(out.join("tables/weather.csv")).unwrap(),
        text
    );

    for marker in [body.as_bytes(), name.as_bytes()] {
        assert_eq!(
            in_the_clear(Path::new(&env.store), marker),
            Vec::<std::path::PathBuf>::new()
        );
        assert_eq!(
            in_the_clear(&env.cache, marker),
            Vec::<std::path::PathBuf>::new()
        );
        assert!(!holds(log.as_bytes(), marker));
    }
    // Nor the content's SHA-256 (a plain content address would name it).
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    };
    assert!(in_the_clear(Path::new(&env.store), sha.as_bytes()).is_empty());
    // And the text compressed: the store holds far less than its size.
    let stored: usize = files(&Path::new(&env.store).join("packs"))
        .iter()
        .map(|(_, b)| b.len())
        .sum();
    assert!(
        stored < text.len() / 5,
        "{stored} bytes stored for {}",
        text.len()
    );
}

#[test]
fn two_stores_given_the_same_data_share_no_name_or_byte_of_it() {
    let a = Env::new_local();
    let b = Env::new_local();
    let src = a.path("src");
    common::sample_tree(&src, 5);
    a.commit(&src, "same");
    b.commit(&src, "same");
    let names = |e: &Env| -> std::collections::HashSet<String> {
        files(Path::new(&e.store))
            .into_iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .filter(|n| n.len() == 64)
            .collect()
    };
    assert!(names(&a).is_disjoint(&names(&b)));
    // Nor a run of 32 bytes: every 16 bytes of one store's packs, at every
    // offset, against the other's at every 16th (a common run of 32 holds
    // one of those).
    let mut seen = std::collections::HashSet::new();
    for (_, bytes) in files(&Path::new(&a.store).join("packs")) {
        for w in bytes.windows(16) {
            seen.insert(u128::from_le_bytes(w.try_into().unwrap()));
        }
    }
    for (_, bytes) in files(&Path::new(&b.store).join("packs")) {
        // The pack magic and encoding bytes are the format's, not data.
        for w in bytes[8..].chunks_exact(16) {
            assert!(!seen.contains(&u128::from_le_bytes(w.try_into().unwrap())));
        }
    }
}

#[test]
fn a_wrong_key_or_passphrase_is_one_clear_error_and_changes_nothing() {
    let env = Env::empty_local();
    run_ok(
        env.command()
            .env("DETAFS_NEW_PASSWORD", "correct horse battery")
            .args(["init", "--passphrase"]),
    );
    env.ok(&["dataset", "create", "ds"]);
    let src = env.path("src");
    common::sample_tree(&src, 1);
    env.commit(&src, "v1");
    let before = files(Path::new(&env.store));
    let wrong_key = env.other_host();
    // Another store's key file.
    let other = Env::new_local();
    let mut c = wrong_key.command();
    c.env("DETAFS_KEY_FILE", &other.key_file);
    let out = c.args(["log", "ds"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not open store"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for args in [
        &["log", "ds"][..],
        &["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"],
    ] {
        let out = wrong_key
            .command()
            .env("DETAFS_KEY_FILE", env.path("none.key"))
            .env("DETAFS_PASSWORD", "wrong horse")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("detafs"),
            "{args:?}"
        );
    }
    // No key at all: the error says how to give one.
    let out = wrong_key
        .command()
        .env("DETAFS_KEY_FILE", env.path("none.key"))
        .args(["log", "ds"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DETAFS_PASSWORD"));
    assert_eq!(files(Path::new(&env.store)), before);
    // The right passphrase, without the key file, opens it.
    let out = wrong_key
        .command()
        .env("DETAFS_KEY_FILE", env.path("none.key"))
        .env("DETAFS_PASSWORD", "correct horse battery")
        .args(["log", "ds", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn every_changed_byte_is_detected_never_served() {
    let env = Env::new_local();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.csv"), common::noise(50_000, 1)).unwrap();
    std::fs::write(src.join("b.csv"), "b\n").unwrap();
    env.commit(&src, "v1");
    env.ok(&["tag", "ds", "v1", "first"]);
    let store = Path::new(&env.store);
    let flip = |path: &Path, at: usize| {
        let mut b = std::fs::read(path).unwrap();
        let at = at.min(b.len() - 1);
        b[at] ^= 0x01;
        std::fs::write(path, b).unwrap();
    };
    // A record: refused by name.
    let rec = store.join("datasets/ds/records/00000000000000000001.json");
    let good = std::fs::read(&rec).unwrap();
    flip(&rec, 40);
    let (code, err) = env.other_host().fails(&["log", "ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("does not open with this store's key"), "{err}");
    std::fs::write(&rec, good).unwrap();
    // The tag.
    let tag = store.join("datasets/ds/tags/first.json");
    flip(&tag, 30);
    let report = env.run(&["verify"]);
    assert_eq!(report.status.code(), Some(1));
    std::fs::remove_file(&tag).unwrap();
    // The data: the biggest pack holds a.csv's chunks. Read with an empty
    // cache, through the mount: EIO, never other bytes; verify names it.
    let pack = files(&store.join("packs"))
        .into_iter()
        .max_by_key(|(_, b)| b.len())
        .unwrap()
        .0;
    flip(&pack, 20_000);
    std::fs::remove_dir_all(&env.cache).unwrap();
    let m = env.mount(&[]);
    let err = std::fs::read(m.path("versions/v1/a.csv")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        std::fs::read_to_string(m.path("versions/v1/b.csv")).unwrap(),
        "b\n"
    );
    drop(m);
    let report = env.run(&["verify"]);
    assert_eq!(report.status.code(), Some(1));
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("a.csv"), "{text}");
    // A key slot: the key file opens nothing then.
    let slot = files(&store.join("keys")).remove(0).0;
    flip(&slot, 200);
    let (code, err) = env.other_host().fails(&["log", "ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("does not open store"), "{err}");
}

#[test]
fn key_slots_are_added_and_removed_and_a_removed_one_opens_nothing() {
    let env = Env::new_local();
    let src = env.path("src");
    common::sample_tree(&src, 2);
    env.commit(&src, "v1");
    let second = env.path("second.key");
    let added = run_ok(
        env.command()
            .args(["key", "add", "--file", second.to_str().unwrap()]),
    );
    let second_id = added.trim().rsplit(' ').next().unwrap().to_string();
    run_ok(
        env.command()
            .env("DETAFS_NEW_PASSWORD", "a long passphrase")
            .args(["key", "add", "--passphrase"]),
    );
    let list = env.ok(&["key", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");
    assert_eq!(list.matches("passphrase").count(), 1, "{list}");
    // Each opens the store.
    let with = |key: &Path, pass: Option<&str>| {
        let mut c = env.other_host().command();
        c.env("DETAFS_KEY_FILE", key);
        if let Some(p) = pass {
            c.env("DETAFS_PASSWORD", p);
        }
        c.args(["cat", "ds", "v1", "a.csv"]).output().unwrap()
    };
    let none = env.path("none.key");
    assert!(with(&second, None).status.success());
    assert!(with(&none, Some("a long passphrase")).status.success());
    // Removing the passphrase's slot revokes it; the key files still work.
    let id = list
        .lines()
        .find(|l| l.contains("passphrase"))
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    env.ok(&["key", "remove", id]);
    assert!(!with(&none, Some("a long passphrase")).status.success());
    assert!(with(&second, None).status.success());
    // The first key file's slot goes (removed with the second key file);
    // the last one left is refused, and only the second key file opens it.
    let left = env.ok(&["key", "list"]);
    let first_id = left
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .find(|id| *id != second_id)
        .unwrap()
        .to_string();
    let remove = |id: &str| {
        let mut c = env.other_host().command();
        c.env("DETAFS_KEY_FILE", &second);
        c.args(["key", "remove", id]).output().unwrap()
    };
    assert!(remove(&first_id).status.success());
    let last = remove(&second_id);
    assert_eq!(last.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&last.stderr).contains("last"),
        "{last:?}"
    );
    assert!(!with(&env.key_file, None).status.success());
    assert!(with(&second, None).status.success());
}

#[test]
fn a_format_1_store_of_the_previous_release_reads_writes_and_verifies() {
    let env = Env::empty_local();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format1-store");
    run_ok(Command::new("cp").args(["-aT", fixture]).arg(&env.store));
    assert_eq!(env.log_of("weather").len(), 2);
    assert_eq!(
        env.ok(&["cat", "weather", "first-release", "tables/weather.csv"]),
        "city,mm\nNairobi,3\n"
    );
    env.ok(&["verify"]);
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("new.csv"), "a\n").unwrap();
    env.ok(&[
        "commit",
        "weather",
        "--from",
        src.to_str().unwrap(),
        "-m",
        "v3",
    ]);
    env.ok(&["verify"]);
    // Still format 1, in the clear, readable by the previous release.
    let marker: serde_json::Value =
        serde_json::from_slice(&env.objects.read("detafs.json")).unwrap();
    assert_eq!(marker["format"], 1);
    let v3: serde_json::Value = serde_json::from_slice(
        &env.objects
            .read("datasets/weather/records/00000000000000000003.json"),
    )
    .unwrap();
    assert_eq!(v3["format"], 1);
    assert!(!Path::new(&env.store).join("keys").exists());
    let (code, err) = env.fails(&["key", "list"]);
    assert_eq!(code, 1);
    assert!(err.contains("not encrypted"), "{err}");
}

/// A store's format only goes up: a marker edited to say format 1 (which
/// anyone who can write the store can do) never makes a key holder read
/// or write in the clear, on this host or a fresh one.
#[test]
fn a_store_whose_marker_was_downgraded_is_refused_and_nothing_is_written() {
    let env = Env::new_local();
    let src = env.path("src");
    common::sample_tree(&src, 3);
    env.commit(&src, "v1");
    let mut marker: serde_json::Value =
        serde_json::from_slice(&env.objects.read("detafs.json")).unwrap();
    assert_eq!(marker["format"], 2);
    marker["format"] = 1.into();
    marker.as_object_mut().unwrap().remove("sealing");
    env.objects
        .write("detafs.json", serde_json::to_vec(&marker).unwrap());
    let before = env.objects.list("");
    let refused = |e: &Env, what: &str| {
        for args in [
            &["dataset", "create", "x"][..],
            &["commit", "ds", "--from", src.to_str().unwrap(), "-m", "m"],
            &["log", "ds"],
        ] {
            let (code, err) = e.fails(args);
            assert_eq!(code, 1, "{what}: {args:?}");
            assert!(err.contains("format 1"), "{what}: {err}");
        }
    };
    // This host opened it sealed before.
    refused(&env, "same host");
    // A fresh host with the key file: the key file names the store.
    refused(&env.other_host(), "fresh host with the key");
    // A fresh host without any key: the store still holds key slots.
    let bare = env.other_host();
    let out = bare
        .command()
        .env("DETAFS_KEY_FILE", bare.path("none.key"))
        .args(["dataset", "create", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("key slots"), "{err}");
    assert_eq!(env.objects.list(""), before, "nothing was written");
}

/// A record that does not open with the store's key costs its version and
/// those after it, not the dataset: the mount starts and serves the
/// versions before it; `log` still refuses, naming it.
#[test]
fn a_record_that_does_not_open_costs_only_the_versions_from_it() {
    let env = Env::new_local();
    let src = env.path("src");
    for v in 1..=3 {
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.csv"), format!("{v}\n")).unwrap();
        env.commit(&src, &format!("v{v}"));
    }
    let key = "datasets/ds/records/00000000000000000002.json";
    let mut bytes = env.objects.read(key);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    env.objects.write(key, bytes);
    let fresh = env.other_host();
    let (code, err) = fresh.fails(&["log", "ds"]);
    assert_eq!(code, 1);
    assert!(err.contains("00000000000000000002"), "{err}");
    let m = fresh.mount(&["--read-only"]);
    assert_eq!(
        std::fs::read_to_string(m.path("versions/v1/a.csv")).unwrap(),
        "1\n"
    );
    assert!(!m.path("versions/v2").exists());
    assert!(!m.path("versions/v3").exists());
}
