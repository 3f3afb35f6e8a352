//! `.detafs/health`: the mount's state across its namespaces, from what
//! it knows now (never a wait on the store).

use super::{Judge, MountFs};

/// From what the store answered lately (the poll asks it every few
/// seconds), so reading health never waits on an unreachable store.
/// `.detafs/health`; under a policy, as `judge`'s caller sees the dataset
/// (the versions it may see, counted).
pub(super) fn report(fs: &MountFs, judge: Option<&Judge>) -> Vec<u8> {
    let store = fs.repo.health();
    let versions = fs.versions.records.read();
    let seen = match judge {
        Some(j) => versions
            .iter()
            .filter(|r| j.sees_version(r.version))
            .count(),
        None => versions.len(),
    };
    drop(versions);
    let body = serde_json::json!({
        "status": match (fs.repo.store().is_gone(), store.reachable) {
            (true, _) => "gone",
            (false, true) if fs.repo.damage(&fs.dataset).is_some() => "damaged",
            (false, true) => "ok",
            (false, false) => "degraded",
        },
        "store_gone": fs.repo.store().is_gone(),
        "store": fs.repo.location(),
        "store_reachable": store.reachable,
        "store_error": store.error,
        "store_failing_for_secs": store.failing_for_secs,
        "store_last_ok_secs_ago": store.last_ok_secs_ago,
        "store_latency_ms": store.latency_ms,
        "dataset": fs.dataset,
        // The daemon's process (`detafs umount` waits for it to end).
        "pid": std::process::id(),
        "log": fs.opts.log,
        "versions": seen,
        // The first version record that did not check out (none after it
        // is served): `detafs verify` tells more.
        "damaged": fs.repo.damage(&fs.dataset).map(|d| format!("v{}: {}", d.version, d.why)),
        "version_inodes": fs.versions.version_inodes(),
        // What the daemon keeps in memory, within one budget (`--cache-memory`).
        "memory": fs.repo.budget().report(),
        // Access decisions not yet in the audit trail's file.
        "trail_unwritten": fs.trail_unwritten(),
        "cache_bytes": fs.repo.disk().used_bytes(),
        "staging": fs.staging.present(),
        // What restores and checkouts replaced, kept for `--undo`.
        "trash": fs.staging.trash(),
        // Whether the kernel opens files without asking (read-only, no policy).
        "opens_skipped": fs.opens_skipped(),
        // Whether versions/ has a kernel connection of its own (read-write
        // mounts without a policy), where the kernel opens its files itself.
        "versions_connection": if fs.versions_apart() { "own" } else { "shared" },
        // Whether staged files' reads and writes go straight to their
        // copies (FUSE passthrough) or through the daemon.
        "staged_io": fs.staged_io(),
        // Where packs this mount read came from besides the store, if any
        // (`detafs verify` counts what lives where).
        "cold_tier": fs.repo().store().cold_known(),
        // Requests the kernel sent so far, by kind (all connections).
        "requests": fs.requests().to_json(),
        "policy": fs.policy_in_force(),
        // The version staging is built on (what `.detafs/status` compares with).
        "staging_version": fs.staging.base_now(),
    });
    let mut v = serde_json::to_vec_pretty(&body).expect("serializable");
    v.push(b'\n');
    v
}
