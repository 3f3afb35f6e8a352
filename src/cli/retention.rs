//! `detafs retention`, `forget`, `hold`, `release`, `erase`, `report`: a
//! dataset's lifecycle, on a store (`detafs::retention`, `erase`, `report`
//! decide) or through a gateway (which asks the same of them): both give
//! the same JSON, which one set of printers shows.

use super::{mount, policy};
use anyhow::Context;
use clap::Subcommand;
use detafs::access::caller::Actor;
use detafs::access::{Action, dataset_resource};
use detafs::escape::line;
use detafs::remote::Gateway;
use detafs::repo::Repo;
use detafs::repo::lifecycle::{Event, Rules};
use detafs::retention;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

#[derive(Subcommand)]
pub enum RetentionCmd {
    /// Set the rules `forget` applies (restic's vocabulary); the newest
    /// version is always kept, and so are held versions.
    #[command(
        after_help = "Examples:\n  detafs retention set weather --keep-last 10 --keep-daily 7 --keep-monthly 12\n  detafs retention set weather --keep-within 90d --min-age 30d --lock\nExit codes: 0 set, 1 error, 5 denied (needs dataset:retention; a locked minimum age shortened)."
    )]
    Set {
        /// Dataset name.
        name: String,
        #[command(flatten)]
        rules: RuleArgs,
    },
    /// Print the rules in force, the holds and the expired versions.
    #[command(
        after_help = "Example: detafs retention show weather --json\nExit codes: 0, 1 error."
    )]
    Show {
        name: String,
        /// One JSON object: rules, holds, expired versions.
        #[arg(long)]
        json: bool,
    },
    /// The dataset's lifecycle log, newest first: rules set, versions
    /// expired, holds and releases, erasures, refusals (hash-chained in
    /// the store).
    #[command(after_help = "Example: detafs retention log weather\nExit codes: 0, 1 error.")]
    Log {
        name: String,
        /// One JSON array of the entries as stored, with their hashes.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub struct RuleArgs {
    /// Keep the N newest versions.
    #[arg(long, default_value_t = 0)]
    keep_last: u32,
    /// Keep the newest version of each of the last N hours that have one.
    #[arg(long, default_value_t = 0)]
    keep_hourly: u32,
    /// ... of each of the last N days (UTC).
    #[arg(long, default_value_t = 0)]
    keep_daily: u32,
    /// ... of each of the last N ISO weeks.
    #[arg(long, default_value_t = 0)]
    keep_weekly: u32,
    /// ... of each of the last N months.
    #[arg(long, default_value_t = 0)]
    keep_monthly: u32,
    /// ... of each of the last N years.
    #[arg(long, default_value_t = 0)]
    keep_yearly: u32,
    /// Keep every version committed within this span of the newest, e.g. 90d.
    #[arg(long)]
    keep_within: Option<humantime::Duration>,
    /// Keep every tagged version.
    #[arg(long)]
    keep_tagged: bool,
    /// Never expire (or erase from) a version younger than this, e.g. 30d.
    #[arg(long)]
    min_age: Option<humantime::Duration>,
    /// Lock the minimum age: from now on it can grow, never shrink.
    #[arg(long, requires = "min_age")]
    lock: bool,
}

impl RuleArgs {
    fn rules(&self) -> Rules {
        let secs = |d: Option<humantime::Duration>| d.map_or(0, |d| Duration::from(d).as_secs());
        Rules {
            keep_last: self.keep_last,
            keep_hourly: self.keep_hourly,
            keep_daily: self.keep_daily,
            keep_weekly: self.keep_weekly,
            keep_monthly: self.keep_monthly,
            keep_yearly: self.keep_yearly,
            keep_within: secs(self.keep_within),
            keep_tagged: self.keep_tagged,
            min_age: secs(self.min_age),
            locked: self.lock,
        }
    }
}

#[derive(clap::Args)]
pub struct ForgetArgs {
    /// Dataset name.
    name: String,
    /// Versions to expire (v3, 3, a tag); none: apply the rules.
    versions: Vec<String>,
    /// Print what would be kept (and why) and expired; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object: each version, kept or not and by which rules.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct HoldArgs {
    /// Dataset name.
    name: String,
    /// The version to hold (none: list the holds).
    #[arg(requires = "reason")]
    version: Option<String>,
    /// Why, kept on record.
    #[arg(long)]
    reason: Option<String>,
}

#[derive(clap::Args)]
pub struct ReleaseArgs {
    /// Dataset name.
    name: String,
    version: String,
    /// Why, kept on record.
    #[arg(long)]
    reason: String,
}

#[derive(clap::Args)]
pub struct EraseArgs {
    /// Dataset name.
    name: String,
    /// The file or folder whose bytes go (every file under a folder).
    path: String,
    /// Only from this version on (v3, a tag); default: every version.
    #[arg(long)]
    from: Option<String>,
    /// Why, kept on record (the audit shows it).
    #[arg(long)]
    reason: String,
    /// Print the versions it would touch; change nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Dataset name.
    name: String,
    /// The whole report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Where the lifecycle is asked: the store (with this host's staging, told
/// of what changed), or a gateway.
pub enum On<'a> {
    Store(&'a Repo, &'a Path),
    Gateway(&'a Gateway),
}

impl On<'_> {
    fn state(&self, name: &str) -> anyhow::Result<Value> {
        match self {
            On::Store(repo, _) => {
                policy::require(repo, Action::Versions, &dataset_resource(name))?;
                repo.check_dataset(name)?;
                Ok(retention::state_json(name, &repo.lifecycle(name)?))
            }
            On::Gateway(g) => Ok(g.get_of(name, "retention")?),
        }
    }

    fn set_rules(&self, name: &str, rules: Rules) -> anyhow::Result<()> {
        match self {
            On::Store(repo, _) => retention::set_rules(repo, name, rules, &Actor::current())?,
            On::Gateway(g) => {
                g.send_to(name, "retention", &serde_json::to_value(rules)?, true)?;
            }
        }
        Ok(())
    }

    fn forget(&self, a: &ForgetArgs) -> anyhow::Result<Value> {
        match self {
            On::Store(repo, staging) => {
                let plan =
                    retention::forget(repo, &a.name, &a.versions, a.dry_run, &Actor::current())?;
                if !a.dry_run && !plan.expired().is_empty() {
                    mount::tell_mount(repo, staging, &a.name);
                }
                Ok(plan.to_json(a.dry_run))
            }
            On::Gateway(g) => {
                let body = json!({"versions": a.versions, "dry_run": a.dry_run});
                Ok(g.send_to(&a.name, "forget", &body, false)?)
            }
        }
    }

    fn hold(&self, name: &str, version: &str, reason: &str, release: bool) -> anyhow::Result<u64> {
        match self {
            On::Store(repo, _) => {
                let by = Actor::current();
                Ok(match release {
                    true => retention::release(repo, name, version, reason, &by)?,
                    false => retention::hold(repo, name, version, reason, &by)?,
                })
            }
            On::Gateway(g) => {
                let what = if release { "releases" } else { "holds" };
                let body = json!({"version": version, "reason": reason});
                let answer = g.send_to(name, what, &body, false)?;
                answer["version"]
                    .as_u64()
                    .context("the gateway's answer names no version")
            }
        }
    }

    fn erase(&self, a: &EraseArgs) -> anyhow::Result<Value> {
        match self {
            On::Store(repo, staging) => {
                let path = detafs::relpath::RelPath::parse(a.path.as_bytes())?;
                let req = detafs::erase::Request {
                    dataset: &a.name,
                    path: &path,
                    from: a.from.as_deref(),
                    reason: &a.reason,
                    dry_run: a.dry_run,
                };
                let done = detafs::erase::erase(repo, &req, &Actor::current())?;
                if !a.dry_run {
                    mount::tell_mount(repo, staging, &a.name);
                }
                Ok(done.to_json())
            }
            On::Gateway(g) => {
                let body = json!({"path": a.path, "reason": a.reason, "from": a.from, "dry_run": a.dry_run});
                Ok(g.send_to(&a.name, "erase", &body, false)?)
            }
        }
    }

    fn report(&self, name: &str) -> anyhow::Result<Value> {
        match self {
            On::Store(repo, _) => {
                policy::require(repo, Action::Admin, &dataset_resource(name))?;
                Ok(detafs::report::report(repo, name)?)
            }
            On::Gateway(g) => Ok(g.get_of(name, "report")?),
        }
    }
}

pub fn retention_cmd(on: &On<'_>, cmd: RetentionCmd) -> anyhow::Result<()> {
    match cmd {
        RetentionCmd::Set { name, rules } => {
            let rules = rules.rules();
            on.set_rules(&name, rules.clone())?;
            println!("{name}: {}", rules.describe());
            Ok(())
        }
        RetentionCmd::Show { name, json } => show(&on.state(&name)?, json),
        RetentionCmd::Log { name, json } => match on {
            On::Store(repo, _) => log(repo, &name, json),
            // Through a gateway, the log is the report's.
            On::Gateway(_) => {
                let entries = on.report(&name)?["lifecycle"].clone();
                print_log(&entries, json)
            }
        },
    }
}

fn show(state: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(state)?);
        return Ok(());
    }
    let rules: Rules = serde_json::from_value(state["rules"].clone()).unwrap_or_default();
    println!("rules: {}", rules.describe());
    for h in state["holds"].as_array().into_iter().flatten() {
        println!(
            "held: v{} since {} by {}: {}",
            h["version"],
            text(&h["time"]),
            text(&h["author"]),
            text(&h["reason"])
        );
    }
    let expired = state["expired"].as_array().map_or(0, Vec::len);
    println!("expired: {expired} versions");
    Ok(())
}

/// A string field, escaped to one line.
fn text(v: &Value) -> String {
    line(v.as_str().unwrap_or("").as_bytes()).into_owned()
}

/// One entry as `retention log` and `audit` print it.
pub fn describe(e: &Event) -> String {
    let esc = |s: &str| line(s.as_bytes()).into_owned();
    match e {
        Event::Retention { rules } => format!("rules set: {}", rules.describe()),
        Event::Expire { versions, rule } => {
            format!("expired {} ({})", versions_text(versions), esc(rule))
        }
        Event::Hold { version, reason } => format!("held v{version}: {}", esc(reason)),
        Event::Release { version, reason } => format!("released v{version}: {}", esc(reason)),
        Event::Refused { asked } => format!("refused: {}", esc(asked)),
        Event::Erase {
            path,
            versions,
            reason,
            sweep,
            ..
        } => format!(
            "erased {} from {} ({} blobs zeroed): {}",
            esc(path),
            versions_text(versions),
            sweep.len(),
            esc(reason)
        ),
    }
}

/// `v1, v3..v5`: runs of numbers shortened.
pub fn versions_text(versions: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &v in versions {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == v => *end = v,
            _ => runs.push((v, v)),
        }
    }
    runs.iter()
        .map(|(a, b)| match a == b {
            true => format!("v{a}"),
            false => format!("v{a}..v{b}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn log(repo: &Repo, name: &str, json: bool) -> anyhow::Result<()> {
    policy::require(repo, Action::Versions, &dataset_resource(name))?;
    repo.check_dataset(name)?;
    let entries: Vec<Value> = repo
        .lifecycle_log(name)?
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(&s.entry).expect("serializable");
            v["hash"] = json!(s.hash.to_hex());
            v
        })
        .collect();
    print_log(&Value::Array(entries), json)
}

/// The log's entries (oldest first), newest first.
fn print_log(entries: &Value, json: bool) -> anyhow::Result<()> {
    let mut rows: Vec<Value> = entries.as_array().cloned().unwrap_or_default();
    rows.reverse();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for e in &rows {
        let what = serde_json::from_value::<Event>(e["event"].clone()).map_or_else(
            |_| "(an entry this version does not know)".into(),
            |ev| describe(&ev),
        );
        println!(
            "{:>4}  {}  {:<12} {what}",
            e["seq"],
            text(&e["time"]),
            text(&e["author"])
        );
    }
    Ok(())
}

/// `forget NAME [VERSION…] [--dry-run]`.
pub fn forget(on: &On<'_>, args: &ForgetArgs) -> anyhow::Result<()> {
    let plan = on.forget(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(());
    }
    for v in plan["versions"].as_array().into_iter().flatten() {
        let kept_by: Vec<String> = v["kept_by"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        match kept_by.is_empty() {
            true => println!("expire v{}  {}", v["version"], text(&v["time"])),
            false => println!(
                "keep   v{}  {}  {}",
                v["version"],
                text(&v["time"]),
                kept_by.join("; ")
            ),
        }
    }
    let expired: Vec<u64> = serde_json::from_value(plan["expired"].clone()).unwrap_or_default();
    let did = if args.dry_run {
        "would expire"
    } else {
        "expired"
    };
    let which = match expired.is_empty() {
        true => String::new(),
        false => format!(": {}", versions_text(&expired)),
    };
    eprintln!("{did} {} versions{which}", expired.len());
    Ok(())
}

/// `hold NAME VERSION --reason R`, or `hold NAME` to list the holds.
pub fn hold(on: &On<'_>, args: &HoldArgs) -> anyhow::Result<()> {
    let (Some(version), Some(reason)) = (&args.version, &args.reason) else {
        let state = on.state(&args.name)?;
        for h in state["holds"].as_array().into_iter().flatten() {
            let (time, author, reason) = (text(&h["time"]), text(&h["author"]), text(&h["reason"]));
            println!("v{}  {time}  {author}  {reason}", h["version"]);
        }
        return Ok(());
    };
    let v = on.hold(&args.name, version, reason, false)?;
    println!("held v{v}");
    Ok(())
}

/// `release NAME VERSION --reason R`.
pub fn release(on: &On<'_>, args: &ReleaseArgs) -> anyhow::Result<()> {
    let v = on.hold(&args.name, &args.version, &args.reason, true)?;
    println!("released v{v}");
    Ok(())
}

/// `erase NAME PATH [--from VERSION] --reason R`.
pub fn erase(on: &On<'_>, args: &EraseArgs) -> anyhow::Result<()> {
    let done = on.erase(args)?;
    let versions: Vec<u64> = serde_json::from_value(done["versions"].clone()).unwrap_or_default();
    let (shown, versions) = (line(args.path.as_bytes()), versions_text(&versions));
    if args.dry_run {
        println!(
            "would erase {shown} ({} files) from {versions}",
            done["files"]
        );
        return Ok(());
    }
    println!(
        "erased {shown} ({} files) from {versions}: {} blobs, {} bytes zeroed in the store",
        done["files"], done["blobs"], done["bytes"]
    );
    Ok(())
}

/// `report NAME [--json]`: for an auditor.
pub fn report(on: &On<'_>, args: &ReportArgs) -> anyhow::Result<()> {
    let r = on.report(&args.name)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let chain = match r["chain_ok"].as_bool() {
        Some(true) => "intact".to_string(),
        _ => format!("BROKEN: {}", r["problems"]),
    };
    println!(
        "dataset {}: report of {}",
        text(&r["dataset"]),
        text(&r["generated"])
    );
    println!("history chain: {chain}");
    println!("rules: {}", text(&r["rules_text"]));
    for l in r["locations"].as_array().into_iter().flatten() {
        println!("data: {} at {}", text(&l["tier"]), text(&l["url"]));
    }
    for v in r["versions"].as_array().into_iter().flatten() {
        let mut notes = Vec::new();
        if let Some(h) = v["held"].as_object() {
            notes.push(format!("held: {}", text(&h["reason"])));
        }
        if let Some(e) = v["expired"].as_object() {
            notes.push(format!(
                "expired {} by {}: {}",
                text(&e["time"]),
                text(&e["author"]),
                text(&e["rule"])
            ));
        }
        for p in v["erased_paths"].as_array().into_iter().flatten() {
            notes.push(format!("erased {}", text(p)));
        }
        let leased: Vec<String> = v["leased_by"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        if !leased.is_empty() {
            notes.push(format!("staged on or open by: {}", leased.join(", ")));
        }
        let readers = match v["readers"].as_array() {
            Some(rs) => rs.iter().map(text).collect::<Vec<_>>().join(" "),
            None => "(no policy: whoever the store lets in)".into(),
        };
        println!(
            "v{:<5} {:<8} {}  {}  readers: {readers}{}",
            v["version"],
            text(&v["state"]),
            text(&v["time"]),
            text(&v["author"]),
            notes.iter().map(|n| format!("; {n}")).collect::<String>()
        );
    }
    for e in r["erasures"].as_array().into_iter().flatten() {
        println!(
            "erasure {} by {}: {} from {} ({} blobs zeroed): {}",
            text(&e["time"]),
            text(&e["author"]),
            text(&e["path"]),
            e["versions"],
            e["blobs_zeroed"],
            text(&e["reason"])
        );
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct TierArgs {
    /// Dataset name.
    name: String,
    /// Versions at least this old go to the colder tier, e.g. 90d...
    #[arg(long)]
    older_than: humantime::Duration,
    /// ...unless among the newest N (the newest always stays).
    #[arg(long, default_value_t = 1)]
    keep_last: usize,
    /// The store's colder tier (a path, file://, s3://, gs://, az://),
    /// recorded in the store the first time; then every host finds it.
    #[arg(long)]
    cold_store: Option<String>,
    /// On S3, a storage class instead (STANDARD_IA, GLACIER_IR, ...): the
    /// packs are rewritten in it, in place; recorded as --cold-store is.
    #[arg(long, conflicts_with = "cold_store")]
    cold_class: Option<String>,
    /// Print what would move; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object: versions, packs, bytes.
    #[arg(long)]
    json: bool,
}

/// `tier NAME --older-than D [--keep-last N] [--cold-store URL]`.
pub fn tier(repo: &Repo, args: &TierArgs) -> anyhow::Result<()> {
    if args.cold_store.is_some() || args.cold_class.is_some() {
        policy::require(repo, Action::Retention, &dataset_resource(&args.name))?;
    }
    if let Some(url) = &args.cold_store {
        repo.store().set_cold(url)?;
    }
    if let Some(class) = &args.cold_class {
        repo.store().set_cold_class(class)?;
    }
    let req = detafs::tiering::Request {
        dataset: &args.name,
        older_than: args.older_than.into(),
        keep_last: args.keep_last,
        dry_run: args.dry_run,
    };
    let pb = super::bar(0, "tier");
    let moved = detafs::tiering::tier(repo, &req, &Actor::current(), &pb);
    drop(pb);
    let moved = moved?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&moved.to_json())?);
        return Ok(());
    }
    let did = if args.dry_run { "would move" } else { "moved" };
    println!(
        "{did} {} packs ({} bytes) of {} to the colder tier",
        moved.packs,
        moved.bytes,
        match moved.versions.is_empty() {
            true => "no version".to_string(),
            false => versions_text(&moved.versions),
        }
    );
    Ok(())
}
