//! detafs: versioned datasets as content-addressed snapshots in an object store.
//!
//! Layers, top to bottom (docs/architecture.md; tests/layering.rs keeps
//! them): `fuse`, `gateway` and the CLI; `fs` (the mounted file system);
//! the dataset operations (`commit`, `staging`, `read`, `audit`, `verify`,
//! `gc`); `repo` (datasets, versions, tags, tree loading); `access` (the
//! policy); `cache` (local index and caches); `snapshot` (the model);
//! `store` (object_store); and below all, small modules of one idea each.

// Sizes and offsets of files are u64 and index memory as usize
// (`limits::to_usize`).
#[cfg(not(target_pointer_width = "64"))]
compile_error!("detafs builds for 64-bit targets only");

pub mod access;
pub mod audit;
pub mod cache;
pub mod commit;
pub mod erase;
pub mod error;
pub mod escape;
pub mod fs;
pub mod fuse;
pub mod gateway;
pub mod gc;
pub mod hold;
pub mod id;
pub mod limits;
pub mod nowait;
pub mod private;
pub mod procs;
pub mod progress;
pub mod read;
pub mod relpath;
pub mod remote;
pub mod repo;
pub mod report;
pub mod retention;
pub mod runtime;
pub mod schema;
pub mod snapshot;
pub mod staging;
pub mod store;
pub mod sys;
pub mod tiering;
pub mod verify;

pub use error::{Error, Result};
