//! The one spelling of a path inside a version or staging. Whatever a user
//! or a client sends (a CLI argument, a gateway URL, a commit's file names)
//! is parsed here once, and lookup, listing, diff and the access policy all
//! take the parsed `RelPath`, so what a lookup finds and what the policy
//! judges are the same path: a spelling the parser would have to
//! reinterpret (`.`, `..`, an empty name) is refused, never mapped.

use crate::error::{Error, Result};
use crate::limits;
use std::borrow::Cow;
use std::fmt;

/// Names separated by `/`, each a name a tree may hold (not empty, `.` or
/// `..`, no NUL, at most `limits::MAX_NAME` bytes), at most
/// `limits::MAX_DEPTH` of them; the empty path is the version's root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    pub fn root() -> RelPath {
        RelPath::default()
    }

    /// Parses what a caller sent. One `/` at the start (paths are from the
    /// version's root either way) and one at the end (a folder) are taken
    /// as they are written; any other empty name, `.`, `..`, NUL or a name
    /// longer than a file system allows is refused.
    pub fn parse(raw: impl AsRef<[u8]>) -> Result<RelPath> {
        let raw = raw.as_ref();
        let inner = raw.strip_prefix(b"/").unwrap_or(raw);
        let inner = inner.strip_suffix(b"/").unwrap_or(inner);
        if inner.is_empty() {
            return Ok(RelPath::root());
        }
        let mut depth = 0;
        for name in inner.split(|&b| b == b'/') {
            if let Some(why) = bad_name(name) {
                return Err(bad(raw, why));
            }
            depth += 1;
        }
        if depth > limits::MAX_DEPTH {
            return Err(bad(raw, "deeper than a version may nest"));
        }
        Ok(RelPath(inner.to_vec()))
    }

    /// `self/name`, where `name` is one name (as a tree's entries are).
    pub fn join(&self, name: &[u8]) -> Result<RelPath> {
        if let Some(why) = bad_name(name) {
            return Err(bad(name, why));
        }
        let mut p = self.0.clone();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        Ok(RelPath(p))
    }

    /// The path of `names` from the root down (each checked as `join` does).
    pub fn from_names<N: AsRef<[u8]>>(names: impl IntoIterator<Item = N>) -> Result<RelPath> {
        let mut p = RelPath::root();
        for n in names {
            p = p.join(n.as_ref())?;
        }
        Ok(p)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The names from the root down.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|_| !self.0.is_empty())
    }

    /// The folder it is in and its last name; `None` for the root.
    pub fn split_last(&self) -> Option<(RelPath, &[u8])> {
        match self.0.iter().rposition(|&b| b == b'/') {
            _ if self.is_root() => None,
            Some(i) => Some((RelPath(self.0[..i].to_vec()), &self.0[i + 1..])),
            None => Some((RelPath::root(), &self.0[..])),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As text (names that are not UTF-8 with U+FFFD): how the policy's
    /// resources and messages spell it.
    pub fn lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lossy())
    }
}

/// Why `name` is no name a version may hold.
fn bad_name(name: &[u8]) -> Option<&'static str> {
    match name {
        b"" => Some("an empty name (two '/' in a row)"),
        b"." | b".." => Some("'.' or '..' (paths are written from the version's root)"),
        _ if name.contains(&0) => Some("a NUL byte"),
        _ if name.len() > limits::MAX_NAME => Some("a name longer than 255 bytes"),
        _ => None,
    }
}

fn bad(raw: &[u8], why: &str) -> Error {
    Error::InvalidInput(format!(
        "bad path {:?}: {why}; write names separated by '/'",
        String::from_utf8_lossy(raw)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_one_spelling_of_each_path() {
        for (raw, canonical) in [
            ("", ""),
            ("/", ""),
            ("a", "a"),
            ("/a/b/", "a/b"),
            ("raw/pii/x.csv", "raw/pii/x.csv"),
            ("...", "..."),
            (".hidden/x", ".hidden/x"),
        ] {
            assert_eq!(
                RelPath::parse(raw).unwrap().as_bytes(),
                canonical.as_bytes()
            );
        }
        for raw in [
            "raw/./pii",
            "./raw",
            "raw/.",
            "raw/../pii",
            "..",
            "raw//pii",
            "//raw",
            "raw//",
            "a\0b",
        ] {
            assert!(RelPath::parse(raw).is_err(), "{raw:?}");
        }
        assert!(RelPath::parse("x".repeat(256)).is_err());
        assert!(RelPath::parse(vec!["d"; limits::MAX_DEPTH + 1].join("/")).is_err());
        assert!(RelPath::parse(vec!["d"; limits::MAX_DEPTH].join("/")).is_ok());
    }

    #[test]
    fn names_and_split_last() {
        let p = RelPath::parse("a/b/c").unwrap();
        assert_eq!(p.names().collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
        let (dir, name) = p.split_last().unwrap();
        assert_eq!((dir.as_bytes(), name), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(RelPath::root().names().count(), 0);
        assert!(RelPath::root().split_last().is_none());
        assert_eq!(RelPath::root().join(b"x").unwrap().as_bytes(), b"x");
        assert!(p.join(b"..").is_err());
    }

    proptest! {
        /// Whatever is sent, the parse either refuses it or gives names
        /// that each round-trip through `join`, and parsing its own
        /// spelling again gives the same path.
        #[test]
        fn a_parsed_path_is_its_own_spelling(raw in prop::collection::vec(
            prop_oneof![Just(b'/'), Just(b'.'), Just(0u8), Just(b'a'), any::<u8>()], 0..24)
        ) {
            if let Ok(p) = RelPath::parse(&raw) {
                prop_assert_eq!(&RelPath::parse(p.as_bytes()).unwrap(), &p);
                let mut rebuilt = RelPath::root();
                for n in p.names() {
                    prop_assert!(bad_name(n).is_none());
                    rebuilt = rebuilt.join(n).unwrap();
                }
                prop_assert_eq!(rebuilt, p);
            }
        }
    }
}
