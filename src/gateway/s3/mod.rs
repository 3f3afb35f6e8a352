//! The S3 protocol on `detafs serve --s3-listen`: a bucket is a
//! dataset, a key's first element a version as the CLI names it (`v3`,
//! `latest`, `latest~1`, a tag) and the rest its path, so any S3 client
//! reads `s3://weather/v3/tables/a.csv`. s3s parses requests, checks their
//! SigV4 signatures (headers, presigned URLs, chunked payloads) against the
//! S3 keys' secrets and writes S3's XML; this module answers, through the
//! REST API's callers, policy, views and chunk cache: what a caller may
//! not see does not exist for it here either. Writes go under `staging/`
//! (`writes.rs`) and become a version in one commit.

mod writes;

use super::core::{Api, ApiError, Caller};
use crate::access::{self, Action};
use crate::error::Error;
use crate::relpath::RelPath;
use crate::repo::{Repo, apikeys};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::tree::etag;
use crate::snapshot::{Node, Record};
use crate::store::pack::BlobRef;
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, Bucket, CommonPrefix,
    CompleteMultipartUploadInput, CompleteMultipartUploadOutput, CopyObjectInput, CopyObjectOutput,
    CopyObjectResult, CopySource, CreateMultipartUploadInput, CreateMultipartUploadOutput,
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    GetBucketLocationInput, GetBucketLocationOutput, GetObjectInput, GetObjectOutput,
    HeadBucketInput, HeadBucketOutput, HeadObjectInput, HeadObjectOutput, ListBucketsInput,
    ListBucketsOutput, ListObjectsV2Input, ListObjectsV2Output, Object, PutObjectInput,
    PutObjectOutput, StreamingBlob, Timestamp, UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use std::sync::Arc;

/// Most keys one listing answers (S3's own bound).
const MAX_KEYS: usize = 1000;

/// The S3 service over the gateway's API state.
pub fn service(api: Arc<Api>, domain: Option<String>) -> Logged {
    let front = Front {
        api: api.clone(),
        writes: writes::Writes::default(),
    };
    let mut b = s3s::service::S3ServiceBuilder::new(front);
    b.set_auth(Keys(api.clone()));
    b.set_access(Signed);
    b.set_host(Domain(domain.clone()));
    b.set_validation(DatasetNames);
    Logged {
        inner: b.build(),
        api,
        domain,
    }
}

/// The S3 service, each request written to the request log as the REST
/// API's are (`logline.rs`).
#[derive(Clone)]
pub struct Logged {
    inner: s3s::service::S3Service,
    api: Arc<Api>,
    domain: Option<String>,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Logged {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let line = crate::gateway::logline::Line::s3(&req, self.domain.as_deref());
        let (inner, api) = (self.inner.clone(), self.api.clone());
        Box::pin(async move {
            let (res, refused) =
                crate::gateway::logline::judged(hyper::service::Service::call(&inner, req)).await;
            let res = res?;
            let bytes = res
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0);
            api.log(line, res.status().as_u16(), refused, bytes);
            Ok(res)
        })
    }
}

/// Every request is signed; a presigned URL lives at most 7 days, as on
/// AWS (a longer `X-Amz-Expires` is refused, not honoured).
struct Signed;

/// The longest life AWS gives a presigned URL.
const PRESIGNED_MAX_SECS: u64 = 7 * 24 * 3600;

#[async_trait::async_trait]
impl s3s::access::S3Access for Signed {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_none() {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        }
        let param = |name: &str| {
            let query = cx.uri().query().unwrap_or_default();
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map(|v| v.parse::<u64>().ok())
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // SigV4 says how long (`X-Amz-Expires`), SigV2 until when (`Expires`).
        let life = match (param("X-Amz-Expires"), param("Expires")) {
            (Some(secs), _) => secs,
            (None, Some(until)) => until.map(|t| t.saturating_sub(now)),
            (None, None) => return Ok(()),
        };
        match life {
            Some(secs) if secs <= PRESIGNED_MAX_SECS => Ok(()),
            _ => Err(s3_error!(
                AuthorizationQueryParametersError,
                "a presigned URL lives at most {PRESIGNED_MAX_SECS} seconds (7 days)"
            )),
        }
    }
}

/// A bucket name is a dataset name (`limits::plain_name`), which S3's own
/// rule (3 to 63 lowercase characters) would refuse for many.
struct DatasetNames;

impl s3s::validation::NameValidation for DatasetNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        crate::limits::plain_name(name)
    }
}

/// Virtual-host addressing under `--s3-domain` (`BUCKET.DOMAIN`, with any
/// port); any other host is path-style.
struct Domain(Option<String>);

/// `host` without its `:PORT`.
fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

impl s3s::host::S3Host for Domain {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<s3s::host::VirtualHost<'a>> {
        let vh = s3s::host::VirtualHost::new(host);
        let bucket = self.0.as_deref().and_then(|d| {
            let b = without_port(host)
                .strip_suffix(without_port(d))?
                .strip_suffix('.')?;
            (!b.is_empty()).then_some(b)
        });
        Ok(match bucket {
            Some(b) => vh.with_bucket(b),
            None => vh,
        })
    }
}

/// The S3 keys' secrets, for s3s's signature checks.
struct Keys(Arc<Api>);

#[async_trait::async_trait]
impl s3s::auth::S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<s3s::auth::SecretKey> {
        let known = self.0.known().await.map_err(s3)?;
        let key = apikeys::find_s3(known.keys(), access_key)
            .ok_or_else(|| s3_error!(InvalidAccessKeyId, "unknown or revoked access key"))?;
        Ok(key.s3_secret.clone().unwrap_or_default().into())
    }
}

struct Front {
    api: Arc<Api>,
    writes: writes::Writes,
}

impl Front {
    /// The caller of a signed request (s3s checked the signature).
    async fn caller<T>(&self, req: &S3Request<T>) -> S3Result<Caller> {
        let Some(c) = &req.credentials else {
            return Err(s3_error!(
                AccessDenied,
                "sign the request with an S3 key of this store"
            ));
        };
        self.api.s3_caller(&c.access_key).await.map_err(s3)
    }

    /// The version `spec` of `bucket` the caller may see, as `NoSuchKey`
    /// (or `NoSuchBucket`) if it may not.
    async fn version(&self, caller: &Caller, bucket: &str, spec: &str) -> S3Result<Visible> {
        let (_, record, names) = self
            .api
            .visible_version(caller, bucket, spec)
            .await
            .map_err(s3)?;
        Ok(Visible {
            name: spec.to_string(),
            record,
            names,
        })
    }

    /// A file of a version the caller may read, by its key.
    async fn file(&self, caller: Caller, bucket: &str, key: &str) -> S3Result<FileAt> {
        if let Some(path) = writes::staging_path(key) {
            return self.staged_file(&caller, bucket, path).await;
        }
        let (spec, path) = key
            .split_once('/')
            .ok_or_else(|| s3_error!(NoSuchKey, "a key is VERSION/PATH"))?;
        let v = self.version(&caller, bucket, spec).await?;
        let path = RelPath::parse(path).map_err(|_| s3_error!(NoSuchKey))?;
        let (tree, at) = (v.record.tree, path.clone());
        self.api
            .with_node(tree, at, move |node| file_at(&caller, &v, &path, node))
            .await
            .map_err(s3)
    }
}

impl Front {
    /// An upload the caller staged, read back (read-your-writes, as S3
    /// clients expect after a PUT).
    async fn staged_file(&self, caller: &Caller, bucket: &str, path: &str) -> S3Result<FileAt> {
        self.visible_bucket(caller, bucket).await?;
        let o = self
            .writes
            .staged_object(&self.api, caller, bucket, path)
            .await?
            .ok_or_else(|| s3_error!(NoSuchKey, "nothing is staged at staging/{path}"))?;
        let (dataset, upload) = (bucket.to_string(), o.upload.clone());
        let owner = caller.owner().to_string();
        let loaded = self
            .api
            .run(move |repo| {
                Ok(crate::commit::upload::load_upload(
                    repo, &dataset, &upload, &owner,
                )?)
            })
            .await
            .map_err(s3)?;
        Ok(FileAt {
            chunks: loaded.chunks,
            size: o.size,
            mtime: o.mtime,
            etag: o.etag,
        })
    }
}

/// A file the caller may read.
struct FileAt {
    chunks: Vec<BlobRef>,
    size: u64,
    mtime: i64,
    etag: String,
}

/// File `path` of version `v` (`node` as looked up there), if the caller
/// may read it; what it may not see is not there.
fn file_at(
    caller: &Caller,
    v: &Visible,
    path: &RelPath,
    node: Option<Node>,
) -> Result<FileAt, ApiError> {
    match caller.readable(&v.record, &v.names, path, node)? {
        Node::File {
            chunks,
            size,
            mtime,
            ..
        } => Ok(FileAt {
            etag: etag(&chunks),
            chunks,
            size,
            mtime: mtime.0,
        }),
        // Not an object: a folder is a prefix.
        _ => Err(Error::NoPath {
            version: v.name.clone(),
            path: path.to_string(),
        }
        .into()),
    }
}

/// A version as the caller names it, with its names for the policy.
struct Visible {
    name: String,
    record: Record,
    names: Vec<String>,
}

/// The `x-amz-checksum-*` values of a request's input.
macro_rules! checksums {
    ($input:expr) => {
        s3s::dto::Checksum {
            checksum_crc32: $input.checksum_crc32.clone(),
            checksum_crc32c: $input.checksum_crc32c.clone(),
            checksum_sha1: $input.checksum_sha1.clone(),
            checksum_sha256: $input.checksum_sha256.clone(),
            checksum_crc64nvme: $input.checksum_crc64nvme.clone(),
            ..Default::default()
        }
    };
}

/// A write outside `staging/`: versions never change.
fn read_only() -> S3Error {
    s3_error!(
        AccessDenied,
        "versions are read-only: write under staging/, then PUT staging/{} to commit",
        writes::COMMIT_KEY
    )
}

/// An API error as S3's: what the caller may not see is not there.
fn s3(e: ApiError) -> S3Error {
    if e.status() == http::StatusCode::GONE {
        let mut gone =
            S3Error::with_message(S3ErrorCode::Custom("Gone".into()), e.message().to_string());
        gone.set_status_code(http::StatusCode::GONE);
        return gone;
    }
    let code = match (e.status().as_u16(), e.code()) {
        (404, "no_dataset") => S3ErrorCode::NoSuchBucket,
        (404, _) => S3ErrorCode::NoSuchKey,
        (401 | 403, _) => S3ErrorCode::AccessDenied,
        (400, _) => S3ErrorCode::InvalidArgument,
        (503, _) => S3ErrorCode::ServiceUnavailable,
        _ => S3ErrorCode::InternalError,
    };
    S3Error::with_message(code, e.message().to_string())
}

fn timestamp(secs: i64) -> Timestamp {
    let t = std::time::UNIX_EPOCH
        + std::time::Duration::from_secs(u64::try_from(secs.max(0)).unwrap_or(0));
    Timestamp::from(t)
}

#[async_trait::async_trait]
impl S3 for Front {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let caller = self.caller(&req).await?;
        let names = self.api.datasets().await.map_err(s3)?;
        let buckets = names
            .into_iter()
            .filter(|n| caller.sees(Action::Versions, &[access::dataset_resource(n)]))
            .map(|name| Bucket {
                name: Some(name),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let caller = self.caller(&req).await?;
        self.visible_bucket(&caller, &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let caller = self.caller(&req).await?;
        self.visible_bucket(&caller, &req.input.bucket).await?;
        // No constraint: us-east-1, what clients assume of an endpoint.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        let bucket = input.bucket.clone();
        self.visible_bucket(&caller, &bucket).await?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = match input.delimiter.as_deref() {
            None | Some("") => false,
            Some("/") => true,
            Some(_) => {
                return Err(s3_error!(NotImplemented, "the only delimiter is /"));
            }
        };
        let after = match &input.continuation_token {
            Some(t) => Some(token_key(t)?),
            None => input.start_after.clone(),
        };
        let max = input.max_keys.map_or(MAX_KEYS, |m| {
            usize::try_from(m.max(0)).unwrap_or(0).min(MAX_KEYS)
        });
        let walk = Walk {
            prefix: prefix.clone(),
            delimiter,
            after: after.unwrap_or_default(),
            max,
        };
        let listed = if writes::staging_path(&prefix).is_some() {
            let staged = self
                .writes
                .listed(&self.api, &caller, &bucket, &prefix)
                .await?;
            staged_keys(staged, &walk)
        } else {
            let roots = self.roots(&caller, &bucket, &prefix).await?;
            self.api
                .run(move |repo| walk_keys(repo, &caller, &roots, &walk))
                .await
                .map_err(s3)?
        };
        let contents: Vec<Object> = listed
            .objects
            .into_iter()
            .map(|o| Object {
                key: Some(o.key),
                size: Some(i64::try_from(o.size).unwrap_or(i64::MAX)),
                e_tag: o.etag.parse().ok(),
                last_modified: Some(timestamp(o.mtime)),
                storage_class: Some("STANDARD".to_string().into()),
                ..Default::default()
            })
            .collect();
        let prefixes: Vec<CommonPrefix> = listed
            .prefixes
            .into_iter()
            .map(|p| CommonPrefix { prefix: Some(p) })
            .collect();
        let count = contents.len() + prefixes.len();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(bucket),
            prefix: Some(prefix),
            delimiter: input.delimiter,
            max_keys: Some(i32::try_from(max).unwrap_or(i32::MAX)),
            key_count: Some(i32::try_from(count).unwrap_or(i32::MAX)),
            is_truncated: Some(listed.next.is_some()),
            next_continuation_token: listed.next.map(|k| key_token(&k)),
            continuation_token: input.continuation_token,
            start_after: input.start_after,
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        self.visible_bucket(&caller, &input.bucket).await?;
        let path = writes::staging_path(&input.key).ok_or_else(read_only)?;
        let want = writes::Expected {
            content_md5: input.content_md5.clone(),
            checksums: checksums!(input),
        };
        let (etag, version) = self
            .writes
            .put(&self.api, caller, &input.bucket, path, input.body, &want)
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: etag.parse().ok(),
            version_id: version.map(|v| format!("v{v}")),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        self.visible_bucket(&caller, &input.bucket).await?;
        let path = writes::staging_path(&input.key).ok_or_else(read_only)?;
        let CopySource::Bucket { bucket, key, .. } = &input.copy_source else {
            return Err(s3_error!(
                NotImplemented,
                "copy from a bucket of this endpoint"
            ));
        };
        if **bucket != *input.bucket {
            return Err(s3_error!(
                NotImplemented,
                "a copy stays in its bucket (dataset)"
            ));
        }
        let from = match writes::staging_path(key) {
            Some(staged) => {
                let o = self
                    .writes
                    .staged_object(&self.api, &caller, bucket, staged)
                    .await?
                    .ok_or_else(|| s3_error!(NoSuchKey, "nothing is staged at {key}"))?;
                writes::Copied::Staged(o)
            }
            None => {
                let f = self.file(caller.clone(), bucket, key).await?;
                writes::Copied::File {
                    chunks: f.chunks,
                    size: f.size,
                    etag: f.etag,
                }
            }
        };
        let etag = from.etag().to_string();
        check_copy_conditions(
            &etag,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
        )?;
        self.writes
            .copy(&self.api, &caller, &input.bucket, path, from)
            .await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: etag.parse().ok(),
                last_modified: Some(Timestamp::from(std::time::SystemTime::now())),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        self.visible_bucket(&caller, &input.bucket).await?;
        if input.delete.objects.len() > MAX_KEYS {
            return Err(s3_error!(MalformedXML, "at most {MAX_KEYS} keys a request"));
        }
        let (mut deleted, mut errors) = (Vec::new(), Vec::new());
        for o in input.delete.objects {
            let done = match writes::staging_path(&o.key) {
                Some(path) => {
                    self.writes
                        .delete(&self.api, &caller, &input.bucket, path)
                        .await
                }
                None => Err(read_only()),
            };
            match done {
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(o.key),
                    ..Default::default()
                }),
                Err(e) => errors.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_string()),
                    message: e.message().map(str::to_string),
                    key: Some(o.key),
                    ..Default::default()
                }),
            }
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        self.visible_bucket(&caller, &input.bucket).await?;
        let path = writes::staging_path(&input.key).ok_or_else(read_only)?;
        self.writes
            .delete(&self.api, &caller, &input.bucket, path)
            .await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        self.visible_bucket(&caller, &input.bucket).await?;
        let path = writes::staging_path(&input.key).ok_or_else(read_only)?;
        let id = self
            .writes
            .create_multipart(&self.api, &caller, &input.bucket, path)
            .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        let want = writes::Expected {
            content_md5: input.content_md5.clone(),
            checksums: checksums!(input),
        };
        let etag = self
            .writes
            .upload_part(
                &caller,
                &input.upload_id,
                input.part_number,
                input.body,
                &want,
            )
            .await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: etag.parse().ok(),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        let named: Vec<(i32, String)> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let etag = p.e_tag.map(|t| t.value().to_string()).unwrap_or_default();
                (p.part_number.unwrap_or(0), etag)
            })
            .collect();
        let etag = self
            .writes
            .complete(&self.api, &caller, &input.upload_id, named)
            .await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: etag.parse().ok(),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let caller = self.caller(&req).await?;
        self.writes.abort(&caller, &req.input.upload_id)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        let file = self.file(caller, &input.bucket, &input.key).await?;
        check_conditions(
            &file.etag,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
        )?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(i64::try_from(file.size).unwrap_or(i64::MAX)),
            e_tag: file.etag.parse().ok(),
            last_modified: Some(timestamp(file.mtime)),
            accept_ranges: Some("bytes".into()),
            content_type: Some("application/octet-stream".into()),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let caller = self.caller(&req).await?;
        let input = req.input;
        let file = self.file(caller, &input.bucket, &input.key).await?;
        check_conditions(
            &file.etag,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
        )?;
        let size = file.size;
        let (span, partial) = match &input.range {
            None => (0..size, false),
            Some(r) => (
                r.check(size).map_err(|_| {
                    S3Error::with_message(
                        S3ErrorCode::InvalidRange,
                        format!("the object has {size} bytes"),
                    )
                })?,
                true,
            ),
        };
        let (etag, mtime) = (file.etag, file.mtime);
        let stream = self
            .api
            .read_span(file.chunks, span.start, span.end)
            .await
            .map_err(s3)?;
        let body = StreamingBlob::wrap(stream);
        Ok(S3Response::new(GetObjectOutput {
            body: Some(body),
            content_length: Some(i64::try_from(span.end - span.start).unwrap_or(i64::MAX)),
            content_range: partial
                .then(|| format!("bytes {}-{}/{size}", span.start, span.end.saturating_sub(1))),
            e_tag: etag.parse().ok(),
            last_modified: Some(timestamp(mtime)),
            accept_ranges: Some("bytes".into()),
            content_type: Some("application/octet-stream".into()),
            ..Default::default()
        }))
    }
}

impl Front {
    /// Fails as `NoSuchBucket` unless the caller may see dataset `bucket`.
    async fn visible_bucket(&self, caller: &Caller, bucket: &str) -> S3Result<()> {
        self.api.dataset_for(caller, bucket).await.map_err(s3)
    }

    /// The versions a listing of `prefix` starts from: the one its first
    /// element names (any spec, `latest~2` too), else every version, tag
    /// and `latest` the caller sees.
    async fn roots(&self, caller: &Caller, bucket: &str, prefix: &str) -> S3Result<Vec<Visible>> {
        if let Some((spec, _)) = prefix.split_once('/') {
            return Ok(match self.version(caller, bucket, spec).await {
                Ok(v) => vec![v],
                Err(e) if *e.code() == S3ErrorCode::NoSuchKey => vec![],
                Err(e) => return Err(e),
            });
        }
        let mut names = vec!["latest".to_string()];
        let (numbers, tags) = self.api.version_names(bucket).await.map_err(s3)?;
        names.extend(numbers.iter().map(|n| format!("v{n}")));
        names.extend(tags);
        let mut roots = Vec::new();
        for name in names.into_iter().filter(|n| n.starts_with(prefix)) {
            match self.version(caller, bucket, &name).await {
                Ok(v) => roots.push(v),
                Err(e) if *e.code() == S3ErrorCode::NoSuchKey => {}
                Err(e) => return Err(e),
            }
        }
        roots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(roots)
    }
}

/// What one listing asks for.
struct Walk {
    prefix: String,
    /// `/` groups keys below the prefix's folder into common prefixes.
    delimiter: bool,
    /// Only keys after this one (`start-after`, a continuation token).
    after: String,
    max: usize,
}

/// A continuation token: the last key answered, opaque to the client.
fn key_token(key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

fn token_key(token: &str) -> S3Result<String> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|k| String::from_utf8(k).ok())
        .ok_or_else(|| s3_error!(InvalidArgument, "not a continuation token of this endpoint"))
}

/// `If-Match` that fails is 412; `If-None-Match` that matches, 304.
fn check_conditions(
    etag: &str,
    if_match: Option<&s3s::dto::ETagCondition>,
    if_none_match: Option<&s3s::dto::ETagCondition>,
) -> S3Result<()> {
    use s3s::dto::ETagCondition;
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(t) => format!("\"{}\"", t.value()) == etag,
    };
    if if_match.is_some_and(|c| !matches(c)) {
        return Err(s3_error!(PreconditionFailed));
    }
    if if_none_match.is_some_and(matches) {
        let mut e = S3Error::new(S3ErrorCode::NotModified);
        e.set_status_code(http::StatusCode::NOT_MODIFIED);
        return Err(e);
    }
    Ok(())
}

/// A `CopyObject`'s conditions on its source: either failing is 412.
fn check_copy_conditions(
    etag: &str,
    if_match: Option<&s3s::dto::ETagCondition>,
    if_none_match: Option<&s3s::dto::ETagCondition>,
) -> S3Result<()> {
    match check_conditions(etag, if_match, if_none_match) {
        Err(e) if *e.code() == S3ErrorCode::NotModified => Err(s3_error!(PreconditionFailed)),
        other => other,
    }
}

/// An object of a listing.
struct Listed {
    key: String,
    size: u64,
    etag: String,
    /// Seconds since the epoch: a version's file's time, or when a staged
    /// file was staged.
    mtime: i64,
}

/// Keys listed, in S3's order: objects and common prefixes, and the key to
/// go on after if there are more.
#[derive(Default)]
struct Keyed {
    objects: Vec<Listed>,
    prefixes: Vec<String>,
    next: Option<String>,
    /// The last key taken.
    last: Option<String>,
}

impl Keyed {
    /// Takes `answer` unless the page holds `max` keys already: then it
    /// notes where the next page starts and says the page is full.
    fn take(&mut self, answer: Answer, max: usize) -> bool {
        if self.objects.len() + self.prefixes.len() == max {
            self.next = self.last.take();
            return false;
        }
        match answer {
            Answer::Object(f) => {
                self.last = Some(f.key.clone());
                self.objects.push(f);
            }
            Answer::Prefix(p) => {
                self.last = Some(p.clone());
                self.prefixes.push(p);
            }
        }
        true
    }
}

/// What a listing's walk has yet to look at, last first.
enum Todo {
    /// A folder (`key` ends in `/`): version `root`'s tree at `path`.
    Dir {
        key: String,
        tree: BlobRef,
        path: RelPath,
        root: usize,
    },
    File(Listed),
}

/// The keys of `roots` after `w.after` that start with `w.prefix`, in
/// byte order, at most `w.max`: a folder's entries are taken in the order
/// of their keys (a folder's name with its `/`), and folders whose keys
/// all lie before `after`, or beside the prefix, are not read.
fn walk_keys(repo: &Repo, caller: &Caller, roots: &[Visible], w: &Walk) -> Result<Keyed, ApiError> {
    let mut out = Keyed::default();
    let mut todo: Vec<Todo> = roots
        .iter()
        .enumerate()
        .rev()
        .map(|(root, v)| Todo::Dir {
            key: format!("{}/", v.name),
            tree: v.record.tree,
            path: RelPath::root(),
            root,
        })
        .collect();
    // Whether a key is answered here, or is a folder to look into.
    let wanted = |key: &str| key > w.after.as_str() && key.starts_with(&w.prefix);
    while let Some(item) = todo.pop() {
        let answer = match item {
            Todo::File(f) if wanted(&f.key) => Answer::Object(f),
            Todo::File(_) => continue,
            Todo::Dir {
                key,
                tree,
                path,
                root,
            } => {
                let inside = w.prefix.starts_with(&key);
                if !inside && !key.starts_with(&w.prefix) {
                    continue; // beside the prefix
                }
                if w.after.as_str() >= key.as_str() && !w.after.starts_with(&key) {
                    continue; // every key in it comes before `after`
                }
                if w.delimiter && !inside {
                    match wanted(&key) {
                        true => Answer::Prefix(key),
                        false => continue,
                    }
                } else {
                    let folder = Folder {
                        key: &key,
                        tree: &tree,
                        path: &path,
                        root,
                    };
                    push_entries(repo, caller, &roots[root], &folder, &mut todo)?;
                    continue;
                }
            }
        };
        if !out.take(answer, w.max) {
            break;
        }
    }
    Ok(out)
}

enum Answer {
    Object(Listed),
    Prefix(String),
}

/// A folder a listing looks into: its key, tree and path in version `root`.
struct Folder<'a> {
    key: &'a str,
    tree: &'a BlobRef,
    path: &'a RelPath,
    root: usize,
}

/// A folder's entries the caller sees, onto `todo` (last key first):
/// files and folders; what is no object (a symlink, a device, a name that
/// is not UTF-8) is left out.
fn push_entries(
    repo: &Repo,
    caller: &Caller,
    v: &Visible,
    f: &Folder,
    todo: &mut Vec<Todo>,
) -> Result<(), ApiError> {
    let (key, path, root) = (f.key, f.path, f.root);
    let folder = repo.tree(f.tree)?;
    let mut items: Vec<Todo> = Vec::new();
    for e in &folder.entries {
        let Ok(name) = std::str::from_utf8(&e.name) else {
            continue;
        };
        let Ok(child) = path.join(&e.name) else {
            continue;
        };
        if !caller.sees_path(&v.names, &child, e.node.is_dir()) {
            continue;
        }
        match &e.node {
            Node::Dir { tree, .. } => items.push(Todo::Dir {
                key: format!("{key}{name}/"),
                tree: *tree,
                path: child,
                root,
            }),
            Node::File {
                chunks,
                size,
                mtime,
                ..
            } => items.push(Todo::File(Listed {
                key: format!("{key}{name}"),
                size: *size,
                etag: etag(chunks),
                mtime: mtime.0,
            })),
            Node::Symlink { .. } | Node::Special { .. } => {}
        }
    }
    let sort_key = |t: &Todo| match t {
        Todo::Dir { key, .. } => key.clone(),
        Todo::File(f) => f.key.clone(),
    };
    items.sort_by_cached_key(sort_key);
    todo.extend(items.into_iter().rev());
    Ok(())
}

/// One page of what is staged (`staging/…` keys, in key order), as
/// `walk_keys` pages a version.
fn staged_keys(staged: Vec<writes::StagedObject>, w: &Walk) -> Keyed {
    let mut out = Keyed::default();
    for writes::StagedObject {
        key,
        size,
        etag,
        mtime,
        ..
    } in staged
    {
        if key.as_str() <= w.after.as_str() || !key.starts_with(&w.prefix) {
            continue;
        }
        let rest = &key[w.prefix.len()..];
        let answer = match rest.find('/').filter(|_| w.delimiter) {
            Some(i) => {
                let p = format!("{}{}", w.prefix, &rest[..=i]);
                if p.as_str() <= w.after.as_str() || out.prefixes.last() == Some(&p) {
                    continue;
                }
                Answer::Prefix(p)
            }
            None => Answer::Object(Listed {
                key,
                size,
                etag,
                mtime,
            }),
        };
        if !out.take(answer, w.max) {
            break;
        }
    }
    out
}
