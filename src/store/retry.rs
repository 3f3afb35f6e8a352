//! Riding out transient store failures: each request is retried with
//! exponential backoff and jitter until a deadline, and the store's recent
//! answers are remembered for `.detafs/health`. `Store::call` applies it
//! around whole operations (a GET and the reading of its body, a listing
//! drained whole). (A wrapper of `ObjectStore`'s calls instead
//! would have to resume a body that fails midway with ranged requests of
//! its own, as object_store's HTTP client does: not built yet.)

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

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
pub fn backoff(attempt: u32) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1 << attempt.min(16))
        .min(MAX_BACKOFF);
    base.mul_f64(rand::random_range(0.5..=1.0))
}

/// Time left under which a failed operation is not tried again: too short
/// for a request to be answered.
pub const LAST_TRY: Duration = Duration::from_millis(100);

/// The error for an operation that ran out of time, naming the store's last
/// answer if it gave one.
pub fn deadline_exceeded(
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
}
