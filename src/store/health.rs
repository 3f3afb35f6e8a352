//! What a store's latest answers were, for `.detafs/health` and the
//! gateway's: whether it answers, how fast, since when it fails and why,
//! and how many requests it answered and failed. `retry::Retrying` feeds
//! it one request at a time.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// What the store's latest answers were (or a gateway's, to a host that
/// reads through one).
#[derive(Default)]
pub struct Health {
    state: Mutex<HealthState>,
    /// Requests answered and failed, since the store was opened.
    answered: AtomicU64,
    failed: AtomicU64,
}

#[derive(Default, Clone)]
struct HealthState {
    last_ok: Option<SystemTime>,
    latency: Duration,
    /// Set while requests fail: when the failures began and the latest one.
    failing: Option<(SystemTime, String)>,
}

/// A snapshot of `Health` for reports.
#[derive(Debug, serde::Serialize)]
pub struct HealthReport {
    pub reachable: bool,
    pub latency_ms: f64,
    pub last_ok_secs_ago: Option<f64>,
    pub failing_for_secs: Option<f64>,
    pub error: Option<String>,
    /// Requests answered and failed since the store was opened.
    pub requests_answered: u64,
    pub requests_failed: u64,
}

impl Health {
    fn state(&self) -> parking_lot::MutexGuard<'_, HealthState> {
        self.state.lock()
    }

    pub fn answered(&self, latency: Duration) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state();
        st.last_ok = Some(SystemTime::now());
        st.latency = latency;
        if let Some((since, _)) = st.failing.take() {
            tracing::info!(
                "store reachable again after {:.1} s",
                since.elapsed().unwrap_or_default().as_secs_f64()
            );
        }
    }

    pub fn failed(&self, e: &dyn std::fmt::Display) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state();
        let since = st.failing.as_ref().map_or_else(SystemTime::now, |f| f.0);
        st.failing = Some((since, e.to_string()));
    }

    pub fn report(&self) -> HealthReport {
        let st = self.state().clone();
        let ago = |t: SystemTime| t.elapsed().unwrap_or_default().as_secs_f64();
        HealthReport {
            reachable: st.failing.is_none(),
            latency_ms: (st.latency.as_secs_f64() * 10_000.0).round() / 10.0,
            last_ok_secs_ago: st.last_ok.map(ago),
            failing_for_secs: st.failing.as_ref().map(|f| ago(f.0)),
            error: st.failing.map(|f| f.1),
            requests_answered: self.answered.load(Ordering::Relaxed),
            requests_failed: self.failed.load(Ordering::Relaxed),
        }
    }
}
