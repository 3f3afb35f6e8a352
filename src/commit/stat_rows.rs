//! The stat-cache rows a commit makes as it goes, kept for the next
//! commit only once this one has landed.

use crate::cache::index::{FolderRow, Index, StatKey};
use crate::error::Result;
use crate::store::pack::BlobRef;

/// Stat-cache rows of a commit: set aside in the index as the scan goes
/// (a commit of millions of files holds a few thousand in memory), made
/// the stat cache's once the commit lands, forgotten if it does not.
pub struct PendingStats<'r> {
    index: &'r Index,
    token: u64,
    rows: Vec<(Vec<u8>, StatKey, Vec<BlobRef>)>,
    folders: Vec<FolderRow>,
    staged: bool,
}

/// Rows held before they are set aside.
const STAT_BATCH: usize = 4096;

impl<'r> PendingStats<'r> {
    pub fn new(index: &'r Index) -> Self {
        PendingStats {
            index,
            token: rand::random(),
            rows: Vec::new(),
            folders: Vec::new(),
            staged: false,
        }
    }

    pub(super) fn push(&mut self, row: (Vec<u8>, StatKey, Vec<BlobRef>)) -> Result<()> {
        self.rows.push(row);
        if self.rows.len() >= STAT_BATCH {
            self.set_aside()?;
        }
        Ok(())
    }

    pub(super) fn push_folder(&mut self, row: FolderRow) -> Result<()> {
        self.folders.push(row);
        if self.folders.len() >= STAT_BATCH {
            self.set_aside()?;
        }
        Ok(())
    }

    fn set_aside(&mut self) -> Result<()> {
        if !self.rows.is_empty() || !self.folders.is_empty() {
            self.staged = true;
            self.index
                .stat_stage(self.token, &self.rows, &self.folders)?;
            self.rows.clear();
            self.folders.clear();
        }
        Ok(())
    }

    /// Saves the rows: the commit they describe has landed.
    pub fn land(mut self) -> Result<()> {
        self.set_aside()?;
        if self.staged {
            self.staged = false;
            self.index.stat_land(self.token)?;
        }
        Ok(())
    }
}

impl Drop for PendingStats<'_> {
    fn drop(&mut self) {
        if self.staged
            && let Err(e) = self.index.stat_discard(self.token)
        {
            tracing::warn!("stat-cache rows of a failed commit not forgotten: {e}");
        }
    }
}
