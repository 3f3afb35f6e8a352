//! How long an unreachable object may be young: the time windows that gc
//! and commits on other hosts of one store keep, so gc never deletes what
//! a commit in flight will reference.

use std::time::Duration;

/// A commit whose first upload is older than this (counting the time its
/// record create may still retry) gives up before its commit point, so gc
/// with a grace at least this long never deletes objects of a commit that
/// then lands.
pub const MAX_COMMIT_AGE: Duration = Duration::from_secs(12 * 3600);

/// The shortest grace gc accepts: `MAX_COMMIT_AGE` plus an hour for clocks
/// of hosts and store that disagree. (The crash tests sweep debris at
/// once: `DETAFS_TEST_GC_MIN_GRACE`.)
pub fn min_grace() -> Duration {
    let grace = MAX_COMMIT_AGE + Duration::from_secs(3600);
    crate::hold::test_duration("DETAFS_TEST_GC_MIN_GRACE", grace)
}
