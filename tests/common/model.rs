//! The reference model of tests/model.rs and tests/model_crash.rs: random
//! operations, applied to the file-system core (`Core`, staging over a
//! local store, no kernel) and to a plain folder (`Model`).

use super::{Env, noise};
use detafs::fs::{Caller, MountFs, MountOptions};
use detafs::repo::{Options, Repo};
use detafs::snapshot::{Kind, Special};
use detafs::staging::Staging;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

/// The core is driven as root, who owns the mount.
const ROOT_CALLER: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 0,
};

const DIRS: [&str; 4] = ["", "a", "a/b", "c"];
const NAMES: [&str; 4] = ["x", "y", "a", "c"];

#[derive(Clone, Debug)]
pub enum Op {
    /// Opens (creating) and writes `len` bytes at `offset`.
    Write {
        path: String,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        path: String,
        len: u64,
    },
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
    Symlink(String),
    Mkfifo(String),
    /// A hard link: the second path names the first's file.
    Link(String, String),
    Chmod {
        path: String,
        mode: u32,
    },
    Commit,
    Remount,
    /// The operation on a thread of its own while a commit builds.
    DuringCommit(Box<Op>),
    /// A write on a thread of its own (copying a committed file up) while
    /// this caller stats and reads another path.
    ReadDuringWrite(Box<Op>, String),
}

pub fn path() -> impl Strategy<Value = String> {
    (0..DIRS.len(), 0..NAMES.len()).prop_map(|(d, n)| match DIRS[d] {
        "" => NAMES[n].to_string(),
        d => format!("{d}/{}", NAMES[n]),
    })
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (path(), 0..70_000u64, 0..70_000usize, any::<u64>())
            .prop_map(|(path, offset, len, seed)| Op::Write { path, offset, len, seed }),
        1 => (path(), 0..80_000u64).prop_map(|(path, len)| Op::Truncate { path, len }),
        2 => path().prop_map(Op::Unlink),
        2 => (1..DIRS.len()).prop_map(|d| Op::Mkdir(DIRS[d].into())),
        1 => path().prop_map(Op::Mkdir),
        1 => path().prop_map(Op::Rmdir),
        2 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => path().prop_map(Op::Symlink),
        1 => path().prop_map(Op::Mkfifo),
        2 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (path(), prop::sample::select(vec![0o600u32, 0o644, 0o755, 0o700]))
            .prop_map(|(path, mode)| Op::Chmod { path, mode }),
        1 => Just(Op::Commit),
        1 => Just(Op::Remount),
    ]
}

/// `op()` and the threaded steps made of its operations.
pub fn step() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => op(),
        1 => op().prop_filter("no nesting", |o| !matches!(o, Op::Commit | Op::Remount))
            .prop_map(|o| Op::DuringCommit(Box::new(o))),
        1 => ((path(), 0..70_000u64, 1..70_000usize, any::<u64>()), path())
            .prop_map(|((path, offset, len, seed), read)| {
                Op::ReadDuringWrite(Box::new(Op::Write { path, offset, len, seed }), read)
            }),
    ]
}

/// What a threaded step's other caller saw: the path read during a write.
pub type Seen = Option<(String, Result<Vec<u8>, i32>)>;

/// The file-system core over a fresh store, as a mount daemon holds it.
pub struct Core<'e> {
    env: &'e Env,
    fs: Option<std::sync::Arc<MountFs>>,
}

impl<'e> Core<'e> {
    pub fn open(env: &'e Env) -> Core<'e> {
        let mut c = Core { env, fs: None };
        c.remount();
        c
    }

    pub fn remount(&mut self) {
        self.fs = None; // the old one lets go of staging's lock first
        let opts = Options {
            store: Some(self.env.store.clone()),
            cache_dir: Some(self.env.cache.clone()),
            cache_size: 1 << 30,
            cache_memory: None,
            store_timeout: Duration::from_secs(30),
            key_file: Some(self.env.key_file.clone()),
            passphrase: None,
            sse: None,
            object_lock: None,
            runtime: detafs::runtime::Runtime::new().unwrap(),
        };
        let repo = Repo::open(&opts).unwrap();
        let staging = Staging::open(&repo, &self.env.path("staging"), "ds").unwrap();
        let opts = MountOptions {
            uid: 0,
            gid: 0,
            log: None,
        };
        self.fs = Some(std::sync::Arc::new(
            MountFs::new(repo, "ds", Some(staging), opts).unwrap(),
        ));
    }

    pub fn fs(&self) -> &std::sync::Arc<MountFs> {
        self.fs.as_ref().unwrap()
    }

    fn at(&self, top: &str, path: &str) -> Result<u64, i32> {
        let mut ino = self
            .fs()
            .lookup(detafs::fs::ROOT, top.as_bytes())
            .map_err(errno)?
            .ino;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            ino = self.fs().lookup(ino, part.as_bytes()).map_err(errno)?.ino;
        }
        Ok(ino)
    }

    /// The folder holding `path`, and its last name. Like the kernel's
    /// path walk, a parent that is not a folder is ENOTDIR before the file
    /// system is asked.
    fn parent<'p>(&self, path: &'p str) -> Result<(u64, &'p [u8]), i32> {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let ino = self.at("staging", dir)?;
        match self.fs().getattr(ino).map_err(errno)?.kind {
            Kind::Dir => Ok((ino, name.as_bytes())),
            _ => Err(libc::ENOTDIR),
        }
    }

    pub fn apply(&mut self, op: &Op) -> Result<(), i32> {
        self.apply_seeing(op).0
    }

    /// `apply`, and what a threaded step's other caller saw.
    pub fn apply_seeing(&mut self, op: &Op) -> (Result<(), i32>, Seen) {
        match op {
            Op::Remount => {
                self.remount();
                (Ok(()), None)
            }
            Op::DuringCommit(inner) => std::thread::scope(|s| {
                let committing = s.spawn(|| self.run(&Op::Commit));
                let res = self.run(inner);
                committing.join().unwrap().expect("the commit");
                (res, None)
            }),
            Op::ReadDuringWrite(write, path) => std::thread::scope(|s| {
                let writing = s.spawn(|| self.run(write));
                let read = self.read(path);
                (writing.join().unwrap(), Some((path.clone(), read)))
            }),
            op => (self.run(op), None),
        }
    }

    /// A staged file's bytes, read through an open handle after a stat.
    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        let fs = self.fs();
        let ino = self.at("staging", path)?;
        let a = fs.getattr(ino).map_err(errno)?;
        if a.kind != Kind::File {
            return Err(libc::EISDIR);
        }
        let fh = fs
            .open(ino, libc::O_RDONLY, &ROOT_CALLER)
            .map_err(errno)?
            .fh;
        let mut data = Vec::new();
        let res = loop {
            let had = data.len();
            match fs.read(fh, had as u64, 1 << 20, &mut data) {
                Ok(()) if data.len() == had => break Ok(data),
                Ok(()) => {}
                Err(e) => break Err(errno(e)),
            }
        };
        fs.release(fh);
        res
    }

    fn run(&self, op: &Op) -> Result<(), i32> {
        let fs = self.fs();
        match op {
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => {
                let data = noise(*len, *seed);
                let fh = match self.at("staging", path) {
                    Ok(ino) => {
                        fs.open(ino, libc::O_WRONLY, &ROOT_CALLER)
                            .map_err(errno)?
                            .fh
                    }
                    Err(libc::ENOENT) => {
                        let (parent, name) = self.parent(path)?;
                        fs.create(parent, name, 0o644, libc::O_WRONLY, 0, 0)
                            .map_err(errno)?
                            .1
                            .fh
                    }
                    Err(e) => return Err(e),
                };
                let res = fs.write(fh, *offset, &data, 0, 0).map_err(errno);
                fs.release(fh);
                res.map(|_| ())
            }
            Op::Truncate { path, len } => {
                let ino = self.at("staging", path)?;
                fs.setattr(ino, None, None, None, Some(*len), (None, None), None)
                    .map_err(errno)
                    .map(|_| ())
            }
            Op::Unlink(path) | Op::Rmdir(path) => {
                let (parent, name) = self.parent(path)?;
                fs.remove(parent, name, matches!(op, Op::Rmdir(_)))
                    .map_err(errno)
            }
            Op::Mkdir(path) | Op::Symlink(path) | Op::Mkfifo(path) => {
                let (parent, name) = self.parent(path)?;
                let (kind, mode, target) = match op {
                    Op::Mkdir(_) => (Kind::Dir, 0o755, &b""[..]),
                    Op::Mkfifo(_) => (Kind::Special(Special::Fifo), 0o644, &b""[..]),
                    _ => (Kind::Symlink, 0o777, &b"nowhere/at/all"[..]),
                };
                fs.make(parent, name, kind, mode, 0, 0, target, 0)
                    .map_err(errno)
                    .map(|_| ())
            }
            Op::Rename(from, to) => {
                let (p, n) = self.parent(from)?;
                let (np, nn) = self.parent(to)?;
                // The kernel refuses a rename onto an ancestor of the
                // source itself, once the source is found.
                if from.starts_with(&format!("{to}/")) {
                    fs.lookup(p, n).map_err(errno)?;
                    return Err(libc::ENOTEMPTY);
                }
                fs.rename(p, n, np, nn, false).map_err(errno)
            }
            Op::Link(from, to) => {
                let ino = self.at("staging", from)?;
                let (np, nn) = self.parent(to)?;
                fs.link(ino, np, nn).map_err(errno).map(|_| ())
            }
            Op::Chmod { path, mode } => {
                let ino = self.at("staging", path)?;
                fs.setattr(ino, Some(*mode), None, None, None, (None, None), None)
                    .map_err(errno)
                    .map(|_| ())
            }
            Op::Commit => {
                let ino = self.at(".detafs", "commit").unwrap();
                let fh = fs
                    .open(ino, libc::O_WRONLY, &ROOT_CALLER)
                    .map_err(errno)?
                    .fh;
                let res = fs.write(fh, 0, b"a step", 0, 0).map_err(errno);
                fs.release(fh);
                match res {
                    Err(libc::ENODATA) => Ok(()), // nothing to commit
                    other => other.map(|_| ()),
                }
            }
            Op::Remount | Op::DuringCommit(_) | Op::ReadDuringWrite(..) => {
                unreachable!("applied by apply_seeing")
            }
        }
    }

    /// What a tree under `top` holds: path → kind, permissions, content.
    pub fn tree(&self, top: &str, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut todo = vec![(self.at(top, path).unwrap(), String::new())];
        let fs = self.fs();
        while let Some((ino, prefix)) = todo.pop() {
            for (e, a) in fs.readdir_plus(ino).unwrap() {
                let path = format!("{prefix}{}", String::from_utf8_lossy(&e.name));
                let what = match a.kind {
                    Kind::Dir => {
                        todo.push((e.ino, format!("{path}/")));
                        format!("dir {:o}", a.perm)
                    }
                    Kind::Symlink => {
                        format!(
                            "link {}",
                            String::from_utf8_lossy(&fs.readlink(&ROOT_CALLER, e.ino).unwrap())
                        )
                    }
                    Kind::File => {
                        let fh = fs.open(e.ino, libc::O_RDONLY, &ROOT_CALLER).unwrap().fh;
                        let mut data = Vec::new();
                        loop {
                            let had = data.len();
                            fs.read(fh, had as u64, 1 << 20, &mut data).unwrap();
                            if data.len() == had {
                                break;
                            }
                        }
                        fs.release(fh);
                        assert_eq!(data.len() as u64, a.size, "{path}: size and bytes disagree");
                        format!("file {:o} {}", a.perm, fingerprint(&data))
                    }
                    Kind::Special(s) => format!("{s:?} {:o} {}", a.perm, a.rdev).to_lowercase(),
                };
                out.insert(path, what);
            }
        }
        out
    }

    pub fn latest(&self) -> Option<String> {
        let ino = self.at("versions", "latest").ok()?;
        Some(String::from_utf8(self.fs().readlink(&ROOT_CALLER, ino).unwrap()).unwrap())
    }
}

pub fn errno(e: detafs::Error) -> i32 {
    detafs::fuse::errno(&e).code()
}

fn fingerprint(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{} {}", data.len(), hex::encode(&Sha256::digest(data)[..8]))
}

/// The reference: the same operations on a plain folder.
pub struct Model {
    pub root: PathBuf,
}

impl Model {
    /// An empty folder beside the store, as staging starts.
    pub fn new(env: &Env) -> Model {
        let root = env.path("model");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        Model { root }
    }

    fn p(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    pub fn apply(&self, op: &Op) -> Result<(), i32> {
        let res = match op {
            Op::DuringCommit(inner) | Op::ReadDuringWrite(inner, _) => return self.apply(inner),
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.p(path))
                .and_then(|f| f.write_all_at(&noise(*len, *seed), *offset)),
            Op::Truncate { path, len } => std::fs::OpenOptions::new()
                .write(true)
                .open(self.p(path))
                .and_then(|f| f.set_len(*len)),
            Op::Unlink(path) => std::fs::remove_file(self.p(path)),
            Op::Rmdir(path) => std::fs::remove_dir(self.p(path)),
            Op::Mkdir(path) => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(0o755).create(self.p(path))
            }
            Op::Symlink(path) => std::os::unix::fs::symlink("nowhere/at/all", self.p(path)),
            Op::Mkfifo(path) => {
                let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
                nix::unistd::mkfifo(&self.p(path), mode).map_err(std::io::Error::from)
            }
            Op::Rename(from, to) => std::fs::rename(self.p(from), self.p(to)),
            // link(2) itself: a symlink gets a second name, not its target.
            Op::Link(from, to) => std::fs::hard_link(self.p(from), self.p(to)),
            Op::Chmod { path, mode } => {
                std::fs::set_permissions(self.p(path), std::fs::Permissions::from_mode(*mode))
            }
            Op::Commit | Op::Remount => Ok(()),
        };
        res.map_err(|e| e.raw_os_error().unwrap())
    }

    /// A file's bytes (what a read of it may see), or the errno a read gets.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        match std::fs::symlink_metadata(self.p(path)) {
            Ok(m) if !m.is_file() => Err(libc::EISDIR),
            _ => std::fs::read(self.p(path)).map_err(|e| e.raw_os_error().unwrap()),
        }
    }

    pub fn tree(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut todo = vec![(self.root.clone(), String::new())];
        while let Some((dir, prefix)) = todo.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                let path = format!("{prefix}{}", e.file_name().to_string_lossy());
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                let perm = m.permissions().mode() & 0o7777;
                let what = if m.is_dir() {
                    todo.push((e.path(), format!("{path}/")));
                    format!("dir {perm:o}")
                } else if m.file_type().is_symlink() {
                    format!("link {}", std::fs::read_link(e.path()).unwrap().display())
                } else if m.file_type().is_fifo() {
                    format!("fifo {perm:o} 0")
                } else {
                    format!(
                        "file {perm:o} {}",
                        fingerprint(&std::fs::read(e.path()).unwrap())
                    )
                };
                out.insert(path, what);
            }
        }
        out
    }

    /// Whether the kernel would follow a symlink for this operation (the
    /// core never sees such a request on that name), or answer it itself
    /// (opening or truncating a FIFO): skipped in both. It follows one
    /// above the last name always, and at the last name when opening,
    /// truncating or changing mode.
    pub fn follows_symlink(&self, op: &Op) -> bool {
        if let Op::Write { path, .. } | Op::Truncate { path, .. } = op
            && std::fs::symlink_metadata(self.p(path)).is_ok_and(|m| m.file_type().is_fifo())
        {
            return true;
        }
        let (paths, last): (Vec<&String>, bool) = match op {
            Op::Write { path, .. } | Op::Truncate { path, .. } | Op::Chmod { path, .. } => {
                (vec![path], true)
            }
            Op::Unlink(p) | Op::Rmdir(p) | Op::Mkdir(p) | Op::Symlink(p) | Op::Mkfifo(p) => {
                (vec![p], false)
            }
            Op::Rename(a, b) | Op::Link(a, b) => (vec![a, b], false),
            Op::Commit | Op::Remount => return false,
            Op::DuringCommit(inner) => return self.follows_symlink(inner),
            // The read follows symlinks as the kernel would; the core is
            // asked name by name: such paths are left out.
            Op::ReadDuringWrite(inner, read) => {
                let read = Op::Chmod {
                    path: read.clone(),
                    mode: 0,
                };
                return self.follows_symlink(inner) || self.follows_symlink(&read);
            }
        };
        paths.into_iter().any(|path| {
            let parts: Vec<&str> = path.split('/').collect();
            let upto = if last { parts.len() } else { parts.len() - 1 };
            let mut at = self.root.clone();
            parts[..upto].iter().any(|part| {
                at.push(part);
                std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink())
            })
        })
    }
}
