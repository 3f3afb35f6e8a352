//! `detafs retention`, `forget`, `hold`, `release`: a dataset's lifecycle
//! (`detafs::retention` decides, this prints).

use super::{mount, policy};
use clap::Subcommand;
use detafs::access::caller::Actor;
use detafs::access::{Action, dataset_resource};
use detafs::escape::line;
use detafs::repo::Repo;
use detafs::repo::lifecycle::{Event, Rules, Stored};
use detafs::retention::{self, Plan};
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
    /// Print the rules in force and the holds.
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
    /// expired, holds and releases, refusals (hash-chained in the store).
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

pub fn retention_cmd(repo: &Repo, cmd: RetentionCmd) -> anyhow::Result<()> {
    match cmd {
        RetentionCmd::Set { name, rules } => {
            let rules = rules.rules();
            retention::set_rules(repo, &name, rules.clone(), &Actor::current())?;
            println!("{name}: {}", rules.describe());
            Ok(())
        }
        RetentionCmd::Show { name, json } => show(repo, &name, json),
        RetentionCmd::Log { name, json } => log(repo, &name, json),
    }
}

fn show(repo: &Repo, name: &str, json: bool) -> anyhow::Result<()> {
    policy::require(repo, Action::Versions, &dataset_resource(name))?;
    repo.check_dataset(name)?;
    let lc = repo.lifecycle(name)?;
    if json {
        let out = retention::state_json(name, &lc);
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("rules: {}", lc.rules.describe());
    for (v, h) in &lc.holds {
        println!(
            "held: v{v} since {} by {}: {}",
            h.time,
            line(h.author.as_bytes()),
            line(h.reason.as_bytes())
        );
    }
    println!("expired: {} versions", lc.expired.len());
    Ok(())
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
        .map(|(a, b)| {
            if a == b {
                format!("v{a}")
            } else {
                format!("v{a}..v{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn log(repo: &Repo, name: &str, json: bool) -> anyhow::Result<()> {
    policy::require(repo, Action::Versions, &dataset_resource(name))?;
    repo.check_dataset(name)?;
    let entries: Vec<Stored> = repo.lifecycle_log(name)?;
    if json {
        let rows: Vec<_> = entries
            .iter()
            .rev()
            .map(|s| {
                let mut v = serde_json::to_value(&s.entry).expect("serializable");
                v["hash"] = serde_json::json!(s.hash.to_hex());
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for s in entries.iter().rev() {
        let e = &s.entry;
        println!(
            "{:>4}  {}  {:<12} {}",
            e.seq,
            e.time,
            line(e.author.as_bytes()),
            describe(&e.event)
        );
    }
    Ok(())
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

/// `forget NAME [VERSION…] [--dry-run]`.
pub fn forget(repo: &Repo, staging: &Path, args: &ForgetArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let plan = retention::forget(repo, name, &args.versions, args.dry_run, &Actor::current())?;
    if !args.dry_run && !plan.expired().is_empty() {
        mount::tell_mount(repo, staging, name);
    }
    print_plan(&plan, args)
}

fn print_plan(plan: &Plan, args: &ForgetArgs) -> anyhow::Result<()> {
    let dry_run = args.dry_run;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan.to_json(dry_run))?);
        return Ok(());
    }
    for v in &plan.verdicts {
        match v.kept_by.is_empty() {
            true => println!("expire v{}  {}", v.version, v.time),
            false => println!(
                "keep   v{}  {}  {}",
                v.version,
                v.time,
                line(v.kept_by.join("; ").as_bytes())
            ),
        }
    }
    let expired = plan.expired();
    let did = if dry_run { "would expire" } else { "expired" };
    eprintln!(
        "{did} {} versions{}",
        expired.len(),
        if expired.is_empty() {
            String::new()
        } else {
            format!(": {}", versions_text(&expired))
        }
    );
    Ok(())
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

/// `hold NAME VERSION --reason R`, or `hold NAME` to list the holds.
pub fn hold(repo: &Repo, args: &HoldArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let (Some(version), Some(reason)) = (&args.version, &args.reason) else {
        policy::require(repo, Action::Versions, &dataset_resource(name))?;
        repo.check_dataset(name)?;
        for (v, h) in repo.lifecycle(name)?.holds {
            let (author, reason) = (line(h.author.as_bytes()), line(h.reason.as_bytes()));
            println!("v{v}  {}  {author}  {reason}", h.time);
        }
        return Ok(());
    };
    let v = retention::hold(repo, name, version, reason, &Actor::current())?;
    println!("held v{v}");
    Ok(())
}

/// `release NAME VERSION --reason R`.
pub fn release(repo: &Repo, args: &ReleaseArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let v = retention::release(repo, name, &args.version, &args.reason, &Actor::current())?;
    println!("released v{v}");
    Ok(())
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

/// `erase NAME PATH [--from VERSION] --reason R`.
pub fn erase(repo: &Repo, staging: &Path, args: &EraseArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let path = detafs::relpath::RelPath::parse(args.path.as_bytes())?;
    let req = detafs::erase::Request {
        dataset: name,
        path: &path,
        from: args.from.as_deref(),
        reason: &args.reason,
        dry_run: args.dry_run,
    };
    let done = detafs::erase::erase(repo, &req, &Actor::current())?;
    let shown = line(args.path.as_bytes());
    let versions = versions_text(&done.versions);
    if args.dry_run {
        println!("would erase {shown} ({} files) from {versions}", done.files);
        return Ok(());
    }
    mount::tell_mount(repo, staging, name);
    println!(
        "erased {shown} ({} files) from {versions}: {} blobs, {} bytes zeroed in the store",
        done.files, done.blobs, done.bytes
    );
    Ok(())
}
