//! Access control: who may see, read and commit which versions. The
//! policy language (`policy`), its hash-chained history in the store
//! (`history`) and the mapping of a Unix caller to principals (`caller`).
//! Without a policy in the store nothing is checked (Unix permissions only).

pub mod caller;
pub mod history;
pub mod policy;

pub use policy::{Action, Decision, Policy, Who};

/// The resource names of a dataset, a version (under its number and each
/// tag), and a path in it (folders end in `/`, so `…/files/private/*`
/// covers the folder `private` itself).
pub fn dataset_resource(dataset: &str) -> String {
    format!("datasets/{dataset}")
}

pub fn version_resources(dataset: &str, version: u64, tags: &[String]) -> Vec<String> {
    std::iter::once(format!("v{version}"))
        .chain(tags.iter().cloned())
        .map(|v| format!("datasets/{dataset}/versions/{v}"))
        .collect()
}

pub fn path_resources(versions: &[String], path: &str, dir: bool) -> Vec<String> {
    let slash = if dir { "/" } else { "" };
    versions
        .iter()
        .map(|v| format!("{v}/files/{path}{slash}"))
        .collect()
}
