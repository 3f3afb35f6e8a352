//! `report`: a dataset's whole compliance state in one answer, for an
//! auditor: what is kept and under which rules and holds, what was expired
//! and erased, by whom, when and why, where the data lives, whether the
//! chains hold, and who may read each version under the policy in force.
//! The CLI prints it and the gateway serves it (`GET /datasets/NAME/report`):
//! both are this function's answer.

use crate::access::policy::Who;
use crate::access::{Action, version_resources};
use crate::error::Result;
use crate::repo::Repo;
use crate::repo::lifecycle::Event;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The report of `dataset`. It tells the policy's decisions and every
/// erased path: callers check `dataset:admin` on the dataset first (the
/// CLI for its user, the gateway for its caller).
pub fn report(repo: &Repo, dataset: &str) -> Result<Value> {
    repo.check_dataset(dataset)?;
    let history = crate::audit::history(repo, dataset)?;
    let log = repo.lifecycle_audit(dataset)?;
    let lc = repo.lifecycle(dataset)?;
    let policy = repo.current_policy()?;
    let mut tags: HashMap<u64, Vec<String>> = HashMap::new();
    for t in &history.tags {
        tags.entry(t.version).or_default().push(t.tag.clone());
    }
    let mut erased: HashMap<u64, Vec<String>> = HashMap::new();
    let mut erasures = Vec::new();
    let mut problems: Vec<String> = history.problems.iter().map(ToString::to_string).collect();
    for (seq, _, entry) in &log {
        match entry {
            Ok(e) => {
                if let Event::Erase {
                    path,
                    versions,
                    reason,
                    sweep,
                    ..
                } = &e.event
                {
                    for v in versions {
                        erased.entry(*v).or_default().push(path.clone());
                    }
                    erasures.push(json!({
                        "time": e.time, "author": e.author, "path": path,
                        "versions": versions, "reason": reason, "blobs_zeroed": sweep.len(),
                    }));
                }
            }
            Err(err) => problems.push(format!("lifecycle entry {seq}: {err}")),
        }
    }
    let leased = repo.lease_holders(dataset)?;
    let versions: Vec<Value> = history
        .versions
        .iter()
        .filter_map(|v| v.record.as_ref().map(|r| (v, r)))
        .map(|(v, r)| {
            let names = tags.get(&v.version).cloned().unwrap_or_default();
            let readers: Option<Vec<String>> = policy.as_ref().map(|(_, p)| {
                let aliases = version_resources(dataset, v.version, &names);
                p.principals()
                    .into_iter()
                    .filter(|who| {
                        let who = Who {
                            principals: vec![who.clone()],
                        };
                        p.decide(&who, Action::Read, &aliases).allowed
                    })
                    .collect()
            });
            json!({
                "version": v.version, "time": r.time, "author": r.author, "message": r.message,
                "tags": names, "chained": v.chained,
                "state": if lc.is_expired(v.version) { "expired" } else { "kept" },
                "expired": lc.expired.get(&v.version).map(|e| json!({"time": e.time, "author": e.author, "rule": e.rule})),
                "held": lc.holds.get(&v.version).map(|h| json!({"time": h.time, "author": h.author, "reason": h.reason})),
                "erased_paths": erased.get(&v.version).cloned().unwrap_or_default(),
                // None: no policy, so every user the store's permissions let in.
                "readers": readers,
                // Staging areas and open files that stand on it (its data
                // stays, and the holder reads it, expired or not).
                "leased_by": leased.get(&v.version).cloned().unwrap_or_default(),
            })
        })
        .collect();
    let entries: Vec<Value> = log
        .iter()
        .filter_map(|(seq, hash, e)| {
            let e = e.as_ref().ok()?;
            Some(json!({"seq": seq, "time": e.time, "author": e.author, "event": e.event, "hash": hash.to_hex()}))
        })
        .collect();
    Ok(json!({
        "dataset": dataset,
        "generated": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "chain_ok": problems.is_empty(),
        "problems": problems,
        "rules": lc.rules,
        "rules_text": lc.rules.describe(),
        "holds": crate::retention::state_json(dataset, &lc)["holds"],
        "versions": versions,
        "erasures": erasures,
        "lifecycle": entries,
        "locations": locations(repo)?,
        "policy_version": policy.as_ref().map(|(v, _)| v),
    }))
}

/// Where the data lives: the store, and its colder tier if it names one
/// (`detafs verify` counts what each holds).
fn locations(repo: &Repo) -> Result<Vec<Value>> {
    let mut out = vec![json!({"tier": "store", "url": repo.location()})];
    if let Some(cold) = repo.store().cold_url()? {
        out.push(json!({"tier": "cold", "url": cold}));
    }
    Ok(out)
}
