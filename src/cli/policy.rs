//! `detafs policy`: show, set, log and check the store's access policy.

use anyhow::{Context, bail};
use detafs::access::{Action, caller};
use detafs::repo::Repo;
use detafs::repo::policies::Stored;
use std::path::Path;

pub fn show(repo: &Repo, version: Option<u64>) -> anyhow::Result<()> {
    let history = repo.policy_history()?;
    let Some(last) = history.last() else {
        println!("# no policy: nothing is checked beyond Unix permissions");
        return Ok(());
    };
    let want = version.unwrap_or(last.record.version);
    let Some(s) = history.iter().find(|s| s.record.version == want) else {
        bail!("no policy v{want} (the newest is v{})", last.record.version);
    };
    print!("{}", s.record.policy);
    if !s.record.policy.ends_with('\n') {
        println!();
    }
    Ok(())
}

pub fn set(repo: &Repo, file: &Path, message: &str) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let who = caller::current_who();
    let author = detafs::access::caller::current_user();
    let v = repo
        .set_policy(&text, &who, &author, message)
        .with_context(|| format!("{} not set", file.display()))?;
    println!("policy v{v}");
    Ok(())
}

fn entry(s: &Stored) -> serde_json::Value {
    let r = &s.record;
    serde_json::json!({
        "version": r.version,
        "time": r.time,
        "author": r.author,
        "message": r.message,
        "hash": s.hash.to_hex(),
        "parent": r.parent.map(|p| p.to_hex()),
    })
}

pub fn log(repo: &Repo, json: bool) -> anyhow::Result<()> {
    let history = repo.policy_history()?;
    if json {
        let rows: Vec<_> = history.iter().rev().map(entry).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for s in history.iter().rev() {
        let r = &s.record;
        println!(
            "v{:<4} {}  {:<12} {}",
            r.version,
            r.time,
            detafs::escape::line(r.author.as_bytes()),
            detafs::escape::line(r.message.as_bytes())
        );
    }
    Ok(())
}

/// Exit code: 0 allowed, 5 denied.
pub fn check(repo: &Repo, user: &str, action: &str, resource: &str) -> anyhow::Result<bool> {
    let Some(action) = Action::parse(action) else {
        let known: Vec<_> = Action::ALL.iter().map(|a| a.name()).collect();
        bail!("unknown action {action:?} (known: {})", known.join(", "));
    };
    let who = caller::named_who(user);
    let Some((version, policy)) = repo.current_policy()? else {
        println!("allow: no policy is set (Unix permissions only)");
        return Ok(true);
    };
    let d = policy.decide(&who, action, &[resource.to_string()]);
    println!(
        "{} (policy v{version}; {} as {})",
        d.explain(),
        user,
        who.principals.join(", ")
    );
    Ok(d.allowed)
}

/// Refuses what the policy in force does not allow whoever runs this
/// command (with the store's credentials in hand it could be done anyway:
/// docs/security.md; this keeps honest tools to the policy).
pub fn require(repo: &Repo, action: Action, resource: &str) -> anyhow::Result<()> {
    Ok(repo.require(&caller::current_who(), action, resource)?)
}
