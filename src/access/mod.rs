//! Access control: who may see, read and commit which versions. The
//! policy language (`policy`), its hash-chained history in the store
//! (`history`), the mapping of a Unix caller to principals (`caller`) and
//! the audit trail of a daemon's decisions (`trail`).
//! Without a policy in the store nothing is checked (Unix permissions only).

pub mod caller;
pub mod policy;
pub mod trail;

pub use policy::{Action, Decision, Policy, Who};

use crate::relpath::RelPath;

/// The resource names of a dataset, a version (under its number and each
/// tag), and a path in it (folders end in `/`, so `…/files/private/*`
/// covers the folder `private` itself). A statement about a resource covers
/// what is inside it: a version's or a path's names come with those of
/// everything above them.
pub fn dataset_resource(dataset: &str) -> String {
    format!("datasets/{dataset}")
}

/// The policy's name of a version of `dataset` by one of its names
/// (`v3`, a tag).
pub fn version_resource(dataset: &str, name: &str) -> String {
    format!("{}/versions/{name}", dataset_resource(dataset))
}

/// The policy's name of `path` in the version named `version` (as made
/// by `version_resource`).
pub fn file_resource(version: &str, path: &str) -> String {
    format!("{version}/files/{path}")
}

/// A version's names, its dataset's first.
pub fn version_resources(dataset: &str, version: u64, tags: &[String]) -> Vec<String> {
    let names = std::iter::once(format!("v{version}")).chain(tags.iter().cloned());
    std::iter::once(dataset_resource(dataset))
        .chain(names.map(|v| version_resource(dataset, &v)))
        .collect()
}

/// The names of `path` in each of `versions` (as made by
/// `version_resources`), with those of the folders above it. Only a parsed
/// `RelPath` is judged, so the policy sees the path a lookup finds.
pub fn path_resources(versions: &[String], path: &RelPath, dir: bool) -> Vec<String> {
    let parts: Vec<std::borrow::Cow<str>> = path.names().map(String::from_utf8_lossy).collect();
    let mut out = Vec::new();
    for v in versions.iter().filter(|v| v.contains("/versions/")) {
        for i in 1..=parts.len() {
            let slash = if i < parts.len() || dir { "/" } else { "" };
            out.push(file_resource(
                v,
                &format!("{}{slash}", parts[..i].join("/")),
            ));
        }
    }
    out
}
