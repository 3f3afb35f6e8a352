//! The snapshot model: chunks, trees, version records, and how trees compare.

pub mod chunker;
pub mod diff;
pub mod rechunk;
pub mod record;
pub mod tree;
pub mod walk;

pub use record::{Record, Stats};
pub use tree::{Entry, Kind, Likeness, Link, Mtime, Node, Special, Tree};
