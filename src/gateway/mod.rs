//! `detafs serve`: the HTTPS gateway. TLS always (rustls); each connection
//! is served by hyper on the store's runtime (the one runtime), with a
//! bound on connections and on the time a handshake or a request's headers
//! may take; requests that touch the store run on the blocking pool
//! (`core.rs`). Its protocols (REST: `rest.rs` and its endpoints' modules;
//! S3: `s3/`; the web page: `web/`, over REST in-process) share that core
//! and never import one another (tests/layering.rs). It keeps no state of
//! its own beyond the cache, so several gateways can serve one store.

mod audit;
mod commits;
mod compare;
mod core;
mod edits;
mod lifecycle;
mod logline;
mod preview;
mod rest;
mod s3;
mod sniff;
mod stall;
mod table;
mod tags;
pub mod tls;
pub mod tokens;
mod trees;
mod web;

use crate::access::trail::Trail;
use crate::error::{Error, Result};
use crate::repo::Repo;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 512;
/// A TLS handshake, or a request's headers, must come within this.
const HANDSHAKE: Duration = Duration::from_secs(10);

pub struct GatewayOptions {
    pub listen: SocketAddr,
    pub tls: tls::Tls,
    /// The request log (JSON lines).
    pub audit: PathBuf,
    /// Bearer JWTs, if a JWKS is given.
    pub tokens: Option<tokens::Tokens>,
    /// How often the consistency audit runs (the first after one interval).
    pub audit_interval: Duration,
    /// A policy applied on top of the store's (`--policy`).
    pub policy: Option<crate::access::Policy>,
    /// Where the S3 protocol is also answered (`--s3-listen`), and the
    /// domain of its virtual-host addressing (`--s3-domain`).
    pub s3_listen: Option<SocketAddr>,
    pub s3_domain: Option<String>,
}

/// One connection, counted while it is open (`detafs_connections`).
struct Open<'a>(&'a core::Api);

impl<'a> Open<'a> {
    fn count(api: &'a core::Api) -> Open<'a> {
        api.connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Open(api)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0
            .connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serves until SIGINT or SIGTERM; `ready` gets the addresses bound (the
/// REST API's, the S3 endpoint's).
pub fn serve(
    repo: Arc<Repo>,
    opts: GatewayOptions,
    ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
) -> Result<()> {
    let trail = Trail::open(&opts.audit, 64 << 20)?;
    let state = Arc::new(core::Api::new(
        repo.clone(),
        trail,
        opts.tokens,
        opts.policy,
    ));
    let rest = rest::router(
        state.clone(),
        trees::routes()
            .merge(tags::routes())
            .merge(lifecycle::routes())
            .merge(compare::routes())
            .merge(preview::routes())
            .merge(audit::routes())
            .merge(commits::routes()),
    );
    let app = web::router(rest.clone()).merge(rest);
    // The audit reads every record and object: a thread of its own, never
    // a request's worker. It holds the API weakly and ends with it.
    let audited = Arc::downgrade(&state);
    let interval = opts.audit_interval;
    std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                match audited.upgrade() {
                    Some(api) => api.audit_now(),
                    None => return,
                }
            }
        })
        .map_err(|e| Error::io("audit thread", e))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(opts.tls.config);
    let store = repo.store().clone();
    let serving = state.clone();
    let served = store.block_on(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let rest = bind(opts.listen).await?;
        let s3 = match opts.s3_listen {
            Some(at) => Some(bind(at).await?),
            None => None,
        };
        let (mut int, mut term) = (
            signal(SignalKind::interrupt()).map_err(|e| Error::io("signal", e))?,
            signal(SignalKind::terminate()).map_err(|e| Error::io("signal", e))?,
        );
        let addr =
            |l: &tokio::net::TcpListener| l.local_addr().map_err(|e| Error::io("listener", e));
        ready(addr(&rest)?, s3.as_ref().map(addr).transpose()?);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let on = Accept {
            acceptor,
            permits,
            api: serving.clone(),
            stopped,
        };
        let app = hyper_util::service::TowerToHyperService::new(app);
        let mut loops = vec![tokio::spawn(on.clone().serve(rest, app))];
        if let Some(listener) = s3 {
            let service = s3::service(serving, opts.s3_domain);
            loops.push(tokio::spawn(on.serve(listener, service)));
        }
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        let _ = stop.send(true);
        for l in loops {
            let _ = l.await;
        }
        Ok::<(), Error>(())
    });
    state.flush();
    served
}

async fn bind(at: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| Error::io(at, e))
}

/// What every listener's connections share: TLS, the bound on connections
/// (over all listeners), the count, and the end.
#[derive(Clone)]
struct Accept {
    acceptor: tokio_rustls::TlsAcceptor,
    permits: Arc<tokio::sync::Semaphore>,
    api: Arc<core::Api>,
    stopped: tokio::sync::watch::Receiver<bool>,
}

impl Accept {
    /// Accepts connections on `listener`, each served by `service` over
    /// TLS and HTTP/1.1, until the gateway stops.
    async fn serve<S, B>(mut self, listener: tokio::net::TcpListener, service: S)
    where
        S: hyper::service::Service<
                http::Request<hyper::body::Incoming>,
                Response = http::Response<B>,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        loop {
            let permit = tokio::select! {
                p = self.permits.clone().acquire_owned() => p.expect("never closed"),
                _ = self.stopped.changed() => return,
            };
            let (tcp, _) = tokio::select! {
                a = listener.accept() => match a {
                    Ok(a) => a,
                    // Out of descriptors, say: the next accept may work.
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = self.stopped.changed() => return,
            };
            let (acceptor, service, counted) =
                (self.acceptor.clone(), service.clone(), self.api.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let _open = Open::count(&counted);
                // Plain HTTP, or a client that never finishes its hello,
                // ends here.
                let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
                else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HANDSHAKE)
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(stall::WriteDeadline::new(stream, core::IDLE)),
                        service,
                    )
                    .await;
            });
        }
    }
}
