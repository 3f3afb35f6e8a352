//! Local state: a SQLite index of what the store holds, and caches of store
//! objects on disk and in memory. All of it can be deleted and rebuilt.

pub mod budget;
pub mod disk;
pub mod index;
pub mod weighed;
