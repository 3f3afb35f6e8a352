//! Each local database records the version of the schema that wrote it
//! (SQLite's `user_version`), so a detafs older than the database refuses
//! it instead of misreading or altering it.

use crate::error::{Error, Result};
use rusqlite::Connection;
use std::path::Path;

/// Refuses a database at `path` written by a newer schema than `current`;
/// to be called before the schema is created or changed.
pub fn check(conn: &Connection, what: &'static str, path: &Path, current: u32) -> Result<()> {
    let found: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > current {
        return Err(Error::SchemaTooNew {
            what,
            path: path.display().to_string(),
            found,
            current,
        });
    }
    Ok(())
}

/// Records that the database now has schema `current`.
pub fn mark(conn: &Connection, current: u32) -> Result<()> {
    conn.pragma_update(None, "user_version", current)?;
    Ok(())
}
