//! Whole-file copies of version files on local disk, served with FUSE
//! passthrough so repeated reads run at native speed (the kernel reads the
//! copy directly; the daemon is not involved).
//!
//! A copy is written from verified chunks after a file has been read through
//! once, and is trusted only by the daemon run that wrote it: the directory is
//! emptied at start, so every byte a reader gets was verified in this run.

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::read;
use crate::repo::Repo;
use crate::store::pack::BlobRef;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// Smaller files gain little from passthrough.
pub const MIN_SIZE: u64 = 1 << 20;

#[derive(Default)]
struct State {
    ready: HashMap<ObjectId, PathBuf>,
    building: HashSet<ObjectId>,
    bytes: u64,
}

pub struct WholeFiles {
    dir: PathBuf,
    budget: u64,
    state: Mutex<State>,
}

impl WholeFiles {
    pub fn new(dir: PathBuf, budget: u64) -> Result<Arc<WholeFiles>> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display(), e))?;
        Ok(Arc::new(WholeFiles {
            dir,
            budget,
            state: Mutex::new(State::default()),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Names a file's content: the SHA-256 of its chunk ids in order.
    pub fn file_id(chunks: &[BlobRef]) -> ObjectId {
        let ids: Vec<u8> = chunks.iter().flat_map(|c| *c.id.as_bytes()).collect();
        ObjectId::of(&ids)
    }

    /// The verified copy of a file, if this run has written one.
    pub fn ready(&self, id: &ObjectId) -> Option<PathBuf> {
        self.state().ready.get(id).cloned()
    }

    /// Writes a copy in the background, within the byte budget.
    pub fn build(self: &Arc<Self>, repo: Arc<Repo>, id: ObjectId, chunks: Vec<BlobRef>, size: u64) {
        {
            let mut st = self.state();
            if st.ready.contains_key(&id)
                || st.building.contains(&id)
                || st.bytes + size > self.budget
            {
                return;
            }
            st.building.insert(id);
            st.bytes += size;
        }
        let me = self.clone();
        // Its own thread: a long copy must never run on a request thread.
        std::thread::spawn(move || {
            let path = me.dir.join(id.to_hex());
            let tmp = path.with_extension("part");
            let written = std::fs::File::create(&tmp)
                .map_err(|e| Error::io(tmp.display(), e))
                .and_then(|mut f| read::read_file(&repo, &chunks, &mut f))
                .and_then(|()| {
                    std::fs::rename(&tmp, &path).map_err(|e| Error::io(path.display(), e))
                });
            let mut st = me.state();
            st.building.remove(&id);
            match written {
                Ok(()) => {
                    st.ready.insert(id, path);
                }
                Err(e) => {
                    st.bytes -= size;
                    let _ = std::fs::remove_file(&tmp);
                    tracing::debug!("no whole-file copy: {e}");
                }
            }
        });
    }
}
