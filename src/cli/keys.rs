//! `detafs init` and `detafs key`: making a store (sealed by default) and
//! its key slots; where passphrases come from.

use anyhow::{Context, bail};
use detafs::repo::{Options, Passphrase, Repo};
use detafs::store::slots::{KeyFile, SlotKind};
use detafs::store::{NewStore, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The passphrase that opens a store: `DETAFS_PASSWORD`, the first line of
/// `--password-file`, or asked on the terminal.
pub fn passphrase_source(file: Option<PathBuf>) -> Passphrase {
    Arc::new(move || {
        if let Ok(p) = std::env::var("DETAFS_PASSWORD") {
            return Some(Zeroizing::new(p));
        }
        if let Some(f) = &file {
            let text = Zeroizing::new(std::fs::read_to_string(f).ok()?);
            return Some(Zeroizing::new(text.lines().next()?.to_string()));
        }
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return None;
        }
        let p = rpassword::prompt_password("detafs passphrase: ").ok()?;
        let _ = PROMPTED.set(Zeroizing::new(p.clone()));
        Some(Zeroizing::new(p))
    })
}

/// A passphrase typed on the terminal, for a mount daemon this process
/// starts (it has no terminal to ask on).
static PROMPTED: std::sync::OnceLock<Zeroizing<String>> = std::sync::OnceLock::new();

pub fn prompted() -> Option<&'static str> {
    PROMPTED.get().map(|p| p.as_str())
}

/// A new passphrase: `DETAFS_NEW_PASSWORD`, or asked twice on the terminal.
fn new_passphrase() -> anyhow::Result<Zeroizing<String>> {
    if let Ok(p) = std::env::var("DETAFS_NEW_PASSWORD") {
        return check_passphrase(Zeroizing::new(p));
    }
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        bail!("no new passphrase: set DETAFS_NEW_PASSWORD or run on a terminal");
    }
    let p = Zeroizing::new(rpassword::prompt_password("new passphrase: ")?);
    let again = Zeroizing::new(rpassword::prompt_password("again: ")?);
    if p != again {
        bail!("the two passphrases differ; nothing was changed");
    }
    check_passphrase(p)
}

fn check_passphrase(p: Zeroizing<String>) -> anyhow::Result<Zeroizing<String>> {
    if p.chars().count() < 8 {
        bail!("a passphrase needs at least 8 characters; nothing was changed");
    }
    Ok(p)
}

/// What `detafs init` makes.
pub enum Sealing {
    /// An unencrypted store (format 1).
    Plaintext,
    /// An encrypted store with a key file.
    KeyFile,
    /// An encrypted store with a key file and a passphrase slot.
    KeyFileAndPassphrase,
}

/// `detafs init`: the store's URL, whether it was made, its key file.
pub fn init(opts: &Options, sealing: Sealing) -> anyhow::Result<(String, bool, Option<PathBuf>)> {
    let url = opts
        .store
        .clone()
        .unwrap_or_else(|| detafs::repo::default_store().to_string_lossy().into_owned());
    let store = Store::open(&url, true, opts.store_timeout, &opts.asks(), &opts.runtime)?;
    let pass = match sealing {
        Sealing::KeyFileAndPassphrase => Some(new_passphrase()?),
        Sealing::Plaintext | Sealing::KeyFile => None,
    };
    let new = match sealing {
        Sealing::Plaintext => NewStore::Plaintext,
        Sealing::KeyFile | Sealing::KeyFileAndPassphrase => NewStore::Sealed {
            key_file: opts.key_file.as_deref(),
            passphrase: pass.as_deref().map(String::as_str),
            by: &detafs::access::caller::current_user(),
        },
    };
    let made = store.init(true, &new)?;
    Ok((url, made.created, made.key_file))
}

/// Tells where a new key file is, and that it must be kept.
pub fn tell_key_file(path: &Path) {
    eprintln!("key file: {}", path.display());
    eprintln!(
        "back it up: without it (or a passphrase slot) nobody can read this store; copy it to other hosts to give them access"
    );
}

/// `detafs key list`: one line per slot (or a JSON array); the slot this
/// host's key file opens names the file, so the user knows what to back up.
pub fn list(repo: &Repo, opts: &Options, json: bool) -> anyhow::Result<()> {
    if !repo.codec().is_sealed() {
        bail!("this store is not encrypted (format 1): it has no key slots");
    }
    let store_id = repo.store().info()?.store_id;
    let here = opts
        .key_file
        .clone()
        .unwrap_or_else(|| detafs::store::slots::default_key_file(&store_id));
    let here_slot = KeyFile::read(&here)
        .ok()
        .filter(|k| k.store_id == store_id)
        .map(|k| k.slot);
    let mut rows = Vec::new();
    for s in repo.store().slots()? {
        let kind = match s.kind {
            SlotKind::Keyfile => "key-file",
            SlotKind::Passphrase => "passphrase",
        };
        let file = (here_slot.as_deref() == Some(s.id.as_str())).then(|| here.clone());
        if json {
            rows.push(serde_json::json!({
                "id": s.id,
                "kind": kind,
                "created": s.created,
                "by": s.by,
                "key_file": file,
            }));
            continue;
        }
        let file = file
            .map(|f| format!(" (this host's key file: {})", f.display()))
            .unwrap_or_default();
        println!(
            "{} {kind:<10} {} {}{}",
            s.id,
            s.created,
            detafs::escape::line(s.by.as_bytes()),
            detafs::escape::line(file.as_bytes())
        );
    }
    if json {
        println!("{}", serde_json::Value::Array(rows));
    }
    Ok(())
}

/// `detafs key add`: a key file at `file`, or a passphrase.
pub fn add(
    repo: &Repo,
    opts: &Options,
    file: Option<&Path>,
    passphrase: bool,
) -> anyhow::Result<()> {
    if !repo.codec().is_sealed() {
        bail!("this store is not encrypted (format 1): it has no key slots");
    }
    let master = open_master(repo, opts)?;
    let pass = match (file, passphrase) {
        (Some(_), false) => None,
        (None, true) => Some(new_passphrase()?),
        _ => bail!("give either --file PATH (a new key file) or --passphrase"),
    };
    let slot = repo.store().add_slot(
        &master,
        file,
        pass.as_deref().map(String::as_str),
        &detafs::access::caller::current_user(),
    )?;
    println!("added key slot {}", slot.id);
    if let Some(f) = file {
        tell_key_file(f);
    }
    Ok(())
}

pub fn remove(repo: &Repo, id: &str) -> anyhow::Result<()> {
    if !repo.codec().is_sealed() {
        bail!("this store is not encrypted (format 1): it has no key slots");
    }
    repo.store().remove_slot(id)?;
    println!("removed key slot {id}: what it held opens this store no more");
    Ok(())
}

/// The master key again, to wrap it in a new slot (the repo is open, so
/// one of the user's secrets opens it).
fn open_master(repo: &Repo, opts: &Options) -> anyhow::Result<detafs::store::seal::MasterKey> {
    detafs::repo::open_master(repo.store(), opts).context("cannot open the store's master key")
}
