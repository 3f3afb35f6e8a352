//! A gateway as a mount's upstream (`repo::Upstream`): the versions the
//! caller may see and their tags in one request (a poll costs one), a
//! folder's tree as the gateway shows it (`gateway::trees`), and a file's
//! chunks as ranges of its bytes. The gateway's trees say nothing of where
//! chunks lie, so this host names things itself: a folder by a hash of its
//! dataset, version, path and view (or of its tree's id, when the gateway
//! gives it, and view), a large file's chunks as laid end to
//! end in a pack of the file's own, and a folder's small files (one chunk
//! each) as laid end to end in a pack of the folder's, so that they are
//! read a run of many at a time; a pack's name says what to ask for. A
//! range's answer must carry the ETag of the chunks the tree named, so no
//! byte of another content is taken for them.

use super::{Answer, Gateway, segment};
use crate::error::{Error, FsError, Result};
use crate::id::{BlobId, PackId, RecordHash};
use crate::relpath::RelPath;
use crate::repo::changes::{Change, Sending};
use crate::repo::tag::Tag;
use crate::repo::{History, Upstream};
use crate::snapshot::tree::{etag, small_files};
use crate::snapshot::{Node, Record, Stats, Tree};
use crate::store::pack::{self, BlobRef};
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};

/// Places kept in memory once they are kept on disk too (`Told::book`);
/// the rest are read from there when asked for.
const PLACES: usize = 1 << 16;
/// Files remembered as said readable; one forgotten is asked about again.
const READABLE: usize = 1 << 18;

/// What the gateway told a mount: the places its names stand for, the
/// files it said may still be read, and whether it refused the caller.
pub(super) struct Told {
    places: Mutex<lru::LruCache<[u8; 32], Place>>,
    /// Where places are kept for later processes (`places.rs`), and those
    /// not written there yet.
    book: std::sync::OnceLock<super::places::Book>,
    unsaved: Mutex<Vec<([u8; 32], Vec<u8>)>>,
    readable: Mutex<lru::LruCache<[u8; 32], ()>>,
    refused: AtomicBool,
    /// What the caller is shown under (`super::VIEW`).
    view: Mutex<String>,
}

impl Default for Told {
    fn default() -> Told {
        let readable = std::num::NonZeroUsize::new(READABLE).expect("not zero");
        Told {
            // Unbounded until places are kept on disk (`keep`).
            places: Mutex::new(lru::LruCache::unbounded()),
            book: std::sync::OnceLock::new(),
            unsaved: Mutex::default(),
            readable: Mutex::new(lru::LruCache::new(readable)),
            refused: AtomicBool::new(false),
            view: Mutex::default(),
        }
    }
}

/// A folder, a file, or a folder's small files (with the ETag of their
/// chunks), as shown under `view`.
#[derive(Clone)]
struct Place {
    dataset: String,
    version: u64,
    path: RelPath,
    view: String,
    /// What bytes it stands for: `FILES` (a file's), `SMALL_FILES` (a
    /// folder's small files'), or none (a folder).
    what: &'static str,
    etag: Option<String>,
}

/// The gateway's names for a file's bytes, and for a folder's small files'.
const FILES: &str = "files";
const SMALL_FILES: &str = "small-files";

/// A place as `places.rs` keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    dataset: String,
    version: u64,
    path: Vec<u8>,
    view: String,
    what: String,
    etag: Option<String>,
}

impl Place {
    fn kept(&self) -> Vec<u8> {
        let kept = Kept {
            dataset: self.dataset.clone(),
            version: self.version,
            path: self.path.as_bytes().to_vec(),
            view: self.view.clone(),
            what: self.what.to_string(),
            etag: self.etag.clone(),
        };
        serde_json::to_vec(&kept).expect("serializable")
    }

    fn from_kept(kept: &[u8]) -> Result<Place> {
        let bad = |e: String| Error::malformed("a place kept by this host", e);
        let k: Kept = serde_json::from_slice(kept).map_err(|e| bad(e.to_string()))?;
        let what = match k.what.as_str() {
            FILES => FILES,
            SMALL_FILES => SMALL_FILES,
            "" => "",
            other => return Err(bad(format!("no such kind {other:?}"))),
        };
        Ok(Place {
            dataset: k.dataset,
            version: k.version,
            path: RelPath::parse(k.path)?,
            view: k.view,
            what,
            etag: k.etag,
        })
    }
}

/// This host's name for a folder or a file of a version as shown under a
/// view: a folder shown under another policy is another folder to it.
fn name_of(kind: &[u8], at: &Place) -> [u8; 32] {
    let version = at.version.to_be_bytes();
    digest(&[
        kind,
        at.dataset.as_bytes(),
        &version,
        at.path.as_bytes(),
        at.view.as_bytes(),
    ])
}

/// This host's name for a folder the gateway named by its content (the
/// same in every version that holds it), as shown under `at`'s view.
fn content_name(id: &BlobId, at: &Place) -> [u8; 32] {
    digest(&[
        b"folder by content",
        at.dataset.as_bytes(),
        id.as_bytes(),
        at.view.as_bytes(),
    ])
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// A reference to a folder: nothing but its name.
fn folder_ref(name: [u8; 32]) -> BlobRef {
    BlobRef {
        id: BlobId::from_bytes(name),
        pack: PackId::from_bytes(name),
        offset: pack::MAGIC.len() as u64,
        len: 2,
        size: 1,
    }
}

impl Told {
    /// Keeps places in `book` from now on, and fewer in memory.
    pub(super) fn keep(&self, book: super::places::Book) {
        if self.book.set(book).is_ok() {
            let bound = std::num::NonZeroUsize::new(PLACES).expect("not zero");
            self.places.lock().resize(bound);
        }
    }

    /// Where places (and what was sent) are kept, if anywhere.
    pub(super) fn book(&self) -> Option<&super::places::Book> {
        self.book.get()
    }

    fn remember(&self, name: [u8; 32], place: Place) {
        if self.book.get().is_some() {
            self.unsaved.lock().push((name, place.kept()));
        }
        self.places.lock().put(name, place);
    }

    /// Writes the places remembered since the last call to the book.
    fn save(&self) -> Result<()> {
        let Some(book) = self.book.get() else {
            return Ok(());
        };
        let rows = std::mem::take(&mut *self.unsaved.lock());
        book.put(&rows)
    }

    /// Where `name` stands, as told here or to an earlier process.
    fn known(&self, name: &[u8; 32]) -> Result<Option<Place>> {
        if let Some(p) = self.places.lock().get(name) {
            return Ok(Some(p.clone()));
        }
        let Some(kept) = self.book.get().map(|b| b.get(name)).transpose()?.flatten() else {
            return Ok(None);
        };
        let place = Place::from_kept(&kept)?;
        self.places.lock().put(*name, place.clone());
        Ok(Some(place))
    }

    fn place(&self, name: &[u8; 32]) -> Result<Place> {
        self.known(name)?
            .ok_or_else(|| Error::InvalidInput("a reference the gateway never gave".into()))
    }

    fn check_refused(&self) -> Result<()> {
        match self.refused.load(Ordering::Relaxed) {
            true => Err(Error::Forbidden(
                "the gateway refused this host's credentials".into(),
            )),
            false => Ok(()),
        }
    }
}

impl Gateway {
    /// GET `at` with `make`'s headers (`Gateway::ask`). A refusal of the
    /// caller's credentials (401, a revoked key) stands until the gateway
    /// answers a poll again; a refusal of one path (403) is that path's.
    fn fetch(
        &self,
        at: &str,
        make: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Answer> {
        let answer = self.ask(reqwest::Method::GET, at, make)?;
        if answer.status == 401 {
            self.told.refused.store(true, Ordering::Relaxed);
            self.told.readable.lock().clear();
        }
        answer.accepted()
    }

    fn path_of(place: &Place, what: &str) -> Result<String> {
        super::in_version(&place.dataset, place.version, what, &place.path)
    }

    /// A version row of the gateway's (`detafs log --json`'s), shown under
    /// `view`, as a record whose tree names its root folder, and its tags.
    fn record_of(
        &self,
        dataset: &str,
        view: &str,
        row: &Value,
        at: &str,
    ) -> Result<(Record, Vec<Tag>)> {
        let bad = || Error::malformed(format!("the gateway's answer to {at}"), "a version row");
        let version = row["version"].as_u64().ok_or_else(bad)?;
        let text = |k: &str| row[k].as_str().unwrap_or_default().to_string();
        let figure = |k: &str| row[k].as_u64().unwrap_or(0);
        let place = Place {
            dataset: dataset.to_string(),
            version,
            path: RelPath::root(),
            view: view.to_string(),
            what: "",
            etag: None,
        };
        let root = name_of(b"folder", &place);
        self.told.remember(root, place);
        let record = Record {
            format: crate::store::FORMAT,
            dataset: dataset.to_string(),
            version,
            parent: None,
            tree: folder_ref(root),
            time: text("timestamp"),
            author: text("author"),
            message: text("message"),
            stats: Stats {
                files_added: figure("files_added"),
                files_changed: figure("files_changed"),
                files_removed: figure("files_removed"),
                files_touched: figure("files_touched"),
                bytes_added: figure("delta_size"),
            },
        };
        let mut tags = Vec::new();
        for tag in row["tags"].as_array().into_iter().flatten() {
            tags.push(Tag {
                dataset: dataset.to_string(),
                tag: tag.as_str().ok_or_else(bad)?.to_string(),
                version,
                record: RecordHash::from_bytes([0; 32]),
                time: String::new(),
                author: String::new(),
                nonce: String::new(),
            });
        }
        Ok((record, tags))
    }

    /// This host's names for a tree's folders and files.
    fn named(&self, at: &Place, mut tree: Tree) -> Result<Tree> {
        // The folder's small files, laid end to end in a pack of their own.
        let layout: Vec<BlobRef> = small_files(&tree.entries).iter().map(|(_, c)| *c).collect();
        let small = Place {
            what: SMALL_FILES,
            etag: Some(etag(&layout)),
            ..at.clone()
        };
        let small_name = name_of(SMALL_FILES.as_bytes(), &small);
        if !layout.is_empty() {
            self.told.remember(small_name, small);
        }
        let mut small_at = 0;
        for e in &mut tree.entries {
            let place = Place {
                path: at.path.join(&e.name)?,
                what: "",
                etag: None,
                ..at.clone()
            };
            match &mut e.node {
                Node::Dir { tree, .. } => {
                    // Any version's copy of a folder named by its content
                    // is that folder: fetched once, from where it was seen.
                    let name = match *tree.id.as_bytes() == [0; 32] {
                        true => name_of(b"folder", &place),
                        false => content_name(&tree.id, &place),
                    };
                    *tree = folder_ref(name);
                    self.told.remember(name, place);
                }
                Node::File { chunks, .. } if chunks.len() == 1 => {
                    let c = &mut chunks[0];
                    c.pack = PackId::from_bytes(small_name);
                    c.offset = small_at;
                    c.len = c.size;
                    small_at += u64::from(c.size);
                }
                Node::File { chunks, .. } if !chunks.is_empty() => {
                    let name = name_of(FILES.as_bytes(), &place);
                    let mut offset = 0;
                    for c in chunks.iter_mut() {
                        c.pack = PackId::from_bytes(name);
                        c.offset = offset;
                        c.len = c.size;
                        offset += u64::from(c.size);
                    }
                    let etag = Some(etag(chunks));
                    self.told.remember(
                        name,
                        Place {
                            what: FILES,
                            etag,
                            ..place
                        },
                    );
                }
                _ => {}
            }
        }
        self.told.save()?;
        Ok(tree)
    }
}

impl Upstream for Gateway {
    fn url(&self) -> String {
        self.bases.join(",")
    }

    fn history(&self, dataset: &str) -> Result<History> {
        let at = format!("/datasets/{}/versions", segment(dataset)?);
        let answer = self.fetch(&at, |r| r).map_err(|e| match e {
            Error::InvalidInput(_) => Error::NoDataset(dataset.to_string()),
            e => e,
        })?;
        self.told.refused.store(false, Ordering::Relaxed);
        // Shown under another policy: each file is asked about again.
        let view = answer.view.unwrap_or_default();
        if *self.told.view.lock() != view {
            self.told.readable.lock().clear();
            *self.told.view.lock() = view.clone();
        }
        let rows: Vec<Value> = serde_json::from_slice(&answer.body)
            .map_err(|e| Error::malformed(format!("the gateway's answer to {at}"), e))?;
        let (mut records, mut tags) = (Vec::new(), Vec::new());
        for row in &rows {
            let (record, named) = self.record_of(dataset, &view, row, &at)?;
            records.push(record);
            tags.extend(named);
        }
        self.told.save()?;
        Ok(History {
            records,
            tags,
            figures_withheld: rows.iter().any(|r| r["files_added"].is_null()),
        })
    }

    fn tree(&self, r: &BlobRef) -> Result<Tree> {
        self.told.check_refused()?;
        let place = self.told.place(r.id.as_bytes())?;
        let at = Gateway::path_of(&place, "tree")?;
        let answer = self.fetch(&at, |r| r)?;
        self.named(&place, Tree::decode(&answer.body)?)
    }

    fn chunks(&self, run: &[BlobRef]) -> Result<Vec<Bytes>> {
        self.told.check_refused()?;
        let (first, last) = (run[0], run[run.len() - 1]);
        let place = self.told.place(first.pack.as_bytes())?;
        let at = Gateway::path_of(&place, place.what)?;
        let range = format!("bytes={}-{}", first.offset, last.end() - 1);
        let Answer {
            etag: tag, body, ..
        } = self.fetch(&at, |r| {
            let r = r.header(reqwest::header::RANGE, range.as_str());
            match self.fresh {
                true => r.header(reqwest::header::CACHE_CONTROL, "no-cache"),
                false => r,
            }
        })?;
        let want: u64 = run.iter().map(BlobRef::data_size).sum();
        if tag != place.etag || body.len() as u64 != want {
            return Err(Error::malformed(
                format!("{} of {} v{}", place.path, place.dataset, place.version),
                "the gateway sent other bytes than its listing named",
            ));
        }
        self.told.readable.lock().put(*first.pack.as_bytes(), ());
        let mut at = 0;
        Ok(run
            .iter()
            .map(|r| {
                let to = at + crate::limits::to_usize(r.data_size());
                let piece = body.slice(at..to);
                at = to;
                piece
            })
            .collect())
    }

    fn fresh(&self) -> bool {
        self.fresh
    }

    fn health(&self) -> crate::store::health::HealthReport {
        self.health.report()
    }

    fn gave(&self, r: &BlobRef) -> bool {
        // A book that cannot be read makes the reference unknown, and
        // reading it then says what is missing.
        matches!(self.told.known(r.pack.as_bytes()), Ok(Some(_)))
    }

    fn source_of(&self, chunks: &[BlobRef]) -> Option<(u64, RelPath)> {
        let place = self.told.known(chunks.first()?.pack.as_bytes()).ok()??;
        let same = place.what == FILES && place.etag.as_deref() == Some(etag(chunks).as_str());
        same.then_some((place.version, place.path))
    }

    fn lease(&self, dataset: &str, staging: &str, versions: &[u64]) -> Result<()> {
        let at = format!(
            "/datasets/{}/leases/{}",
            segment(dataset)?,
            segment(staging)?
        );
        let body = serde_json::json!({ "versions": versions }).to_string();
        self.ask(reqwest::Method::PUT, &at, |r| {
            r.header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        })?
        .accepted()?;
        Ok(())
    }

    fn kept_record(&self, dataset: &str, version: u64) -> Result<Option<Record>> {
        let at = format!("/datasets/{}/versions/{version}", segment(dataset)?);
        let answer = match self.fetch(&at, |r| r) {
            Ok(a) => a,
            Err(Error::Fs {
                kind: FsError::NotFound,
                ..
            }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let view = answer.view.clone().unwrap_or_default();
        let row = answer.json(&at)?;
        let (record, _) = self.record_of(dataset, &view, &row, &at)?;
        self.told.save()?;
        Ok(Some(record))
    }

    /// Stores what `s` says as an upload: its id, and the bytes sent (none
    /// for an upload of the same taken again, `Sending::resume`).
    fn bundle(&self, dataset: &str, files: &[Bytes]) -> Result<String> {
        let at = format!("/datasets/{}/bundles", super::segment(dataset)?);
        let mut body =
            Vec::with_capacity(8 * (files.len() + 1) + files.iter().map(Bytes::len).sum::<usize>());
        body.extend((files.len() as u64).to_be_bytes());
        for f in files {
            body.extend((f.len() as u64).to_be_bytes());
        }
        for f in files {
            body.extend_from_slice(f);
        }
        let body = Bytes::from(body);
        let made = self
            .ask(reqwest::Method::PUT, &at, |r| r.body(body.clone()))?
            .accepted()?
            .json(&at)?;
        made["upload"].as_str().map(str::to_string).ok_or_else(|| {
            Error::malformed(format!("the gateway's answer to {at}"), "no upload id")
        })
    }

    fn upload(&self, s: &Sending) -> Result<(String, u64)> {
        let book = self.told.book();
        if let (Some(book), Some(what)) = (book, &s.resume)
            && let Some(id) = book.sent(what, super::RESUME_WINDOW)?
        {
            return Ok((id, 0));
        }
        let (file, size) = (s.file, s.size);
        let names: Vec<String> = s.path.names().map(super::escape_bytes).collect();
        let mut at = format!(
            "/datasets/{}/uploads/{}",
            super::segment(s.dataset)?,
            names.join("/")
        );
        let runs: Vec<(Vec<u8>, u64, u64)> = match s.patch {
            None => vec![(Vec::new(), 0, size)],
            Some(p) => {
                at += &format!(
                    "?version=v{}&from={}&size={}",
                    p.version,
                    super::escape_bytes(p.from.as_bytes()),
                    p.size
                );
                let head = |a: u64, l: u64| [a.to_be_bytes(), l.to_be_bytes()].concat();
                p.ranges.iter().map(|&(a, l)| (head(a, l), a, l)).collect()
            }
        };
        let sent = runs.iter().map(|(h, _, l)| h.len() as u64 + l).sum();
        let made = self
            .ask(reqwest::Method::PUT, &at, |r| {
                match super::upload_body((file, s.sealing), runs.clone()) {
                    Ok(body) => r.body(body),
                    // Refused by the gateway as a body cut short.
                    Err(e) => r.body(reqwest::Body::wrap_stream(futures::stream::iter([Err::<
                        bytes::Bytes,
                        _,
                    >(
                        std::io::Error::other(e.to_string()),
                    )]))),
                }
            })?
            .accepted()?
            .json(&at)?;
        let id = made["upload"].as_str().ok_or_else(|| {
            Error::malformed(format!("the gateway's answer to {at}"), "no upload id")
        })?;
        if let (Some(book), Some(what)) = (book, &s.resume) {
            book.note_sent(what, id)?;
        }
        Ok((id.to_string(), sent))
    }

    /// Commits `changes` (`gateway::commits`'s form) onto version `parent`
    /// of `dataset` (none: its first): the new version's number.
    fn commit(
        &self,
        dataset: &str,
        parent: Option<u64>,
        message: &str,
        changes: &[Change],
    ) -> Result<u64> {
        let at = format!("/datasets/{}/commit", super::segment(dataset)?);
        let mut body = serde_json::json!({"commit_message": message, "changes": changes});
        if let Some(p) = parent {
            body["parent"] = format!("v{p}").into();
        }
        let body = body.to_string();
        let made = self
            .ask(reqwest::Method::POST, &at, |r| {
                r.header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone())
            })
            .and_then(Answer::accepted)
            .and_then(|a| a.json(&at));
        // Answered, its uploads are not taken again (refused, one of them
        // may be why); unanswered, the next commit takes them again.
        if let Some(book) = self.told.book()
            && !matches!(made, Err(Error::Io { .. }))
        {
            let ids: Vec<&str> = changes
                .iter()
                .filter_map(|c| match c {
                    Change::File { upload, .. } => upload.as_deref(),
                    _ => None,
                })
                .collect();
            book.forget_sent(&ids)?;
        }
        let made = made?;
        made["version"]
            .as_u64()
            .ok_or_else(|| Error::malformed(format!("the gateway's answer to {at}"), "no version"))
    }

    fn readable(&self, chunk: &BlobRef) -> Result<()> {
        self.told.check_refused()?;
        let name = *chunk.pack.as_bytes();
        if self.told.readable.lock().get(&name).is_some() {
            return Ok(());
        }
        let place = self.told.place(&name)?;
        let at = Gateway::path_of(&place, place.what)?;
        let tag = place.etag.clone().unwrap_or_default();
        // One byte at most if it is not what was named.
        let Answer { status, .. } = self.fetch(&at, |r| {
            r.header(reqwest::header::IF_NONE_MATCH, tag.as_str())
                .header(reqwest::header::RANGE, "bytes=0-0")
        })?;
        if status != 304 {
            return Err(Error::fs(
                FsError::NotFound,
                format!(
                    "{} of {} v{} changed",
                    place.path, place.dataset, place.version
                ),
            ));
        }
        self.told.readable.lock().put(name, ());
        Ok(())
    }
}
