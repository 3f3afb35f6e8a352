//! Object stores that misbehave on purpose, wrapped around a real one.

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// Fails before reaching the store.
    Refused,
    /// Reaches the store, then the answer is lost.
    AnswerLost,
    /// Answers late.
    Slow,
    /// Writes part of the object, then fails (plain puts only: a conditional
    /// create is atomic on S3); or reads part of its body, then fails.
    Torn,
}

/// Injects errors, latency and torn writes into `rate` of every 1000
/// requests, on a schedule fixed by `seed`.
pub struct Faulty {
    inner: Arc<dyn ObjectStore>,
    rate: u64,
    state: Mutex<u64>,
    pub injected: AtomicU64,
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

impl fmt::Display for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A failure as a reset connection is reported (a kind worth retrying).
fn injected(what: &str) -> object_store::Error {
    use object_store::client::{HttpError, HttpErrorKind};
    object_store::Error::Generic {
        store: "faulty",
        source: Box::new(HttpError::new(
            HttpErrorKind::Interrupted,
            std::io::Error::other(format!("injected fault: {what}")),
        )),
    }
}

impl Faulty {
    pub fn new(inner: Arc<dyn ObjectStore>, per_mille: u64, seed: u64) -> Faulty {
        Faulty {
            inner,
            rate: per_mille,
            state: Mutex::new(seed | 1),
            injected: AtomicU64::new(0),
        }
    }

    fn next(&self) -> (Fault, u64) {
        let mut x = self.state.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let v = *x;
        if v % 1000 >= self.rate {
            return (Fault::None, v);
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        let fault = match (v >> 20) % 4 {
            0 => Fault::Refused,
            1 => Fault::AnswerLost,
            2 => Fault::Slow,
            _ => Fault::Torn,
        };
        (fault, v)
    }

    async fn slow(v: u64) {
        tokio::time::sleep(Duration::from_millis((v >> 40) % 80)).await;
    }
}

#[async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        match self.next() {
            (Fault::None, _) => self.inner.put_opts(location, payload, opts).await,
            (Fault::Slow, v) => {
                Self::slow(v).await;
                self.inner.put_opts(location, payload, opts).await
            }
            (Fault::AnswerLost, _) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected("put answer lost"))
            }
            (Fault::Torn, _) if matches!(opts.mode, PutMode::Overwrite) => {
                let whole: Vec<u8> = payload.iter().flat_map(|b| b.to_vec()).collect();
                let part = PutPayload::from(whole[..whole.len() / 2].to_vec());
                self.inner.put_opts(location, part, opts).await?;
                Err(injected("torn write"))
            }
            (Fault::Refused | Fault::Torn, _) => Err(injected("put refused")),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        match self.next() {
            (Fault::Slow, v) => {
                Self::slow(v).await;
                self.inner.get_opts(location, options).await
            }
            (Fault::Torn, _) if !options.head => {
                let whole = self.inner.get_opts(location, options.clone()).await?;
                let whole = whole.bytes().await?;
                let mut got = self.inner.get_opts(location, options).await?;
                let half = whole.slice(..whole.len() / 2);
                let cut = futures::stream::iter([Ok(half), Err(injected("body cut"))]);
                got.payload = object_store::GetResultPayload::Stream(cut.boxed());
                Ok(got)
            }
            (Fault::None | Fault::Torn, _) => self.inner.get_opts(location, options).await,
            (Fault::AnswerLost, _) => {
                self.inner.get_opts(location, options).await?;
                Err(injected("get answer lost"))
            }
            (Fault::Refused, _) => Err(injected("get refused")),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.next().0 {
            Fault::None | Fault::Slow | Fault::Torn => self.inner.list(prefix),
            _ => futures::stream::once(async { Err(injected("list refused")) }).boxed(),
        }
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.next().0 {
            Fault::None | Fault::Slow | Fault::Torn => self.inner.list_with_offset(prefix, offset),
            _ => futures::stream::once(async { Err(injected("list refused")) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        match self.next().0 {
            Fault::None | Fault::Slow | Fault::Torn => self.inner.list_with_delimiter(prefix).await,
            _ => Err(injected("list refused")),
        }
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A store that ignores conditional create and overwrites, as some S3
/// clones do with If-None-Match.
#[derive(Debug)]
pub struct Overwriting(pub Arc<dyn ObjectStore>);

impl fmt::Display for Overwriting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Overwriting({})", self.0)
    }
}

#[async_trait]
impl ObjectStore for Overwriting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> Result<PutResult> {
        opts.mode = PutMode::Overwrite;
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.0.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}
