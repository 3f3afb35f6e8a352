//! `detafs audit NAME`: the dataset's history, its tags and the policy's
//! changes as the store holds them, with every break of the hash chains.

use detafs::audit;
use detafs::repo::Repo;
use serde_json::{Value, json};

fn short(h: &detafs::id::RecordHash) -> String {
    h.to_hex()[..16].to_string()
}

/// A problem `verify` or `audit` found, for `--json`.
pub fn problem_json(p: &audit::Problem) -> Value {
    json!({
        "kind": p.kind.name(), "object": p.object, "detail": p.detail,
        "affects": p.affects, "more": p.more, "text": p.to_string(),
    })
}

/// Returns whether everything holds.
pub fn audit(repo: &Repo, name: &str, as_json: bool) -> anyhow::Result<bool> {
    repo.check_dataset(name)?;
    let h = audit::history(repo, name)?;
    let policy = repo.policy_audit()?;
    let mut problems: Vec<String> = h.problems.iter().map(|p| p.to_string()).collect();
    let lifecycle = repo.lifecycle_audit(name)?;
    let expired = repo
        .lifecycle(name)
        .map(|lc| lc.expired)
        .unwrap_or_default();
    let versions: Vec<Value> = h
        .versions
        .iter()
        .map(|v| match &v.record {
            Some(r) => json!({
                "version": v.version, "time": r.time, "author": r.author,
                "message": r.message, "parent": r.parent.map(|p| p.to_hex()),
                "hash": v.hash.to_hex(), "chained": v.chained,
                "expired": expired.contains_key(&v.version),
            }),
            None => json!({"version": v.version, "hash": v.hash.to_hex(), "chained": false}),
        })
        .collect();
    let tags: Vec<Value> = h
        .tags
        .iter()
        .map(|t| json!({"tag": t.tag, "version": t.version, "holds": t.holds}))
        .collect();
    let mut changes = Vec::new();
    for (n, hash, record) in &policy {
        changes.push(match record {
            Ok(r) => json!({
                "version": n, "time": r.time, "author": r.author, "message": r.message,
                "parent": r.parent.map(|p| p.to_hex()), "hash": hash.to_hex(), "chained": true,
            }),
            Err(e) => {
                problems.push(format!("policy v{n}: {e}"));
                json!({"version": n, "hash": hash.to_hex(), "chained": false})
            }
        });
    }
    let mut entries = Vec::new();
    for (n, hash, entry) in &lifecycle {
        entries.push(match entry {
            Ok(e) => json!({
                "seq": n, "time": e.time, "author": e.author, "event": e.event,
                "text": super::retention::describe(&e.event),
                "parent": e.parent.map(|p| p.to_hex()), "hash": hash.to_hex(), "chained": true,
            }),
            Err(err) => {
                problems.push(format!("lifecycle entry {n}: {err}"));
                json!({"seq": n, "hash": hash.to_hex(), "chained": false})
            }
        });
    }
    let ok = problems.is_empty();
    if as_json {
        let out = json!({
            "dataset": name, "ok": ok, "versions": versions, "tags": tags,
            "policy": changes, "lifecycle": entries, "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ok);
    }
    let mark = |good: bool| if good { "ok" } else { "BROKEN" };
    for v in &h.versions {
        let Some(r) = &v.record else {
            println!("v{:<4} {}  unreadable  BROKEN", v.version, short(&v.hash));
            continue;
        };
        let parent = r.parent.as_ref().map_or("-".to_string(), short);
        let gone = if expired.contains_key(&v.version) {
            "  (expired)"
        } else {
            ""
        };
        println!(
            "v{:<4} {}  {:<12} parent {parent:<16}  hash {}  {}  {}{gone}",
            v.version,
            r.time,
            r.author,
            short(&v.hash),
            mark(v.chained),
            detafs::escape::line(r.message.as_bytes())
        );
    }
    for t in &h.tags {
        println!("tag {} -> v{}  {}", t.tag, t.version, mark(t.holds));
    }
    for (n, hash, record) in &policy {
        match record {
            Ok(r) => println!(
                "policy v{n:<4} {}  {:<12} hash {}  ok  {}",
                r.time,
                r.author,
                short(hash),
                detafs::escape::line(r.message.as_bytes())
            ),
            Err(_) => println!("policy v{n:<4} hash {}  BROKEN", short(hash)),
        }
    }
    for (n, hash, entry) in &lifecycle {
        match entry {
            Ok(e) => println!(
                "lifecycle {n:<4} {}  {:<12} hash {}  ok  {}",
                e.time,
                detafs::escape::line(e.author.as_bytes()),
                short(hash),
                super::retention::describe(&e.event)
            ),
            Err(_) => println!("lifecycle {n:<4} hash {}  BROKEN", short(hash)),
        }
    }
    for p in &problems {
        println!("problem: {p}");
    }
    Ok(ok)
}
