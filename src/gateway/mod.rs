//! `detafs serve`: the HTTPS gateway. TLS always (rustls); each connection
//! is served by hyper on the store's runtime (the one runtime), with a
//! bound on connections and on the time a handshake or a request's headers
//! may take; requests that touch the store run on the blocking pool
//! (`api.rs`). It keeps no state of its own beyond the cache, so several
//! gateways can serve one store.

pub mod api;
mod stall;
mod table;
pub mod tls;
pub mod tokens;

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
}

/// One connection, counted while it is open (`detafs_connections`).
struct Open<'a>(&'a api::Api);

impl<'a> Open<'a> {
    fn count(api: &'a api::Api) -> Open<'a> {
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

/// Serves until SIGINT or SIGTERM; `ready` gets the address bound.
pub fn serve(repo: Arc<Repo>, opts: GatewayOptions, ready: impl FnOnce(SocketAddr)) -> Result<()> {
    let trail = Trail::open(&opts.audit, 64 << 20)?;
    let state = Arc::new(api::Api::new(repo.clone(), trail, opts.tokens, opts.policy));
    let app = api::router(state.clone());
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
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|e| Error::io(opts.listen, e))?;
        let (mut int, mut term) = (
            signal(SignalKind::interrupt()).map_err(|e| Error::io("signal", e))?,
            signal(SignalKind::terminate()).map_err(|e| Error::io("signal", e))?,
        );
        ready(
            listener
                .local_addr()
                .map_err(|e| Error::io("listener", e))?,
        );
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("never closed"),
                _ = int.recv() => break,
                _ = term.recv() => break,
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
                _ = int.recv() => break,
                _ = term.recv() => break,
            };
            let (acceptor, app, counted) = (acceptor.clone(), app.clone(), serving.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let _open = Open::count(&counted);
                // Plain HTTP, or a client that never finishes its hello,
                // ends here.
                let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
                else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HANDSHAKE)
                    .serve_connection(
                        hyper_util::rt::TokioIo::new(stall::WriteDeadline::new(stream, api::IDLE)),
                        service,
                    )
                    .await;
            });
        }
        Ok::<(), Error>(())
    });
    state.flush();
    served
}
