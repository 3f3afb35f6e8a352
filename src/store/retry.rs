//! Riding out transient store failures: `Retrying` wraps an object store
//! so that each request is retried with exponential backoff and jitter
//! until a deadline, a body that fails midway is resumed from its next
//! byte by a ranged request of the same object version (its ETag), and a
//! listing that fails midway goes on after its last key. Every answer and
//! failure is told to the store's `Health`. A GET's deadline covers its
//! body: a reader never waits longer than it for one object. (object_store's
//! HTTP client resumes a body within one request's short retry budget;
//! this goes on until the store's deadline, as whole operations did.)

use super::health::Health;
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, Result,
};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one store operation may keep retrying: `None` for local folders,
/// which fail for lasting reasons (permissions, a full disk) and are not
/// retried.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub deadline: Option<Duration>,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(4);
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Policy {
    pub fn local() -> Policy {
        Policy { deadline: None }
    }

    pub fn remote(deadline: Duration) -> Policy {
        Policy {
            deadline: Some(deadline),
        }
    }

    /// One HTTP request's own timeout: a stalled connection is abandoned
    /// early enough to be retried before the deadline.
    #[cfg_attr(not(feature = "cloud"), allow(dead_code))]
    pub fn request_timeout(&self) -> Duration {
        self.deadline.map_or(MAX_REQUEST_TIMEOUT, |d| {
            (d / 3).clamp(Duration::from_secs(1), MAX_REQUEST_TIMEOUT)
        })
    }
}

/// Backoff before retry number `attempt` (0-based): doubling, capped, and
/// jittered over its upper half so that hosts retrying together spread out.
fn backoff(attempt: u32) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1 << attempt.min(16))
        .min(MAX_BACKOFF);
    base.mul_f64(rand::random_range(0.5..=1.0))
}

/// Time left under which a failed operation is not tried again: too short
/// for a request to be answered.
const LAST_TRY: Duration = Duration::from_millis(100);

/// The error for an operation that ran out of time, naming the store's last
/// answer if it gave one.
fn deadline_exceeded(
    deadline: Duration,
    last: Option<&object_store::Error>,
) -> object_store::Error {
    let last = last.map_or_else(String::new, |e| format!(" (last failure: {e})"));
    object_store::Error::Generic {
        store: "detafs",
        source: format!(
            "no answer within the deadline of {}{last}",
            humantime::format_duration(deadline)
        )
        .into(),
    }
}

#[cfg(feature = "cloud")]
use super::classify::transient;

/// Without the cloud backends every store is a local folder, whose errors
/// are never retried.
#[cfg(not(feature = "cloud"))]
fn transient(_: &object_store::Error) -> bool {
    false
}

/// An object store whose requests ride out transient failures under
/// `policy`, telling `health` how each went.
#[derive(Clone)]
pub struct Retrying {
    inner: Arc<dyn ObjectStore>,
    policy: Policy,
    health: Arc<Health>,
}

impl std::fmt::Display for Retrying {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retrying({})", self.inner)
    }
}

impl std::fmt::Debug for Retrying {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// What a retried request is waiting for: the time it began (its deadline
/// runs from there) and the retries so far.
struct Attempts {
    start: Instant,
    made: u32,
    last: Option<object_store::Error>,
}

impl Attempts {
    fn new() -> Attempts {
        Attempts {
            start: Instant::now(),
            made: 0,
            last: None,
        }
    }
}

impl Retrying {
    pub fn new(inner: Arc<dyn ObjectStore>, policy: Policy, health: Arc<Health>) -> Retrying {
        Retrying {
            inner,
            policy,
            health,
        }
    }

    /// Time left of the deadline (`None`: no deadline, never retried).
    fn left(&self, tries: &Attempts) -> Option<Duration> {
        self.policy
            .deadline
            .map(|d| d.saturating_sub(tries.start.elapsed()))
    }

    /// Runs `step` under what is left of the deadline; past it, the
    /// deadline's error (`Err`), told to the health.
    async fn timed<F: Future>(&self, tries: &Attempts, step: F) -> Result<F::Output> {
        let (Some(deadline), Some(left)) = (self.policy.deadline, self.left(tries)) else {
            return Ok(step.await);
        };
        // No answer at all: the store is failing, not answering.
        tokio::time::timeout(left, step).await.map_err(|_| {
            let e = deadline_exceeded(deadline, tries.last.as_ref());
            self.health.failed(&e);
            e
        })
    }

    /// After failure `e` of a request for `what`: if it is worth another
    /// try and time is left, waits its backoff; otherwise gives it back.
    async fn again(&self, what: &str, tries: &mut Attempts, e: object_store::Error) -> Result<()> {
        if !transient(&e) {
            return Err(e);
        }
        self.health.failed(&e);
        let left = match self.left(tries) {
            Some(left) if left >= LAST_TRY => left,
            _ => return Err(e),
        };
        // The last waits shrink to fit, so the whole deadline is used and
        // never overshot.
        let wait = backoff(tries.made).min(left / 2);
        tries.made += 1;
        tracing::warn!(
            "{what}: store request failed (retry {} in {:.1} s): {e}",
            tries.made,
            wait.as_secs_f64()
        );
        tries.last = Some(e);
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Runs request `op` until it is answered (a refusal, a missing object
    /// are answers), fails for good, or the deadline passes.
    async fn run<T, F>(
        &self,
        what: &str,
        tries: &mut Attempts,
        mut op: impl FnMut() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        loop {
            let t = Instant::now();
            match self.timed(tries, op()).await? {
                Err(e) if transient(&e) => self.again(what, tries, e).await?,
                res => {
                    self.health.answered(t.elapsed());
                    return res;
                }
            }
        }
    }

    /// `body` of the GET of `range` of `location`, bounded by the
    /// deadline, resumed from its next byte when it fails midway (the same
    /// version: its `etag`).
    fn resuming(
        &self,
        location: &Path,
        etag: Option<String>,
        range: std::ops::Range<u64>,
        tries: Attempts,
        body: Body,
    ) -> Body {
        let state = Resume {
            store: self.clone(),
            location: location.clone(),
            etag,
            next: range.start,
            end: range.end,
            body,
            tries,
        };
        futures::stream::unfold(Some(state), |state| async move {
            let mut s = state?;
            loop {
                let e = match s.store.timed(&s.tries, s.body.next()).await {
                    Err(deadline) => return Some((Err(deadline), None)),
                    Ok(Some(Err(e))) => e,
                    Ok(None) => return None,
                    Ok(Some(Ok(bytes))) => {
                        s.next += bytes.len() as u64;
                        return Some((Ok(bytes), Some(s)));
                    }
                };
                // Failing after its last byte: nothing to resume; without
                // a version to ask for, bytes of two versions could mix.
                let etag = match &s.etag {
                    Some(etag) if s.next < s.end => etag.clone(),
                    _ => return Some((Err(e), None)),
                };
                let what = s.location.as_ref();
                if let Err(e) = s.store.again(what, &mut s.tries, e).await {
                    return Some((Err(e), None));
                }
                let options = GetOptions {
                    range: Some(GetRange::Bounded(s.next..s.end)),
                    if_match: Some(etag.clone()),
                    ..Default::default()
                };
                let (store, location) = (&s.store, &s.location);
                let got = store
                    .run(location.as_ref(), &mut s.tries, || {
                        store.inner.get_opts(location, options.clone())
                    })
                    .await;
                // A store that ignores If-Match still says which version
                // it answered with.
                match got {
                    Ok(got)
                        if got.range == (s.next..s.end)
                            && got.meta.e_tag.as_deref() == Some(&*etag) =>
                    {
                        s.body = got.into_stream()
                    }
                    Ok(got) => {
                        let e = object_store::Error::Generic {
                            store: "detafs",
                            source: format!(
                                "asked to resume bytes {}..{} of version {etag}, the store answered bytes {:?} of version {:?}",
                                s.next, s.end, got.range, got.meta.e_tag
                            )
                            .into(),
                        };
                        return Some((Err(e), None));
                    }
                    Err(e) => return Some((Err(e), None)),
                }
            }
        })
        .boxed()
    }

    /// A listing of `prefix` after `offset`, going on after its last key
    /// when it fails midway.
    fn listing(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let list = |store: &Retrying, prefix: Option<&Path>, after: Option<&Path>| match after {
            Some(o) => store.inner.list_with_offset(prefix, o),
            None => store.inner.list(prefix),
        };
        let state = Listing {
            body: list(self, prefix, offset),
            store: self.clone(),
            prefix: prefix.cloned(),
            after: offset.cloned(),
            tries: Attempts::new(),
            fresh: true,
        };
        futures::stream::unfold(Some(state), move |state| async move {
            let mut s = state?;
            loop {
                let t = Instant::now();
                let item = match s.store.timed(&s.tries, s.body.next()).await {
                    Err(deadline) => return Some((Err(deadline), None)),
                    Ok(item) => item,
                };
                if !matches!(item, Some(Err(_))) && std::mem::take(&mut s.fresh) {
                    // The listing's (re)start was answered.
                    s.store.health.answered(t.elapsed());
                }
                let e = match item {
                    None => return None,
                    Some(Ok(meta)) => {
                        s.after = Some(meta.location.clone());
                        return Some((Ok(meta), Some(s)));
                    }
                    Some(Err(e)) => e,
                };
                let what = s.prefix.as_ref().map_or("", Path::as_ref);
                if let Err(e) = s.store.again(what, &mut s.tries, e).await {
                    return Some((Err(e), None));
                }
                s.body = list(&s.store, s.prefix.as_ref(), s.after.as_ref());
                s.fresh = true;
            }
        })
        .boxed()
    }
}

type Body = BoxStream<'static, Result<Bytes>>;

/// A GET's body being read, and where it stands.
struct Resume {
    store: Retrying,
    location: Path,
    etag: Option<String>,
    next: u64,
    end: u64,
    body: Body,
    tries: Attempts,
}

/// A listing being read, and the last key it gave.
struct Listing {
    store: Retrying,
    prefix: Option<Path>,
    after: Option<Path>,
    body: BoxStream<'static, Result<ObjectMeta>>,
    tries: Attempts,
    /// Whether nothing came since it was (re)started.
    fresh: bool,
}

#[async_trait]
impl ObjectStore for Retrying {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.run(location.as_ref(), &mut Attempts::new(), || {
            self.inner.put_opts(location, payload.clone(), opts.clone())
        })
        .await
    }

    /// Multipart uploads are not retried here: detafs writes whole objects.
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let mut tries = Attempts::new();
        let mut got = self
            .run(location.as_ref(), &mut tries, || {
                self.inner.get_opts(location, options.clone())
            })
            .await?;
        if self.policy.deadline.is_some()
            && !options.head
            && let GetResultPayload::Stream(body) = got.payload
        {
            let (etag, range) = (got.meta.e_tag.clone(), got.range.clone());
            got.payload =
                GetResultPayload::Stream(self.resuming(location, etag, range, tries, body));
        }
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let store = self.clone();
        locations
            .then(move |location| {
                let store = store.clone();
                async move {
                    let location = location?;
                    store
                        .run(location.as_ref(), &mut Attempts::new(), || {
                            store.inner.delete(&location)
                        })
                        .await
                        .map(|()| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let what = prefix.map_or("", Path::as_ref);
        self.run(what, &mut Attempts::new(), || {
            self.inner.list_with_delimiter(prefix)
        })
        .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.run(to.as_ref(), &mut Attempts::new(), || {
            self.inner.copy_opts(from, to, options.clone())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        for attempt in 0..20 {
            let cap = FIRST_BACKOFF
                .saturating_mul(1 << attempt.min(16))
                .min(MAX_BACKOFF);
            let b = backoff(attempt);
            assert!(
                b <= cap && b >= cap / 2,
                "attempt {attempt}: {b:?} vs {cap:?}"
            );
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| backoff(3)).collect();
        assert!(spread.len() > 1, "jitter varies the delay");
    }

    /// An in-memory store whose next `fail_bodies` GET bodies break after
    /// `after` bytes, whose next `fail_lists` listings break after their
    /// second key (a reset connection: worth retrying), and whose bodies
    /// stall instead when `stall` is set.
    #[derive(Debug, Default)]
    struct Flaky {
        inner: object_store::memory::InMemory,
        fail_bodies: std::sync::atomic::AtomicUsize,
        fail_lists: std::sync::atomic::AtomicUsize,
        after: usize,
        stall: bool,
        /// Answers without an ETag, as some S3 clones do.
        no_etag: bool,
        /// Ignores If-Match, as some S3 clones do.
        no_if_match: bool,
        /// The ranges and ETags asked for, in order.
        asked: parking_lot::Mutex<Vec<(Option<GetRange>, Option<String>)>>,
    }

    impl std::fmt::Display for Flaky {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Flaky")
        }
    }

    #[cfg(not(feature = "cloud"))]
    fn reset() -> object_store::Error {
        object_store::Error::Generic {
            store: "flaky",
            source: "connection reset".into(),
        }
    }

    #[cfg(feature = "cloud")]
    fn reset() -> object_store::Error {
        use object_store::client::{HttpError, HttpErrorKind};
        object_store::Error::Generic {
            store: "flaky",
            source: Box::new(HttpError::new(
                HttpErrorKind::Interrupted,
                std::io::Error::other("connection reset"),
            )),
        }
    }

    fn take(n: &std::sync::atomic::AtomicUsize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        n.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    #[async_trait]
    impl ObjectStore for Flaky {
        async fn put_opts(&self, p: &Path, b: PutPayload, o: PutOptions) -> Result<PutResult> {
            self.inner.put_opts(p, b, o).await
        }
        async fn put_multipart_opts(
            &self,
            p: &Path,
            o: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(p, o).await
        }
        async fn get_opts(&self, p: &Path, options: GetOptions) -> Result<GetResult> {
            let asked = (options.range.clone(), options.if_match.clone());
            self.asked.lock().push(asked);
            let mut options = options;
            if self.no_if_match {
                options.if_match = None;
            }
            let mut got = self.inner.get_opts(p, options).await?;
            if self.stall {
                got.payload = GetResultPayload::Stream(futures::stream::pending().boxed());
            } else if take(&self.fail_bodies) {
                let whole = got.bytes().await?;
                let part = whole.slice(..self.after);
                let broken = futures::stream::iter([Ok(part), Err(reset())]);
                got = GetResult {
                    payload: GetResultPayload::Stream(broken.boxed()),
                    ..self.inner.get_opts(p, GetOptions::default()).await?
                };
            }
            if self.no_etag {
                got.meta.e_tag = None;
            }
            Ok(got)
        }
        fn delete_stream(
            &self,
            l: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(l)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            let all = self.inner.list(prefix);
            match take(&self.fail_lists) {
                true => all
                    .take(2)
                    .chain(futures::stream::once(async { Err(reset()) }))
                    .boxed(),
                false => all,
            }
        }
        fn list_with_offset(
            &self,
            prefix: Option<&Path>,
            offset: &Path,
        ) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list_with_offset(prefix, offset)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> Result<()> {
            self.inner.copy_opts(from, to, o).await
        }
    }

    fn retrying(flaky: Flaky, deadline: Duration) -> (Arc<Flaky>, Retrying, Arc<Health>) {
        let flaky = Arc::new(flaky);
        let health = Arc::new(Health::default());
        let store = Retrying::new(flaky.clone(), Policy::remote(deadline), health.clone());
        (flaky, store, health)
    }

    fn run<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f)
    }

    #[cfg(feature = "cloud")]
    #[test]
    fn a_body_failing_midway_is_resumed_from_its_next_byte_of_the_same_version() {
        let (flaky, store, health) = retrying(
            Flaky {
                fail_bodies: 1.into(),
                after: 1000,
                ..Default::default()
            },
            Duration::from_secs(10),
        );
        let path = Path::from("packs/ab/x");
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        run(async {
            store.put(&path, data.clone().into()).await.unwrap();
            let got = store.get(&path).await.unwrap().bytes().await.unwrap();
            assert!(got == data, "every byte once, in order");
            let ranged = store.get_range(&path, 100..300).await;
            assert!(ranged.unwrap() == data[100..300]);
        });
        let asked = flaky.asked.lock().clone();
        // The first GET, its resumption (the rest, of the same version),
        // then the ranged one, whole at once.
        assert_eq!(asked.len(), 3, "{asked:?}");
        assert!(asked[1].1.is_some(), "{asked:?}");
        assert_eq!(asked[1].0, Some(GetRange::Bounded(1000..5000)), "{asked:?}");
        assert_eq!(health.report().requests_failed, 1);
    }

    #[cfg(feature = "cloud")]
    #[test]
    fn a_body_whose_object_changed_before_its_resumption_fails_never_mixes() {
        let (flaky, store, _) = retrying(
            Flaky {
                fail_bodies: 1.into(),
                after: 10,
                ..Default::default()
            },
            Duration::from_secs(10),
        );
        let path = Path::from("k");
        run(async {
            store.put(&path, vec![1u8; 100].into()).await.unwrap();
            let got = store.get(&path).await.unwrap();
            flaky.inner.put(&path, vec![2u8; 100].into()).await.unwrap();
            let err = got.bytes().await.unwrap_err();
            assert!(
                matches!(err, object_store::Error::Precondition { .. }),
                "{err}"
            );
        });
    }

    #[cfg(feature = "cloud")]
    #[test]
    fn a_store_ignoring_if_match_cannot_resume_with_another_version() {
        let (flaky, store, _) = retrying(
            Flaky {
                fail_bodies: 1.into(),
                after: 10,
                no_if_match: true,
                ..Default::default()
            },
            Duration::from_secs(10),
        );
        let path = Path::from("k");
        run(async {
            store.put(&path, vec![1u8; 100].into()).await.unwrap();
            let got = store.get(&path).await.unwrap();
            flaky.inner.put(&path, vec![2u8; 100].into()).await.unwrap();
            let err = got.bytes().await.unwrap_err().to_string();
            assert!(err.contains("of version"), "{err}");
        });
    }

    #[cfg(feature = "cloud")]
    #[test]
    fn a_body_without_an_etag_failing_midway_fails_never_resumes() {
        let (flaky, store, _) = retrying(
            Flaky {
                fail_bodies: 1.into(),
                after: 10,
                no_etag: true,
                ..Default::default()
            },
            Duration::from_secs(10),
        );
        let path = Path::from("k");
        run(async {
            store.put(&path, vec![1u8; 100].into()).await.unwrap();
            let err = store.get(&path).await.unwrap().bytes().await.unwrap_err();
            assert!(err.to_string().contains("connection reset"), "{err}");
        });
        assert_eq!(
            flaky.asked.lock().len(),
            1,
            "no second GET without a version"
        );
    }

    #[cfg(feature = "cloud")]
    #[test]
    fn a_listing_failing_midway_goes_on_after_its_last_key() {
        let (_, store, _) = retrying(
            Flaky {
                fail_lists: 1.into(),
                ..Default::default()
            },
            Duration::from_secs(10),
        );
        run(async {
            let names: Vec<String> = (0..6).map(|i| format!("p/{i}")).collect();
            for n in &names {
                store
                    .put(&Path::from(n.as_str()), vec![0].into())
                    .await
                    .unwrap();
            }
            let listed: Vec<String> = store
                .list(Some(&Path::from("p")))
                .map(|m| m.unwrap().location.to_string())
                .collect()
                .await;
            assert_eq!(listed, names, "each key once");
        });
    }

    #[test]
    fn a_stalled_body_ends_at_the_deadline() {
        let (_, store, health) = retrying(
            Flaky {
                stall: true,
                ..Default::default()
            },
            Duration::from_millis(300),
        );
        let path = Path::from("k");
        run(async {
            store.put(&path, vec![1u8; 10].into()).await.unwrap();
            let err = store.get(&path).await.unwrap().bytes().await.unwrap_err();
            assert!(err.to_string().contains("deadline"), "{err}");
        });
        assert!(!health.report().reachable);
    }
}
