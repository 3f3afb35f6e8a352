//! `detafs trash NAME` and `detafs restore NAME --undo`: what restores and
//! checkouts replaced (`staging::trash`), listed and brought back.

use super::mount::{Owner, ask, open_staging, staging_root};
use anyhow::Context;
use detafs::repo::Repo;
use detafs::staging::trash::{self, Limits};
use std::path::Path;

#[derive(clap::Args)]
pub struct TrashArgs {
    /// Dataset name.
    name: String,
    /// How long entries are kept, e.g. 7days, 12h (default 7days).
    #[arg(long, value_parser = humantime::parse_duration)]
    keep: Option<std::time::Duration>,
    /// How many bytes of staged copies the trash keeps, e.g. 500MiB, 5GiB
    /// (default 1GiB); the oldest entries go first.
    #[arg(long)]
    max_size: Option<bytesize::ByteSize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn trash(repo: &Repo, staging: &Path, args: &TrashArgs) -> anyhow::Result<()> {
    repo.check_dataset(&args.name)?;
    let dir = staging_root(repo, staging, &args.name)?;
    let mut limits = trash::limits(&dir)?;
    if args.keep.is_some() || args.max_size.is_some() {
        limits = Limits {
            keep_secs: args.keep.map_or(limits.keep_secs, |d| d.as_secs()),
            max_bytes: args.max_size.map_or(limits.max_bytes, |s| s.as_u64()),
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        trash::set_limits(&dir, limits)?;
        // Applied now: by the mount serving staging (at its refresh), or here.
        match open_staging(repo, staging, &args.name)? {
            Owner::Here(st) => st.prune_trash()?,
            Owner::Mount(mp) => ask(&mp, "refresh", b"\n")?,
        }
    }
    let entries = trash::list(&dir, &repo.local_sealing())?;
    if args.json {
        let body = serde_json::json!({
            "keep_secs": limits.keep_secs,
            "max_bytes": limits.max_bytes,
            "bytes": entries.iter().map(|e| e.bytes).sum::<u64>(),
            "entries": entries,
        });
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let bytes: u64 = entries.iter().map(|e| e.bytes).sum();
    println!(
        "{} entries, {} (kept {}, up to {}); bring one back: detafs restore {} --undo ENTRY",
        entries.len(),
        bytesize::ByteSize(bytes),
        humantime::format_duration(std::time::Duration::from_secs(limits.keep_secs)),
        bytesize::ByteSize(limits.max_bytes),
        args.name
    );
    for e in &entries {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(e.at.max(0) as u64);
        println!(
            "{:>5}  {}  {:<14} {:>6} files {:>10}  {}",
            e.entry,
            humantime::format_rfc3339_seconds(at),
            e.what,
            e.files,
            bytesize::ByteSize(e.bytes).to_string(),
            e.paths.join(" ")
        );
    }
    Ok(())
}

/// `detafs restore NAME --undo [ENTRY]`.
pub fn undo(repo: &Repo, staging: &Path, name: &str, entry: Option<u64>) -> anyhow::Result<()> {
    repo.check_dataset(name)?;
    match open_staging(repo, staging, name)? {
        Owner::Here(st) => {
            let base = st.base_version()?;
            let tree = repo
                .sync(name)?
                .into_iter()
                .find(|r| r.version == base)
                .map(|r| r.tree);
            st.undo(repo, tree.as_ref(), entry)?;
            Ok(())
        }
        Owner::Mount(mp) => {
            let text = entry.map_or(String::new(), |e| e.to_string());
            ask(&mp, "undo", format!("{text}\n").as_bytes())
        }
    }
}
