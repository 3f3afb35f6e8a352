//! Commands through a gateway (`--store https://…`, `detafs::remote`): the
//! same forms, output and exit codes as on a store, for what the gateway
//! shows the caller.

use super::retention::{self, On};
use super::{Command, DatasetCmd, show};
use anyhow::{Context, bail};
use detafs::remote::{Gateway, Options};
use detafs::repo::Repo;
use std::io::Write;
use std::process::ExitCode;

/// What this host keeps of its own: its cache of what it reads (a store
/// sealed with a key of its own) and its staging.
pub struct Here {
    pub opts: detafs::repo::Options,
    pub staging: std::path::PathBuf,
}

pub fn execute(
    command: Command,
    store: &str,
    opts: &Options,
    here: &Here,
) -> anyhow::Result<ExitCode> {
    let gateway = || Gateway::connect(store, opts, &here.opts.runtime);
    match command {
        Command::Dataset(DatasetCmd::List { json: false }) => {
            for name in gateway()?.datasets()? {
                println!("{name}");
            }
        }
        Command::Dataset(DatasetCmd::List { json: true }) => datasets_json(&gateway()?)?,
        Command::Log {
            name,
            json,
            path: None,
            stray: None,
        } => {
            let mut rows = gateway()?.versions(&name)?;
            rows.reverse();
            show::print_log(&rows, json)?;
        }
        Command::Log {
            name,
            json,
            path: Some(path),
            stray: None,
        } => {
            // The store's own path log over the gateway's trees.
            let repo = host_repo(store, gateway()?.into(), here)?;
            show::log(&repo, &name, json, Some(&path))?;
        }
        Command::Cat {
            name,
            version,
            path,
        } => {
            let mut out = std::io::stdout().lock();
            match gateway()?.file(&name, &version, &path, &mut out) {
                Err(detafs::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other?,
            }
            out.flush()?;
        }
        Command::Tag {
            name,
            version: None,
            tag: None,
            json,
        } => {
            let tags = gateway()?
                .versions(&name)?
                .iter()
                .flat_map(|row| {
                    let version = row["version"].as_u64().unwrap_or(0);
                    row["tags"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(move |t| Some((t.as_str()?.to_string(), version)))
                })
                .collect();
            super::print_tags(tags, json)?;
        }
        Command::Tag {
            name,
            version: Some(version),
            tag: Some(tag),
            ..
        } => {
            let (tag, number) = gateway()?.create_tag(&name, &version, &tag)?;
            println!("{tag} v{number}");
        }
        Command::Export {
            name,
            version,
            dir,
            preserve_setid,
        } => {
            // The store's own export over the gateway's trees: names,
            // links and special files as on the store.
            let open = || host_repo(store, gateway()?.into(), here);
            super::export_cmd(&open, &name, &version, &dir, preserve_setid)?;
        }
        Command::Ls {
            name,
            version,
            path,
            json,
        } => {
            // The store's own listing over the gateway's trees: every
            // name as the store holds it, UTF-8 or not.
            let repo = host_repo(store, gateway()?.into(), here)?;
            show::ls(&repo, &name, &version, path.as_deref().unwrap_or(""), json)?;
        }
        Command::Diff {
            name,
            from,
            to,
            format,
            content_only,
        } => {
            let format = format.format();
            let repo = host_repo(store, gateway()?.into(), here)?;
            super::diff::diff(
                &repo,
                &here.staging,
                &name,
                &from,
                &to,
                format,
                content_only,
            )?;
        }
        Command::Verify { name, json } => {
            let names = match name {
                Some(n) => vec![n],
                None => gateway()?.datasets()?,
            };
            // Every byte from the store as it is now: neither this host's
            // cache nor the gateway's memory serves it.
            let repo = host_repo(store, gateway()?.fresh().into(), here)?;
            return verify(&repo, &names, json);
        }
        command @ (Command::Commit { .. }
        | Command::Status(_)
        | Command::Restore { .. }
        | Command::Checkout { .. }
        | Command::Trash(_)) => {
            let repo = host_repo(store, gateway()?.into(), here)?;
            staging_cmd(command, &repo, store, &here.staging)?;
        }
        Command::Mount(args) => {
            detafs::sys::tune_allocator();
            super::mount::mount(
                host_repo(store, gateway()?.into(), here)?,
                &here.staging,
                &args,
            )?;
        }
        Command::Retention(cmd) => retention::retention_cmd(&On::Gateway(&gateway()?), cmd)?,
        Command::Forget(args) => retention::forget(&On::Gateway(&gateway()?), &args)?,
        Command::Hold(args) => retention::hold(&On::Gateway(&gateway()?), &args)?,
        Command::Release(args) => retention::release(&On::Gateway(&gateway()?), &args)?,
        Command::Erase(args) => retention::erase(&On::Gateway(&gateway()?), &args)?,
        Command::Report(args) => retention::report(&On::Gateway(&gateway()?), &args)?,
        _ => bail!(
            "through a gateway ({store}), detafs runs `dataset list`, `log`, `tag`, `ls`, `cat`, `export`, `diff`, `verify` (of what the key may read), `commit`, `status`, `restore`, `checkout`, `trash`, `mount`, `retention`, `forget`, `hold`, `release`, `erase` and `report`; the others need the store itself"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// The commands on this host's staging, through the gateway `repo` reaches.
fn staging_cmd(
    command: Command,
    repo: &Repo,
    store: &str,
    staging: &std::path::Path,
) -> anyhow::Result<()> {
    match command {
        Command::Commit {
            name,
            from,
            message,
            author,
            content_only,
        } => {
            if author.is_some() {
                bail!(
                    "through a gateway ({store}), a version's author is the key's name: leave out --author"
                );
            }
            let meta = detafs::commit::CommitMeta {
                dataset: &name,
                message: &message,
                author: &detafs::access::caller::current_user(),
                content_only,
            };
            let version = match from {
                Some(from) => {
                    let sent = detafs::commit::through::commit_dir(repo, &meta, &from)?;
                    eprintln!("sent {} bytes of files", sent.bytes);
                    sent.version
                }
                // Staging's commit, through the mount that owns it or here.
                None => super::commit_cmd(repo, staging, &meta, None, false)?.version,
            };
            println!("v{version}");
        }
        Command::Status(args) => super::status_cmd(repo, staging, &args)?,
        Command::Restore {
            name,
            undo: Some(entry),
            ..
        } => super::trash::undo(repo, staging, &name, entry)?,
        Command::Restore { name, paths, .. } => {
            super::mount::checkout(repo, staging, &name, None, &paths)?;
        }
        Command::Checkout {
            name,
            version,
            paths,
        } => {
            super::mount::checkout(repo, staging, &name, Some(&version), &paths)?;
        }
        Command::Trash(args) => super::trash::trash(repo, staging, &args)?,
        _ => unreachable!("staging_cmd takes staging's commands"),
    }
    Ok(())
}

/// A repo whose datasets come from the gateway, over this host's own
/// store (one per gateway list): what it fetches is kept there, sealed
/// with a key the host made on first use.
fn host_repo(store: &str, gateway: std::sync::Arc<Gateway>, here: &Here) -> anyhow::Result<Repo> {
    let root = here
        .opts
        .cache_dir
        .clone()
        .unwrap_or_else(detafs::repo::default_cache);
    let dir = root
        .join("gateways")
        .join(&detafs::id::digest_hex(store.as_bytes())[..16]);
    // Its own key: never the store's (`--key-file` names that one).
    let own = detafs::repo::Options {
        key_file: None,
        passphrase: None,
        ..here.opts.clone()
    };
    let repo = match Repo::open_own(&dir, None, &own) {
        // Its key lost: the cache is unreadable, and only a cache. Made anew.
        Err(detafs::Error::Locked(_) | detafs::Error::WrongKey(_)) => {
            forget_cache(&root, &dir)?;
            eprintln!(
                "this host's cache of {store} at {} no longer opens with a key of its own: made anew (what was staged under the lost key stays unreadable)",
                dir.display()
            );
            Repo::open_own(&dir, None, &own)
        }
        other => other,
    }
    .with_context(|| format!("cannot open this host's cache of {store}"))?;
    if let Some(key_file) = repo.created_key_file() {
        eprintln!(
            "created this host's cache of {store} at {}, sealed with a key of its own",
            dir.display()
        );
        eprintln!(
            "key file: {} (losing it loses the cache and what is staged on this host)",
            key_file.display()
        );
    }
    gateway.keep_places(
        &repo.state_dir().join("gateway-places.db"),
        repo.codec().clone(),
    )?;
    Ok(repo.with_upstream(gateway))
}

/// `verify` through the gateway: every file the key may read, read; what
/// did not arrive whole, named (exit 1).
fn verify(repo: &Repo, names: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let report = detafs::verify::read_through(repo, names)?;
    if json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|(at, why)| serde_json::json!({"path": at, "detail": why}))
            .collect();
        let out = serde_json::json!({
            "versions": report.versions,
            "files": report.files,
            "bytes": report.bytes,
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for (at, why) in &report.problems {
            println!("{at}: {why}");
        }
        eprintln!(
            "read {} versions through the gateway, {} files, {} bytes: {} problems",
            report.versions,
            report.files,
            report.bytes,
            report.problems.len()
        );
    }
    Ok(ExitCode::from(u8::from(!report.problems.is_empty())))
}

/// `dataset list --json` as the store's: each dataset the key may list,
/// its versions, latest, tags, and bytes stored (unknown if withheld).
fn datasets_json(gw: &Gateway) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for name in gw.datasets()? {
        let versions = gw.versions(&name)?;
        let latest = versions.last();
        // Withheld figures (null) make the sum unknown too.
        let stored: Option<u64> = versions.iter().map(|v| v["delta_size"].as_u64()).sum();
        rows.push(serde_json::json!({
            "name": name,
            "versions": versions.len(),
            "latest": latest.map(|v| v["version_id"].clone()),
            "latest_timestamp": latest.map(|v| v["timestamp"].clone()),
            "tags": versions.iter().map(|v| v["tags"].as_array().map_or(0, Vec::len)).sum::<usize>(),
            "stored_bytes": stored,
        }));
    }
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}

/// Removes the host's cache store at `dir` and its local state under
/// `root` (folders named for its store id).
fn forget_cache(root: &std::path::Path, dir: &std::path::Path) -> anyhow::Result<()> {
    let marker = dir.join(detafs::store::MARKER);
    let id = std::fs::read(&marker)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|m| m["store_id"].as_str().map(str::to_string));
    if let Some(id) = id.filter(|id| id.bytes().all(|b| b.is_ascii_hexdigit())) {
        for e in std::fs::read_dir(root)?.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{id}-"))
            {
                std::fs::remove_dir_all(e.path())?;
            }
        }
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
