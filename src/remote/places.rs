//! What this host's names for a gateway's folders and files stand for,
//! kept on disk beside its cache: staging names version files by them
//! (a row read through to a version), so a later process (a mount started
//! again, a CLI command on staging) must read what they name. One row per
//! name, sealed with the host's key under the name, so the file holds no
//! path readable without that key and a row moved to another name does
//! not open. A cache: lost, only staging's untouched rows of it are (they
//! say what is missing when read). Beside them, the uploads sent for a
//! commit not finished, by what was sent (`Sending::resume`), so the next
//! commit takes them again.

use crate::error::Result;
use crate::store::codec::Codec;
use bytes::Bytes;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

pub(super) struct Book {
    db: Mutex<Connection>,
    codec: Codec,
}

fn key(name: &[u8; 32]) -> String {
    format!("upstream place {}", hex::encode(name))
}

impl Book {
    pub(super) fn open(path: &Path, codec: Codec) -> Result<Book> {
        let db = Connection::open(path)?;
        // Written as the gateway is read; a power loss may cost the last
        // rows, which the gateway gives again when their folder is read.
        db.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS places (name BLOB PRIMARY KEY, sealed BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS sent (what BLOB PRIMARY KEY, upload TEXT NOT NULL, at INTEGER NOT NULL);",
        )?;
        Ok(Book {
            db: Mutex::new(db),
            codec,
        })
    }

    /// Keeps `rows` (name, what it stands for), in one transaction.
    pub(super) fn put(&self, rows: &[([u8; 32], Vec<u8>)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut db = self.db.lock();
        let tx = db.transaction()?;
        {
            let mut put = tx.prepare_cached("INSERT OR IGNORE INTO places VALUES (?1, ?2)")?;
            for (name, plain) in rows {
                let sealed = self
                    .codec
                    .seal_object(&key(name), Bytes::from(plain.clone()));
                put.execute(params![&name[..], &sealed[..]])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// What `name` stands for, if kept (and it opens under its name).
    pub(super) fn get(&self, name: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        let sealed: Option<Vec<u8>> = self
            .db
            .lock()
            .query_row(
                "SELECT sealed FROM places WHERE name = ?1",
                params![&name[..]],
                |r| r.get(0),
            )
            .optional()?;
        sealed
            .map(|s| {
                self.codec
                    .open_object(&key(name), s.into())
                    .map(|b| b.to_vec())
            })
            .transpose()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Book {
    /// The upload sent of `what` within `window`, if any.
    pub(super) fn sent(
        &self,
        what: &[u8; 32],
        window: std::time::Duration,
    ) -> Result<Option<String>> {
        let since = now() - window.as_secs() as i64;
        Ok(self
            .db
            .lock()
            .query_row(
                "SELECT upload FROM sent WHERE what = ?1 AND at >= ?2",
                params![&what[..], since],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub(super) fn note_sent(&self, what: &[u8; 32], upload: &str) -> Result<()> {
        self.db.lock().execute(
            "INSERT OR REPLACE INTO sent VALUES (?1, ?2, ?3)",
            params![&what[..], upload, now()],
        )?;
        Ok(())
    }

    /// Forgets `uploads` (a commit refused them, or made a version of them).
    pub(super) fn forget_sent(&self, uploads: &[&str]) -> Result<()> {
        let db = self.db.lock();
        let mut forget = db.prepare_cached("DELETE FROM sent WHERE upload = ?1")?;
        for u in uploads {
            forget.execute(params![u])?;
        }
        Ok(())
    }
}
