//! Whatever a writer stores, every reader accepts (docs/security.md): the
//! bounds the readers enforce on a store's objects never refuse a version
//! detafs itself committed. Folders of many shapes are committed through
//! the CLI and read back by another host (a fresh cache), whole.

mod common;

use common::{Env, fingerprint};
use proptest::prelude::*;
use std::path::Path;

/// A folder shape users make: `files` files in a chain of `depth`
/// folders, named by number padded to `name_len` bytes, each empty, one
/// byte (all alike) or one distinct byte pattern.
#[derive(Debug, Clone)]
struct Shape {
    files: usize,
    depth: usize,
    name_len: usize,
    content: Content,
}

#[derive(Debug, Clone, Copy)]
enum Content {
    Empty,
    SameByte,
    Distinct,
}

fn build(root: &Path, s: &Shape) {
    let mut dir = root.to_path_buf();
    for level in 0..s.depth {
        // Short folder names: 1,000 levels must fit in PATH_MAX for the
        // test's own walk.
        dir.push(format!("{}", level % 10));
    }
    std::fs::create_dir_all(&dir).unwrap();
    let len = s.name_len;
    for i in 0..s.files {
        let body: Vec<u8> = match s.content {
            Content::Empty => vec![],
            Content::SameByte => vec![b'x'],
            Content::Distinct => i.to_le_bytes().to_vec(),
        };
        std::fs::write(dir.join(format!("{i:0>len$}")), body).unwrap();
    }
}

/// Commits the shape, then reads it back on another host: export whole,
/// `ls` of its folder, `verify`.
fn committed_and_read_back(env: &Env, s: &Shape) {
    let src = tempfile::tempdir().unwrap();
    build(src.path(), s);
    env.commit(src.path(), &format!("{s:?}"));
    let other = env.other_host();
    let out = other.path("out");
    other.ok(&["export", "ds", "latest", out.to_str().unwrap()]);
    assert!(
        fingerprint(src.path()) == fingerprint(&out),
        "{s:?}: exported tree differs"
    );
    let deepest = (0..s.depth)
        .map(|l| (l % 10).to_string())
        .collect::<Vec<_>>()
        .join("/");
    let mut ls = vec!["ls", "ds", "latest"];
    if s.depth > 0 {
        ls.push(&deepest);
    }
    let listed = other.ok(&ls);
    assert_eq!(listed.lines().count(), s.files, "{s:?}");
    other.ok(&["verify", "ds"]);
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop_oneof![1usize..50, 50usize..25_000],
        prop_oneof![0usize..4, 4usize..=1000],
        1usize..=255,
        prop_oneof![
            Just(Content::Empty),
            Just(Content::SameByte),
            Just(Content::Distinct)
        ],
    )
        .prop_map(|(files, depth, name_len, content)| Shape {
            files,
            depth,
            name_len,
            content,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    #[test]
    fn every_version_the_writer_commits_every_reader_reads(s in shape()) {
        committed_and_read_back(&Env::new(), &s);
    }
}

/// The report's case: a folder of 20,000 empty files compresses far
/// beyond what a reader would inflate from a forged store.
#[test]
fn a_folder_of_twenty_thousand_empty_files_reads_back() {
    let env = Env::new();
    for content in [Content::Empty, Content::SameByte] {
        let s = Shape {
            files: 20_000,
            depth: 1,
            name_len: 8,
            content,
        };
        committed_and_read_back(&env, &s);
    }
}

#[test]
fn a_folder_of_a_hundred_thousand_files_reads_back() {
    let s = Shape {
        files: 100_000,
        depth: 0,
        name_len: 6,
        content: Content::Empty,
    };
    committed_and_read_back(&Env::new(), &s);
}
