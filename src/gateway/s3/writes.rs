//! Writes through the S3 endpoint: `PutObject`, multipart uploads and
//! `DeleteObject` under `staging/` of a bucket stage changes for the next
//! commit of its dataset, kept in the store (`commit/pending.rs`: every
//! gateway of the store shares them, a restart loses none); a `PutObject`
//! of `staging/.detafs-commit` (its body the message) commits them as one
//! version, through the REST API's commit (its `VersionId` is `vN`). Each
//! body is bounded, streamed to a private file (never held in memory) and
//! checked against its `Content-MD5` and `x-amz-checksum-*` headers, then
//! stored as an upload (`commit/upload.rs`) before it is staged. Parts of
//! a multipart upload under way are this gateway's until it completes.

use crate::access::{self, Action};
use crate::commit::edit::edit_path;
use crate::commit::pending::{self, Pending};
use crate::commit::upload;
use crate::gateway::core::{Api, ApiError, Caller};
use crate::gateway::edits::{commit_as, tempdir_in};
use crate::relpath::RelPath;
use futures::StreamExt;
use parking_lot::Mutex;
use s3s::crypto::Checksum as _;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// The largest object one `PutObject` or part sends (S3's own bound).
const MAX_PART: u64 = 5 << 30;
/// Most parts of a multipart upload (S3's own bound).
const MAX_PARTS: i32 = 10_000;
/// Most multipart uploads open in a gateway, and paths staged per dataset.
const MAX_OPEN: usize = 1000;
const MAX_STAGED: usize = 100_000;
/// The key whose `PutObject` commits what is staged.
pub const COMMIT_KEY: &str = ".detafs-commit";

/// A multipart upload under way: its parts as private files.
struct Multipart {
    dataset: String,
    path: RelPath,
    owner: String,
    dir: tempfile::TempDir,
    /// By number: the part's file, size and MD5 (hex).
    parts: BTreeMap<i32, (std::path::PathBuf, u64, String)>,
}

/// The multipart uploads under way in this gateway, and what it knows of
/// the store's staged changes.
#[derive(Default)]
pub struct Writes {
    multiparts: Mutex<HashMap<String, Multipart>>,
    /// Staged changes read, by key (they never change), and how many each
    /// staging area (by its prefix) had at its last listing, plus those
    /// staged here since.
    seen: Mutex<HashMap<String, Pending>>,
    counted: Mutex<HashMap<String, usize>>,
}

/// A staging area: what one caller stages for one dataset.
struct Area {
    dataset: String,
    owner: String,
}

impl Area {
    fn new(dataset: &str, owner: &str) -> Area {
        Area {
            dataset: dataset.to_string(),
            owner: owner.to_string(),
        }
    }

    /// Its keys' common prefix in the store.
    fn prefix(&self) -> String {
        crate::store::keys::staged_all(&self.dataset, &self.owner)
    }
}

/// The checks a body's headers ask for.
pub struct Expected {
    pub content_md5: Option<String>,
    pub checksums: s3s::dto::Checksum,
}

/// An object received, in its private folder, to be stored.
struct Object {
    file: std::path::PathBuf,
    tmp: tempfile::TempDir,
    size: u64,
    etag: String,
}

/// A body received into a file: its size and MD5 (hex).
struct Received {
    size: u64,
    md5: String,
}

/// The staging path a key names (`staging/PATH`), if it is one.
pub fn staging_path(key: &str) -> Option<&str> {
    key.strip_prefix("staging/")
}

fn api_err(e: ApiError) -> S3Error {
    super::s3(e)
}

/// A body that did not arrive whole: a chunk whose signature fails
/// (s3s checks each of a signed chunked body; its error type is private,
/// its message says which) is `SignatureDoesNotMatch`, as S3 answers.
fn body_error(e: s3s::StdError) -> S3Error {
    let said = e.to_string();
    match said.ends_with("SignatureMismatch") {
        true => S3Error::with_message(S3ErrorCode::SignatureDoesNotMatch, said),
        false => S3Error::with_message(S3ErrorCode::IncompleteBody, said),
    }
}

/// May `caller` commit to dataset `bucket`?
fn may_commit(caller: &Caller, bucket: &str) -> S3Result<()> {
    caller
        .may(Action::Commit, &[access::dataset_resource(bucket)])
        .map_err(api_err)
}

/// Receives `body` into `file`, bounded, checking what `want` says of it.
async fn receive(
    body: Option<StreamingBlob>,
    file: &std::path::Path,
    want: &Expected,
) -> S3Result<Received> {
    let io = |e: std::io::Error| S3Error::with_message(S3ErrorCode::InternalError, e.to_string());
    let mut out = tokio::fs::File::create(file).await.map_err(io)?;
    let mut md5 = s3s::crypto::Md5::new();
    let c = &want.checksums;
    let mut sums = s3s::checksum::ChecksumHasher {
        crc32: c.checksum_crc32.as_ref().map(|_| Default::default()),
        crc32c: c.checksum_crc32c.as_ref().map(|_| Default::default()),
        sha1: c.checksum_sha1.as_ref().map(|_| s3s::crypto::Sha1::new()),
        sha256: c
            .checksum_sha256
            .as_ref()
            .map(|_| s3s::crypto::Sha256::new()),
        crc64nvme: c.checksum_crc64nvme.as_ref().map(|_| Default::default()),
    };
    let mut size = 0u64;
    if let Some(mut body) = body {
        while let Some(part) = body.next().await {
            let part = part.map_err(body_error)?;
            size += part.len() as u64;
            if size > MAX_PART {
                return Err(S3Error::with_message(
                    S3ErrorCode::EntityTooLarge,
                    format!("at most {MAX_PART} bytes a request (multipart uploads send more)"),
                ));
            }
            md5.update(&part);
            sums.update(&part);
            out.write_all(&part).await.map_err(io)?;
        }
    }
    out.flush().await.map_err(io)?;
    let md5 = md5.finalize();
    if let Some(given) = &want.content_md5 {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(md5.as_ref());
        if *given != b64 {
            return Err(s3_error!(
                BadDigest,
                "the Content-MD5 does not match the body"
            ));
        }
    }
    let got = sums.finalize();
    let pairs = [
        (&c.checksum_crc32, &got.checksum_crc32),
        (&c.checksum_crc32c, &got.checksum_crc32c),
        (&c.checksum_sha1, &got.checksum_sha1),
        (&c.checksum_sha256, &got.checksum_sha256),
        (&c.checksum_crc64nvme, &got.checksum_crc64nvme),
    ];
    if pairs.iter().any(|(w, g)| w.is_some() && w != g) {
        return Err(s3_error!(
            BadDigest,
            "a checksum header does not match the body"
        ));
    }
    Ok(Received {
        size,
        md5: hex::encode(md5.as_ref()),
    })
}

impl Writes {
    /// `PutObject` of `staging/PATH` (or of the commit key) in `bucket`.
    /// Returns the ETag, and the version a commit made.
    pub async fn put(
        &self,
        api: &Arc<Api>,
        caller: Caller,
        bucket: &str,
        path: &str,
        body: Option<StreamingBlob>,
        want: &Expected,
    ) -> S3Result<(String, Option<u64>)> {
        may_commit(&caller, bucket)?;
        if path == COMMIT_KEY {
            let message = read_message(body).await?;
            let version = self.commit(api, caller, bucket, message).await?;
            return Ok((String::new(), Some(version)));
        }
        if path.is_empty() || path.ends_with('/') {
            return folder_marker(body).await.map(|etag| (etag, None));
        }
        let path = edit_path(path).map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        let tmp = api.run(tempdir_in).await.map_err(api_err)?;
        let file = tmp.path().join("object");
        let got = receive(body, &file, want).await?;
        let etag = format!("\"{}\"", got.md5);
        let o = Object {
            file,
            tmp,
            size: got.size,
            etag: etag.clone(),
        };
        self.store(api, &Area::new(bucket, caller.owner()), path, o)
            .await?;
        Ok((etag, None))
    }

    /// Stores `o` as an upload and stages it at `path`.
    async fn store(&self, api: &Arc<Api>, area: &Area, path: RelPath, o: Object) -> S3Result<()> {
        let Object {
            file,
            tmp,
            size,
            etag,
        } = o;
        let owner = area.owner.clone();
        self.add(api, area, move |repo, dataset| {
            let up = upload::store_upload(repo, dataset, &path, &file, &owner)?;
            drop(tmp);
            Ok(Pending {
                path: path.to_string(),
                upload: Some(up.id),
                size,
                etag,
            })
        })
        .await
    }

    /// Stages in `area` the change `make` builds (on the blocking pool,
    /// given the dataset), room allowing.
    async fn add(
        &self,
        api: &Arc<Api>,
        area: &Area,
        make: impl FnOnce(&crate::repo::Repo, &str) -> crate::Result<Pending> + Send + 'static,
    ) -> S3Result<()> {
        self.room(api, area).await?;
        let (dataset, owner) = (area.dataset.clone(), area.owner.clone());
        api.run(move |repo| {
            let change = make(repo, &dataset)?;
            Ok(pending::stage(repo, &dataset, &owner, &change)?)
        })
        .await
        .map_err(api_err)?;
        *self.counted.lock().entry(area.prefix()).or_default() += 1;
        Ok(())
    }

    /// Fails as `SlowDown` once `MAX_STAGED` changes are staged in
    /// `area` (counted again from the store when this gateway's count
    /// says so: a commit through another may have cleared them).
    async fn room(&self, api: &Arc<Api>, area: &Area) -> S3Result<()> {
        let counted = self.counted.lock().get(&area.prefix()).copied();
        if counted.is_some_and(|n| n < MAX_STAGED) {
            return Ok(());
        }
        // Counted by listing keys alone: nothing is read to count it.
        let (dataset, owner) = (area.dataset.clone(), area.owner.clone());
        let n = api
            .run(move |repo| Ok(pending::keys(repo, &dataset, &owner)?.len()))
            .await
            .map_err(api_err)?;
        self.counted.lock().insert(area.prefix(), n);
        if n >= MAX_STAGED {
            return Err(S3Error::with_message(
                S3ErrorCode::SlowDown,
                format!("{MAX_STAGED} changes are staged: commit them first"),
            ));
        }
        Ok(())
    }

    /// What is staged in `area`, oldest first, as (key, change).
    async fn staged(&self, api: &Arc<Api>, area: &Area) -> S3Result<Vec<(String, Pending)>> {
        let (dataset, owner) = (area.dataset.clone(), area.owner.clone());
        let keys = api
            .run(move |repo| Ok(pending::keys(repo, &dataset, &owner)?))
            .await
            .map_err(api_err)?;
        let prefix = area.prefix();
        self.counted.lock().insert(prefix.clone(), keys.len());
        let unread: Vec<String> = {
            let seen = self.seen.lock();
            keys.iter()
                .filter(|k| !seen.contains_key(*k))
                .cloned()
                .collect()
        };
        let read = api
            .run(move |repo| {
                let bodies = repo.store().get_many(&unread)?;
                let mut out = Vec::new();
                for (key, body) in unread.into_iter().zip(bodies) {
                    // Gone meanwhile: committed by another gateway.
                    let Some(body) = body else { continue };
                    let change: Pending = serde_json::from_slice(&body)
                        .map_err(|e| crate::Error::malformed(&key, e.to_string()))?;
                    out.push((key, change));
                }
                Ok(out)
            })
            .await
            .map_err(api_err)?;
        let mut seen = self.seen.lock();
        seen.extend(read);
        // What is no longer staged is forgotten.
        let listed: std::collections::HashSet<&String> = keys.iter().collect();
        seen.retain(|k, _| !k.starts_with(&prefix) || listed.contains(k));
        Ok(keys
            .iter()
            .filter_map(|k| seen.get(k).map(|c| (k.clone(), c.clone())))
            .collect())
    }

    /// `DeleteObject` of `staging/PATH`: staged as a deletion, which
    /// drops what was staged there and, at the commit, deletes the path if
    /// the version it commits on has it.
    pub async fn delete(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        path: &str,
    ) -> S3Result<()> {
        may_commit(caller, bucket)?;
        if path.is_empty() || path.ends_with('/') {
            // A folder marker is never stored: deleting one (as s3a does
            // for a file's parents) changes nothing, as a deletion of a
            // missing key does on S3.
            return Ok(());
        }
        let path = edit_path(path).map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        let change = Pending {
            path: path.to_string(),
            upload: None,
            size: 0,
            etag: String::new(),
        };
        let area = Area::new(bucket, caller.owner());
        self.add(api, &area, move |_, _| Ok(change)).await
    }

    /// Commits what is staged for `bucket` as one version (through the
    /// REST API's commit, on its newest version); then clears what it
    /// read: what was staged meanwhile stays staged.
    async fn commit(
        &self,
        api: &Arc<Api>,
        caller: Caller,
        bucket: &str,
        message: String,
    ) -> S3Result<u64> {
        let staged = self.staged(api, &Area::new(bucket, caller.owner())).await?;
        let newest = pending::newest(&staged);
        let deleted = self
            .present(
                api,
                &caller,
                bucket,
                newest.values().filter(|c| c.upload.is_none()),
            )
            .await?;
        let uploads: Vec<&str> = newest
            .values()
            .filter_map(|c| c.upload.as_deref())
            .collect();
        let keys: Vec<String> = staged.into_iter().map(|(k, _)| k).collect();
        if uploads.is_empty() && deleted.is_empty() {
            self.clear(api, keys).await?;
            return Err(s3_error!(
                InvalidRequest,
                "nothing is staged under staging/ to commit"
            ));
        }
        let body = serde_json::json!({
            "commit_message": message,
            "uploads": uploads,
            "delete": deleted,
        });
        let record = commit_as(api, caller, bucket.to_string(), body, None)
            .await
            .map_err(|e| match e.status().as_u16() {
                409 => {
                    S3Error::with_message(S3ErrorCode::OperationAborted, e.message().to_string())
                }
                _ => {
                    // Name the path of an upload the commit refused.
                    let named = newest.values().find(|c| {
                        c.upload
                            .as_ref()
                            .is_some_and(|id| e.message().contains(id.as_str()))
                    });
                    let mut s3e = api_err(e);
                    if let Some(c) = named {
                        s3e.set_message(format!(
                            "staging/{}: {}",
                            c.path,
                            s3e.message().unwrap_or_default()
                        ));
                    }
                    s3e
                }
            })?;
        self.clear(api, keys).await?;
        Ok(record.version)
    }

    /// The deleted paths of `changes` that the newest version the caller
    /// sees has, as the caller sees it (a deletion of a path it lacks, or
    /// one a policy hides from the caller, changes nothing).
    async fn present(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        changes: impl Iterator<Item = &Pending>,
    ) -> S3Result<Vec<String>> {
        let paths: Vec<String> = changes.map(|c| c.path.clone()).collect();
        if paths.is_empty() {
            return Ok(paths);
        }
        let (record, names) = match api.visible_version(caller, bucket, "latest").await {
            Ok((_, record, names)) => (record, names),
            Err(e) if e.status().as_u16() == 404 => return Ok(Vec::new()),
            Err(e) => return Err(api_err(e)),
        };
        let caller = caller.clone();
        api.run(move |repo| {
            let mut out = Vec::new();
            for p in paths {
                let at = RelPath::parse(&p)?;
                let there = repo.lookup(&record.tree, &at)?;
                if there.is_some_and(|n| caller.policies_show(&names, &at, n.is_dir())) {
                    out.push(p);
                }
            }
            Ok(out)
        })
        .await
        .map_err(api_err)
    }

    /// Clears the staged changes at `keys`.
    async fn clear(&self, api: &Arc<Api>, keys: Vec<String>) -> S3Result<()> {
        api.run(move |repo| Ok(pending::clear(repo, &keys)?))
            .await
            .map_err(api_err)
    }

    /// The uploads `caller` staged in `bucket` under `prefix` (of
    /// `staging/…` keys), in key order.
    pub async fn listed(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        prefix: &str,
    ) -> S3Result<Vec<StagedObject>> {
        let staged = self.staged(api, &Area::new(bucket, caller.owner())).await?;
        Ok(objects(&staged)
            .into_values()
            .filter(|o| o.key.starts_with(prefix))
            .collect())
    }

    /// `CopyObject` to `staging/PATH` of `bucket`: `from` staged there by
    /// another name (a rename, as S3 file systems commit their output), or
    /// a file of a version; no bytes are read or sent again.
    pub async fn copy(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        path: &str,
        from: Copied,
    ) -> S3Result<()> {
        may_commit(caller, bucket)?;
        let path = edit_path(path).map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        let area = Area::new(bucket, caller.owner());
        let owner = area.owner.clone();
        self.add(api, &area, move |repo, dataset| {
            let (up, etag) = match from {
                Copied::Staged(o) => (
                    upload::copy_upload(repo, dataset, &o.upload, &path, &owner)?,
                    o.etag,
                ),
                Copied::File { chunks, size, etag } => (
                    upload::store_chunks(repo, dataset, &path, chunks, size, &owner)?,
                    etag,
                ),
            };
            Ok(Pending {
                path: path.to_string(),
                upload: Some(up.id),
                size: up.size,
                etag,
            })
        })
        .await
    }

    /// The upload `caller` staged at `staging/PATH` of `bucket`, if any.
    pub async fn staged_object(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        path: &str,
    ) -> S3Result<Option<StagedObject>> {
        let staged = self.staged(api, &Area::new(bucket, caller.owner())).await?;
        Ok(objects(&staged).remove(path))
    }

    /// `CreateMultipartUpload` of `staging/PATH`: its id.
    pub async fn create_multipart(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        bucket: &str,
        path: &str,
    ) -> S3Result<String> {
        may_commit(caller, bucket)?;
        let path = edit_path(path).map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        let dir = api.run(tempdir_in).await.map_err(api_err)?;
        let mut open = self.multiparts.lock();
        if open.len() >= MAX_OPEN {
            return Err(s3_error!(SlowDown, "too many multipart uploads under way"));
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        open.insert(
            id.clone(),
            Multipart {
                dataset: bucket.to_string(),
                path,
                owner: caller.owner().to_string(),
                dir,
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    /// `UploadPart`: part `number` of upload `id`; its ETag.
    pub async fn upload_part(
        &self,
        caller: &Caller,
        id: &str,
        number: i32,
        body: Option<StreamingBlob>,
        want: &Expected,
    ) -> S3Result<String> {
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(s3_error!(
                InvalidArgument,
                "part numbers are 1 to {MAX_PARTS}"
            ));
        }
        let file = {
            let open = self.multiparts.lock();
            let m = owned(&open, id, caller)?;
            m.dir.path().join(format!("part-{number}"))
        };
        let got = receive(body, &file, want).await?;
        let mut open = self.multiparts.lock();
        let m = open.get_mut(id).ok_or_else(|| s3_error!(NoSuchUpload))?;
        m.parts.insert(number, (file, got.size, got.md5.clone()));
        Ok(format!("\"{}\"", got.md5))
    }

    /// `CompleteMultipartUpload`: the parts named, in order and with their
    /// ETags, become one upload, staged; its ETag.
    pub async fn complete(
        &self,
        api: &Arc<Api>,
        caller: &Caller,
        id: &str,
        named: Vec<(i32, String)>,
    ) -> S3Result<String> {
        // A list that does not name its parts rightly is refused and the
        // upload kept, for a retry (as S3 does).
        let (m, files, md5s, size) = {
            let mut open = self.multiparts.lock();
            let m = owned(&open, id, caller)?;
            if named.is_empty() || named.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(s3_error!(InvalidPartOrder, "name parts in ascending order"));
            }
            let mut files = Vec::new();
            let mut md5s = Vec::new();
            let mut size = 0u64;
            for (n, etag) in &named {
                let (file, len, md5) = m.parts.get(n).ok_or_else(|| s3_error!(InvalidPart))?;
                if etag.trim_matches('"') != md5 {
                    return Err(s3_error!(InvalidPart, "part {n}'s ETag does not match"));
                }
                files.push(file.clone());
                md5s.extend(hex::decode(md5).unwrap_or_default());
                size += len;
            }
            let m = open.remove(id).ok_or_else(|| s3_error!(NoSuchUpload))?;
            (m, files, md5s, size)
        };
        let whole = m.dir.path().join("whole");
        let joined = whole.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut out = std::fs::File::create(&joined)?;
            for f in files {
                std::io::copy(&mut std::fs::File::open(&f)?, &mut out)?;
                std::fs::remove_file(&f)?;
            }
            out.sync_all()
        })
        .await
        .map_err(|e| S3Error::with_message(S3ErrorCode::InternalError, e.to_string()))?
        .map_err(|e| S3Error::with_message(S3ErrorCode::InternalError, e.to_string()))?;
        let mut md5 = s3s::crypto::Md5::new();
        md5.update(&md5s);
        let etag = format!(
            "\"{}-{}\"",
            hex::encode(md5.finalize().as_ref()),
            named.len()
        );
        let o = Object {
            file: whole,
            tmp: m.dir,
            size,
            etag: etag.clone(),
        };
        self.store(api, &Area::new(&m.dataset, &m.owner), m.path, o)
            .await?;
        Ok(etag)
    }

    /// `AbortMultipartUpload`: its parts are gone.
    pub fn abort(&self, caller: &Caller, id: &str) -> S3Result<()> {
        let mut open = self.multiparts.lock();
        owned(&open, id, caller)?;
        open.remove(id);
        Ok(())
    }
}

/// What a `CopyObject` copies: an upload staged, or a file of a version.
pub enum Copied {
    Staged(StagedObject),
    File {
        chunks: Vec<crate::store::pack::BlobRef>,
        size: u64,
        etag: String,
    },
}

impl Copied {
    /// The source's ETag, which the copy keeps.
    pub fn etag(&self) -> &str {
        match self {
            Copied::Staged(o) => &o.etag,
            Copied::File { etag, .. } => etag,
        }
    }
}

/// An upload staged at a path, as an object of `staging/`.
pub struct StagedObject {
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// When it was staged (seconds since the epoch).
    pub mtime: i64,
    pub upload: String,
}

/// The uploads among `staged` (oldest first) that are the newest change
/// of their path, by path.
fn objects(staged: &[(String, Pending)]) -> BTreeMap<String, StagedObject> {
    let mut out = BTreeMap::new();
    for (key, c) in staged {
        let Some(upload) = &c.upload else {
            out.remove(&c.path);
            continue;
        };
        let o = StagedObject {
            key: format!("staging/{}", c.path),
            size: c.size,
            etag: c.etag.clone(),
            mtime: pending::staged_at(key).unwrap_or(0),
            upload: upload.clone(),
        };
        out.insert(c.path.clone(), o);
    }
    out
}

/// Upload `id`, if `caller` began it.
fn owned<'m>(
    open: &'m HashMap<String, Multipart>,
    id: &str,
    caller: &Caller,
) -> S3Result<&'m Multipart> {
    open.get(id)
        .filter(|m| m.owner == caller.owner())
        .ok_or_else(|| s3_error!(NoSuchUpload))
}

/// A `PutObject` of an empty object whose key ends in `/`: a folder
/// marker, as S3 file systems (s3a, s3fs) make for a `mkdir`. A version
/// keeps files, not empty folders: it is taken and changes nothing.
async fn folder_marker(body: Option<StreamingBlob>) -> S3Result<String> {
    if let Some(mut body) = body {
        while let Some(part) = body.next().await {
            if !part.map_err(body_error)?.is_empty() {
                return Err(s3_error!(
                    InvalidArgument,
                    "a key ending in / is a folder marker: send it empty"
                ));
            }
        }
    }
    // The MD5 of nothing, as S3 answers for an empty object.
    Ok("\"d41d8cd98f00b204e9800998ecf8427e\"".to_string())
}

/// A commit message: the body of a `PutObject` of the commit key.
async fn read_message(body: Option<StreamingBlob>) -> S3Result<String> {
    let mut bytes = Vec::new();
    if let Some(mut body) = body {
        while let Some(part) = body.next().await {
            let part = part.map_err(body_error)?;
            bytes.extend_from_slice(&part);
            if bytes.len() > crate::limits::MAX_MESSAGE {
                return Err(s3_error!(
                    InvalidArgument,
                    "a commit message is at most 64 KiB"
                ));
            }
        }
    }
    String::from_utf8(bytes).map_err(|_| s3_error!(InvalidArgument, "a commit message is UTF-8"))
}
