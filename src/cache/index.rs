//! The SQLite index: versions seen, where each known blob lives (for dedup), a
//! stat cache for unchanged source files, and the disk cache's LRU bookkeeping.

use crate::error::Result;
use crate::id::{BlobId, PackId, RecordHash};
use crate::snapshot::Record;
use crate::store::pack::BlobRef;
use parking_lot::{Mutex, MutexGuard};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

pub struct Index {
    conn: Mutex<Connection>,
}

/// A folder's row of the folder cache.
pub struct FolderRow {
    pub path: Vec<u8>,
    pub digest: [u8; 32],
    pub tree: BlobRef,
    pub links: bool,
}

/// What identifies an unchanged source file (as git's index does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

/// The version of `SCHEMA` (`crate::schema`).
const SCHEMA_VERSION: u32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS records(
    dataset TEXT NOT NULL, version INTEGER NOT NULL, hash BLOB NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY(dataset, version)) WITHOUT ROWID;
-- Blob references with their data size (format 2); the tables before
-- sizes (`blobs`, `indexed_trees`) are dropped: this is a cache.
DROP TABLE IF EXISTS blobs;
DROP TABLE IF EXISTS indexed_trees;
CREATE TABLE IF NOT EXISTS blob_refs(
    id BLOB PRIMARY KEY, pack BLOB NOT NULL, offset INTEGER NOT NULL, len INTEGER NOT NULL,
    size INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trees_indexed(id BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stat_cache(
    path BLOB PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, ino INTEGER,
    chunks BLOB NOT NULL) WITHOUT ROWID;
-- Folders of `commit --from` whose entries' stats (and subfolders' trees)
-- hash to `digest` had tree `tree`: an unchanged folder is not read again.
CREATE TABLE IF NOT EXISTS folder_cache(
    path BLOB PRIMARY KEY, digest BLOB NOT NULL, tree BLOB NOT NULL, links INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cached(id BLOB PRIMARY KEY, size INTEGER NOT NULL, used INTEGER NOT NULL) WITHOUT ROWID;
-- Blobs in packs a commit uploaded before it landed, and when each pack
-- was (unix seconds): a commit interrupted on this host is resumed from them.
DROP TABLE IF EXISTS uploaded;
CREATE TABLE IF NOT EXISTS uploaded_refs(
    id BLOB PRIMARY KEY, pack BLOB NOT NULL, offset INTEGER NOT NULL, len INTEGER NOT NULL,
    size INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uploaded_packs(pack BLOB PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;
-- The newest gc note whose run the tables above account for.
CREATE TABLE IF NOT EXISTS gc_seen(id INTEGER PRIMARY KEY CHECK (id = 0), note TEXT NOT NULL);
";

fn blob_row(row: &rusqlite::Row, id: BlobId) -> rusqlite::Result<BlobRef> {
    Ok(BlobRef {
        id,
        pack: PackId::from_bytes(row.get(0)?),
        offset: row.get(1)?,
        len: row.get(2)?,
        size: row.get(3)?,
    })
}

impl Index {
    pub fn open(path: &Path) -> Result<Index> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        crate::schema::check(&conn, "local index", path, SCHEMA_VERSION)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        crate::schema::mark(&conn, SCHEMA_VERSION)?;
        // A commit's stat-cache rows wait in a table of this connection's
        // own, on disk (the bundled SQLite keeps temporary tables in
        // memory unless told), until the commit lands. Appended as they
        // come (no key: paths are hashed, so a keyed table would take
        // each row at a random page), moved in key order when it lands.
        conn.pragma_update(None, "temp_store", "FILE")?;
        conn.execute_batch(
            "CREATE TEMP TABLE stat_pending(
                token INTEGER NOT NULL, path BLOB NOT NULL, size INTEGER, mtime_ns INTEGER,
                ctime_ns INTEGER, ino INTEGER, chunks BLOB NOT NULL);
             CREATE TEMP TABLE folder_pending(
                token INTEGER NOT NULL, path BLOB NOT NULL, digest BLOB NOT NULL,
                tree BLOB NOT NULL, links INTEGER NOT NULL);",
        )?;
        Ok(Index {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    pub fn latest_version(&self, dataset: &str) -> Result<u64> {
        let v: Option<u64> = self.conn().query_row(
            "SELECT MAX(version) FROM records WHERE dataset = ?1",
            [dataset],
            |r| r.get(0),
        )?;
        Ok(v.unwrap_or(0))
    }

    /// The stored bytes' hash of a known record.
    pub fn record_hash(&self, dataset: &str, version: u64) -> Result<Option<RecordHash>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT hash FROM records WHERE dataset = ?1 AND version = ?2",
                params![dataset, version],
                |r| r.get::<_, [u8; 32]>(0),
            )
            .optional()?
            .map(RecordHash::from_bytes))
    }

    pub fn insert_record(
        &self,
        dataset: &str,
        version: u64,
        hash: RecordHash,
        body: &[u8],
    ) -> Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO records(dataset, version, hash, body) VALUES (?1, ?2, ?3, ?4)",
            params![dataset, version, hash.as_bytes(), body],
        )?;
        Ok(())
    }

    pub fn records(&self, dataset: &str) -> Result<Vec<Record>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT body FROM records WHERE dataset = ?1 ORDER BY version")?;
        let bodies = stmt
            .query_map([dataset], |r| r.get::<_, Vec<u8>>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        bodies
            .iter()
            .map(|b| Record::decode(b, &format!("record of {dataset}")))
            .collect()
    }

    pub fn blob(&self, id: &BlobId) -> Result<Option<BlobRef>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT pack, offset, len, size FROM blob_refs WHERE id = ?1")?;
        Ok(stmt
            .query_row([id.as_bytes()], |row| blob_row(row, *id))
            .optional()?)
    }

    /// Records committed blob locations; the first location known for an id wins,
    /// which keeps trees of unchanged content byte-identical across versions.
    pub fn insert_blobs<'a>(&self, blobs: impl IntoIterator<Item = &'a BlobRef>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        insert_refs(&tx, "blob_refs", blobs)?;
        tx.commit()?;
        Ok(())
    }

    /// Records the blobs of a pack a commit uploaded (durable, not yet in a
    /// version) at `at` (unix seconds).
    pub fn insert_uploaded(&self, blobs: &[BlobRef], at: i64) -> Result<()> {
        let Some(first) = blobs.first() else {
            return Ok(());
        };
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        insert_refs(&tx, "uploaded_refs", blobs)?;
        tx.prepare_cached("INSERT OR IGNORE INTO uploaded_packs(pack, at) VALUES (?1, ?2)")?
            .execute(params![first.pack.as_bytes(), at])?;
        tx.commit()?;
        Ok(())
    }

    /// Where an earlier commit of this host uploaded blob `id` at or after
    /// `since` (unix seconds), and when.
    pub fn uploaded_blob(&self, id: &BlobId, since: i64) -> Result<Option<(BlobRef, i64)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT r.pack, r.offset, r.len, r.size, p.at FROM uploaded_refs r
             JOIN uploaded_packs p ON p.pack = r.pack WHERE r.id = ?1 AND p.at >= ?2",
        )?;
        Ok(stmt
            .query_row(params![id.as_bytes(), since], |row| {
                Ok((blob_row(row, *id)?, row.get(4)?))
            })
            .optional()?)
    }

    /// Forgets uploads from before `before` (unix seconds).
    pub fn forget_uploaded(&self, before: i64) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM uploaded_refs WHERE pack IN (SELECT pack FROM uploaded_packs WHERE at < ?1)",
            [before],
        )?;
        tx.execute("DELETE FROM uploaded_packs WHERE at < ?1", [before])?;
        tx.commit()?;
        Ok(())
    }
}

/// Inserts blob references into `table` (`blob_refs` or `uploaded_refs`);
/// the first location known for an id wins.
fn insert_refs<'a>(
    tx: &rusqlite::Transaction,
    table: &str,
    blobs: impl IntoIterator<Item = &'a BlobRef>,
) -> Result<()> {
    let mut stmt = tx.prepare_cached(&format!(
        "INSERT OR IGNORE INTO {table}(id, pack, offset, len, size) VALUES (?1, ?2, ?3, ?4, ?5)"
    ))?;
    for b in blobs {
        stmt.execute(params![
            b.id.as_bytes(),
            b.pack.as_bytes(),
            b.offset,
            b.len,
            b.size
        ])?;
    }
    Ok(())
}

impl Index {
    pub fn tree_indexed(&self, id: &BlobId) -> Result<bool> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT 1 FROM trees_indexed WHERE id = ?1")?;
        Ok(stmt.exists([id.as_bytes()])?)
    }

    pub fn mark_trees_indexed<'a>(&self, ids: impl IntoIterator<Item = &'a BlobId>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut stmt =
                tx.prepare_cached("INSERT OR IGNORE INTO trees_indexed(id) VALUES (?1)")?;
            for id in ids {
                stmt.execute([id.as_bytes()])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The chunks `path` had when last committed from here, whatever its
    /// stat is now (a changed file is cut again along them).
    pub fn stat_previous(&self, path: &[u8]) -> Result<Option<Vec<BlobRef>>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT chunks FROM stat_cache WHERE path = ?1")?;
        let chunks: Option<Vec<u8>> = stmt.query_row([path], |r| r.get(0)).optional()?;
        Ok(chunks.and_then(|c| serde_json::from_slice(&c).ok()))
    }

    pub fn stat_lookup(&self, path: &[u8], key: StatKey) -> Result<Option<Vec<BlobRef>>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT chunks FROM stat_cache WHERE path = ?1 AND size = ?2 AND mtime_ns = ?3
             AND ctime_ns = ?4 AND ino = ?5",
        )?;
        let chunks: Option<Vec<u8>> = stmt
            .query_row(
                params![path, key.size, key.mtime_ns, key.ctime_ns, key.ino],
                |r| r.get(0),
            )
            .optional()?;
        Ok(chunks.and_then(|c| serde_json::from_slice(&c).ok()))
    }

    /// The newest gc note this index accounts for.
    pub fn gc_seen(&self) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT note FROM gc_seen WHERE id = 0", [], |r| r.get(0))
            .optional()?)
    }

    /// Forgets every blob location and stat-cache row (a gc may have
    /// deleted the packs they name), as of gc note `note`.
    pub fn forget_locations(&self, note: &str) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute_batch(
            "DELETE FROM blob_refs; DELETE FROM trees_indexed; DELETE FROM stat_cache;
             DELETE FROM folder_cache; DELETE FROM uploaded_refs; DELETE FROM uploaded_packs;",
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO gc_seen(id, note) VALUES (0, ?1)",
            [note],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The tree and links flag a folder had when its entries hashed to
    /// `digest`.
    pub fn folder_lookup(&self, path: &[u8], digest: &[u8; 32]) -> Result<Option<(BlobRef, bool)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT tree, links FROM folder_cache WHERE path = ?1 AND digest = ?2",
        )?;
        let row: Option<(Vec<u8>, bool)> = stmt
            .query_row(params![path, digest], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(row.and_then(|(tree, links)| Some((serde_json::from_slice(&tree).ok()?, links))))
    }

    /// Keeps stat-cache and folder rows of the commit `token` names aside
    /// until `stat_land` (or `stat_discard`).
    pub fn stat_stage(
        &self,
        token: u64,
        entries: &[(Vec<u8>, StatKey, Vec<BlobRef>)],
        folders: &[FolderRow],
    ) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO folder_pending(token, path, digest, tree, links)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for f in folders {
                let tree = serde_json::to_vec(&f.tree).expect("serializable");
                stmt.execute(params![token as i64, f.path, f.digest, tree, f.links])?;
            }
        }
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO stat_pending(token, path, size, mtime_ns, ctime_ns, ino, chunks)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for (path, k, chunks) in entries {
                let json = serde_json::to_vec(chunks).expect("serializable");
                stmt.execute(params![
                    token as i64,
                    path,
                    k.size,
                    k.mtime_ns,
                    k.ctime_ns,
                    k.ino,
                    json
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Makes the rows staged under `token` the stat cache's.
    pub fn stat_land(&self, token: u64) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT OR REPLACE INTO stat_cache(path, size, mtime_ns, ctime_ns, ino, chunks)
             SELECT path, size, mtime_ns, ctime_ns, ino, chunks FROM stat_pending WHERE token = ?1
             ORDER BY path, rowid",
            [token as i64],
        )?;
        tx.execute(
            "INSERT OR REPLACE INTO folder_cache(path, digest, tree, links)
             SELECT path, digest, tree, links FROM folder_pending WHERE token = ?1
             ORDER BY path, rowid",
            [token as i64],
        )?;
        tx.execute("DELETE FROM stat_pending WHERE token = ?1", [token as i64])?;
        tx.execute(
            "DELETE FROM folder_pending WHERE token = ?1",
            [token as i64],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Forgets the rows staged under `token`.
    pub fn stat_discard(&self, token: u64) -> Result<()> {
        let conn = self.conn();
        conn.execute("DELETE FROM stat_pending WHERE token = ?1", [token as i64])?;
        conn.execute(
            "DELETE FROM folder_pending WHERE token = ?1",
            [token as i64],
        )?;
        Ok(())
    }

    /// Records cache entries as used at the given times, in one transaction.
    pub fn cache_touch(&self, entries: &[(BlobId, u64, i64)]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO cached(id, size, used) VALUES (?1, ?2, ?3)",
            )?;
            for (id, size, used) in entries {
                stmt.execute(params![id.as_bytes(), size, used])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn cache_total(&self) -> Result<u64> {
        Ok(self
            .conn()
            .query_row("SELECT COALESCE(SUM(size), 0) FROM cached", [], |r| {
                r.get(0)
            })?)
    }

    /// Least recently used cache entries first.
    pub fn cache_oldest(&self, limit: usize) -> Result<Vec<(BlobId, u64)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT id, size FROM cached ORDER BY used LIMIT ?1")?;
        let rows = stmt
            .query_map([limit as i64], |r| {
                Ok((BlobId::from_bytes(r.get(0)?), r.get(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    pub fn cache_forget(&self, id: &BlobId) -> Result<()> {
        self.conn()
            .execute("DELETE FROM cached WHERE id = ?1", [id.as_bytes()])?;
        Ok(())
    }
}
