//! `forget`, `hold`, `release` and `retention set`: the decisions over a
//! dataset's lifecycle log (`repo/lifecycle.rs`). Which versions the rules
//! keep follows restic's `forget`: versions newest first, each rule keeps
//! the first version of each period it has not counted yet, until its
//! count is spent; the newest version, held versions and versions younger
//! than the minimum age are always kept. What is decided is appended onto
//! the very log it was decided on, so two hosts deciding at once cannot
//! both stand on a state one of them changed.

use crate::access::caller::Actor;
use crate::access::{Action, dataset_resource};
use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::repo::lifecycle::{Event, Lifecycle, Rules, Stored};
use crate::snapshot::Record;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// Why a version stays, or why it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub version: u64,
    pub time: String,
    /// The rules that keep it (empty: it expires).
    pub kept_by: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Newest first, as the rules walk them.
    pub verdicts: Vec<Verdict>,
    /// The rule the expiry is recorded under.
    pub rule: String,
}

impl Plan {
    /// As `forget --json` prints it and Python returns it.
    pub fn to_json(&self, dry_run: bool) -> serde_json::Value {
        let rows: Vec<_> = self
            .verdicts
            .iter()
            .map(|v| {
                serde_json::json!({
                    "version": v.version, "time": v.time,
                    "keep": !v.kept_by.is_empty(), "kept_by": v.kept_by,
                })
            })
            .collect();
        serde_json::json!({
            "dry_run": dry_run, "rule": self.rule, "versions": rows, "expired": self.expired(),
        })
    }

    pub fn expired(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .verdicts
            .iter()
            .filter(|v| v.kept_by.is_empty())
            .map(|v| v.version)
            .collect();
        v.sort_unstable();
        v
    }
}

fn unix(time: &str) -> i64 {
    humantime::parse_rfc3339(time)
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The periods of the bucket rules, named as `forget` prints them (UTC;
/// weeks are ISO weeks).
fn period(kind: &str, secs: i64) -> String {
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let (y, m, d) = (t.year(), u8::from(t.month()), t.day());
    match kind {
        "hourly" => format!("{y}-{m:02}-{d:02} {:02}h", t.hour()),
        "daily" => format!("{y}-{m:02}-{d:02}"),
        "weekly" => {
            let (wy, w, _) = t.to_iso_week_date();
            format!("{wy}-W{w:02}")
        }
        "monthly" => format!("{y}-{m:02}"),
        _ => format!("{y}"),
    }
}

/// What `rules` keep of `records` (the versions served, oldest first).
pub fn plan(
    records: &[Record],
    tags: &HashMap<u64, Vec<String>>,
    lc: &Lifecycle,
    now: SystemTime,
) -> Plan {
    let rules = &lc.rules;
    let mut buckets = [
        ("hourly", rules.keep_hourly, None::<String>),
        ("daily", rules.keep_daily, None),
        ("weekly", rules.keep_weekly, None),
        ("monthly", rules.keep_monthly, None),
        ("yearly", rules.keep_yearly, None),
    ];
    let newest = records.last().map_or(0, |r| unix(&r.time));
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let mut last = rules.keep_last;
    let mut verdicts = Vec::with_capacity(records.len());
    for (i, r) in records.iter().rev().enumerate() {
        let t = unix(&r.time);
        let mut why = Vec::new();
        if i == 0 {
            why.push("the newest".to_string());
        }
        if let Some(h) = lc.holds.get(&r.version) {
            why.push(format!("held ({})", h.reason));
        }
        if rules.min_age > 0
            && now.saturating_sub(t) < i64::try_from(rules.min_age).unwrap_or(i64::MAX)
        {
            why.push("younger than --min-age".into());
        }
        if last > 0 {
            last -= 1;
            why.push(format!("--keep-last {}", rules.keep_last));
        }
        for (kind, left, seen) in &mut buckets {
            let p = period(kind, t);
            if *left > 0 && seen.as_deref() != Some(p.as_str()) {
                *left -= 1;
                why.push(format!("{kind} {p}"));
                *seen = Some(p);
            }
        }
        if rules.keep_within > 0
            && newest.saturating_sub(t) <= i64::try_from(rules.keep_within).unwrap_or(i64::MAX)
        {
            why.push(format!(
                "--keep-within {}",
                humantime::format_duration(Duration::from_secs(rules.keep_within))
            ));
        }
        if rules.keep_tagged
            && let Some(names) = tags.get(&r.version)
        {
            why.push(format!("tagged {}", names.join(", ")));
        }
        if rules.keep_nothing() && why.is_empty() {
            why.push("no --keep rule set".into());
        }
        verdicts.push(Verdict {
            version: r.version,
            time: r.time.clone(),
            kept_by: why,
        });
    }
    Plan {
        verdicts,
        rule: format!("retention: {}", rules.describe()),
    }
}

/// A dataset's rules, holds and expired versions, as `retention show
/// --json` prints them and Python returns them.
pub fn state_json(dataset: &str, lc: &Lifecycle) -> serde_json::Value {
    let holds: Vec<_> = lc
        .holds
        .iter()
        .map(|(v, h)| {
            serde_json::json!({"version": v, "reason": h.reason, "author": h.author, "time": h.time})
        })
        .collect();
    let expired: Vec<_> = lc
        .expired
        .iter()
        .map(|(v, e)| {
            serde_json::json!({"version": v, "rule": e.rule, "author": e.author, "time": e.time})
        })
        .collect();
    serde_json::json!({"dataset": dataset, "rules": lc.rules, "holds": holds, "expired": expired})
}

/// `lc` with the store's S3 Object Lock as a floor under its minimum age
/// (objects locked that long cannot go sooner).
pub fn in_force(repo: &Repo, mut lc: Lifecycle) -> Lifecycle {
    if let Some(lock) = repo.store().object_lock() {
        lc.rules.min_age = lc.rules.min_age.max(lock.as_secs());
    }
    lc
}

/// Why version `r` may not be expired by name (the newest: `newest`) or
/// lose data to an erasure (`newest` None), if it may not.
pub(crate) fn protected(
    r: &Record,
    newest: Option<u64>,
    lc: &Lifecycle,
    now: SystemTime,
) -> Option<String> {
    if newest == Some(r.version) {
        return Some("it is the newest version (always kept)".into());
    }
    if let Some(h) = lc.holds.get(&r.version) {
        return Some(format!("it is held: {}", h.reason));
    }
    let age = humantime::parse_rfc3339(&r.time)
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .unwrap_or_default();
    (age < Duration::from_secs(lc.rules.min_age)).then(|| {
        format!(
            "it is younger than the minimum age of {}",
            humantime::format_duration(Duration::from_secs(lc.rules.min_age))
        )
    })
}

/// `forget NAME [VERSION…]`: the named versions expire (each refused if
/// it is the newest, held or younger than the minimum age: then nothing
/// expires), or, with none named, those the rules do not keep. Recorded
/// unless `dry_run`.
pub fn forget(
    repo: &Repo,
    dataset: &str,
    named: &[String],
    dry_run: bool,
    by: &Actor,
) -> Result<Plan> {
    repo.require(&by.who, Action::Forget, &dataset_resource(dataset))?;
    let log = repo.lifecycle_log(dataset)?;
    let lc = in_force(repo, Lifecycle::of(&log));
    let records = repo.sync_whole(dataset)?;
    let now = SystemTime::now();
    let plan = if named.is_empty() {
        let mut tags: HashMap<u64, Vec<String>> = HashMap::new();
        for t in repo.tags(dataset)? {
            tags.entry(t.version).or_default().push(t.tag);
        }
        plan(&records, &tags, &lc, now)
    } else {
        by_name(repo, dataset, named, &records, &lc, now)?
    };
    let expired = plan.expired();
    crate::hold::hold("forget-decided");
    if !dry_run && !expired.is_empty() {
        let event = Event::Expire {
            versions: expired,
            rule: plan.rule.clone(),
        };
        repo.append_lifecycle(dataset, &log, event, &by.name)?;
    }
    Ok(plan)
}

fn by_name(
    repo: &Repo,
    dataset: &str,
    named: &[String],
    records: &[Record],
    lc: &Lifecycle,
    now: SystemTime,
) -> Result<Plan> {
    let newest = records.last().map_or(0, |r| r.version);
    let mut doomed = Vec::new();
    for spec in named {
        let r = repo.version(dataset, spec)?;
        if let Some(why) = protected(&r, Some(newest), lc, now) {
            return Err(Error::InvalidInput(format!(
                "v{} of {dataset} cannot be expired: {why}; nothing was expired",
                r.version
            )));
        }
        doomed.push(r.version);
    }
    let verdicts = records
        .iter()
        .rev()
        .map(|r| Verdict {
            version: r.version,
            time: r.time.clone(),
            kept_by: if doomed.contains(&r.version) {
                vec![]
            } else {
                vec!["not named".into()]
            },
        })
        .collect();
    Ok(Plan {
        verdicts,
        rule: "named".into(),
    })
}

/// `retention set`: new rules in force. A locked minimum age is never
/// shortened nor unlocked: such an attempt is refused, and recorded.
pub fn set_rules(repo: &Repo, dataset: &str, rules: Rules, by: &Actor) -> Result<()> {
    repo.require(&by.who, Action::Retention, &dataset_resource(dataset))?;
    repo.check_dataset(dataset)?;
    let author = &by.name;
    let log = repo.lifecycle_log(dataset)?;
    let now = Lifecycle::of(&log).rules;
    if now.locked && (rules.min_age < now.min_age || !rules.locked) {
        let asked = format!("retention set {}", rules.describe());
        repo.append_lifecycle(dataset, &log, Event::Refused { asked }, author)?;
        return Err(Error::Forbidden(format!(
            "the minimum age of {dataset} is locked at {}: it can grow, never shrink or be unlocked (the attempt is recorded)",
            humantime::format_duration(Duration::from_secs(now.min_age))
        )));
    }
    repo.append_lifecycle(dataset, &log, Event::Retention { rules }, author)?;
    Ok(())
}

/// `hold NAME VERSION --reason`: the version is kept until released.
pub fn hold(repo: &Repo, dataset: &str, spec: &str, reason: &str, by: &Actor) -> Result<u64> {
    repo.require(&by.who, Action::Hold, &dataset_resource(dataset))?;
    let (log, version) = served(repo, dataset, spec)?;
    if Lifecycle::of(&log).holds.contains_key(&version) {
        return Err(Error::InvalidInput(format!(
            "v{version} of {dataset} is held already"
        )));
    }
    let event = Event::Hold {
        version,
        reason: reason.to_string(),
    };
    repo.append_lifecycle(dataset, &log, event, &by.name)?;
    Ok(version)
}

/// `release NAME VERSION --reason`: the hold ends.
pub fn release(repo: &Repo, dataset: &str, spec: &str, reason: &str, by: &Actor) -> Result<u64> {
    repo.require(&by.who, Action::Hold, &dataset_resource(dataset))?;
    let (log, version) = served(repo, dataset, spec)?;
    if !Lifecycle::of(&log).holds.contains_key(&version) {
        return Err(Error::InvalidInput(format!(
            "v{version} of {dataset} is not held"
        )));
    }
    let event = Event::Release {
        version,
        reason: reason.to_string(),
    };
    repo.append_lifecycle(dataset, &log, event, &by.name)?;
    Ok(version)
}

/// The log, read before the version is resolved, and the version `spec`
/// names among those served.
fn served(repo: &Repo, dataset: &str, spec: &str) -> Result<(Vec<Stored>, u64)> {
    let log = repo.lifecycle_log(dataset)?;
    let version = repo.version(dataset, spec)?.version;
    Ok((log, version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::lifecycle::Hold;
    use crate::store::pack::BlobRef;

    fn record(version: u64, secs: u64) -> Record {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        Record {
            format: 1,
            dataset: "d".into(),
            version,
            parent: None,
            tree: BlobRef {
                id: crate::id::BlobId::of(b"t"),
                pack: crate::id::PackId::of(b"p"),
                offset: 0,
                len: 1,
                size: 0,
            },
            time: humantime::format_rfc3339_seconds(t).to_string(),
            author: "a".into(),
            message: String::new(),
            stats: Default::default(),
        }
    }

    const DAY: u64 = 86_400;
    const T0: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z

    fn kept(plan: &Plan) -> Vec<u64> {
        let mut v: Vec<u64> = plan
            .verdicts
            .iter()
            .filter(|v| !v.kept_by.is_empty())
            .map(|v| v.version)
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn each_period_keeps_its_newest_version_as_restic_does() {
        // Two versions a day for ten days: v1, v2 on day 0, …
        let records: Vec<Record> = (0..20)
            .map(|i| record(i + 1, T0 + (i / 2) * DAY + (i % 2) * 3600))
            .collect();
        let mut lc = Lifecycle::default();
        lc.rules.keep_daily = 3;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 100 * DAY);
        let p = plan(&records, &HashMap::new(), &lc, now);
        // The newest of each of the last three days.
        assert_eq!(kept(&p), vec![16, 18, 20]);
        lc.rules.keep_last = 4;
        let p = plan(&records, &HashMap::new(), &lc, now);
        assert_eq!(kept(&p), vec![16, 17, 18, 19, 20]);
    }

    #[test]
    fn the_newest_held_young_and_tagged_versions_stay() {
        let records: Vec<Record> = (0..10).map(|i| record(i + 1, T0 + i * DAY)).collect();
        let mut lc = Lifecycle::default();
        lc.rules.keep_last = 1;
        lc.rules.keep_tagged = true;
        lc.rules.min_age = 2 * DAY;
        lc.holds.insert(
            3,
            Hold {
                reason: "case 7".into(),
                author: "a".into(),
                time: String::new(),
            },
        );
        let tags = HashMap::from([(5, vec!["q1".to_string()])]);
        // Now is an hour after v10: v9 and v10 are younger than two days.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 9 * DAY + 3600);
        let p = plan(&records, &tags, &lc, now);
        assert_eq!(kept(&p), vec![3, 5, 9, 10]);
        assert_eq!(p.expired(), vec![1, 2, 4, 6, 7, 8]);
    }

    #[test]
    fn no_keep_rule_expires_nothing_and_within_counts_from_the_newest() {
        let records: Vec<Record> = (0..5).map(|i| record(i + 1, T0 + i * DAY)).collect();
        let mut lc = Lifecycle::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 1000 * DAY);
        assert!(
            plan(&records, &HashMap::new(), &lc, now)
                .expired()
                .is_empty()
        );
        lc.rules.keep_within = 2 * DAY;
        assert_eq!(
            plan(&records, &HashMap::new(), &lc, now).expired(),
            vec![1, 2]
        );
    }

    #[test]
    fn weeks_are_iso_weeks() {
        // 2027-01-01 is a Friday of ISO week 2026-W53.
        assert_eq!(period("weekly", 1_798_761_600), "2026-W53");
        assert_eq!(period("hourly", 1_798_761_600 + 3 * 3600), "2027-01-01 03h");
    }
}
