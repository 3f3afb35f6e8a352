//! Helpers for end-to-end tests: a temporary store and cache, the real
//! `detafs` binary, and a fingerprint of a directory tree.
#![allow(dead_code)]

// Which tests need what is in Cargo.toml (`[[test]]`, required-features).

pub mod craft;
pub mod faults;
pub mod gateway;
pub mod model;
pub mod objects;

use objects::Objects;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Env {
    /// The gateway mounts go through (`DETAFS_TEST_MOUNT=gateway`),
    /// started at the first; dropped (killed) before the rest.
    remote: std::sync::OnceLock<Remote>,
    pub dir: tempfile::TempDir,
    /// The `--store` argument: a folder, or `s3://BUCKET/store`.
    pub store: String,
    pub cache: PathBuf,
    /// Raw access to the store's objects.
    pub objects: Objects,
    /// The S3 bucket holding the store, if it is on S3.
    pub bucket: Option<String>,
    /// The S3 server's endpoint (when `bucket` is set).
    pub endpoint: String,
    /// The prefix in the Azurite container holding the store, if it is on
    /// Azure.
    pub azure: Option<String>,
    /// The store's key file (`init` writes it; other hosts share it, as
    /// a user copies it to them).
    pub key_file: PathBuf,
    /// A passphrase this host opens the store with (DETAFS_PASSWORD), for
    /// a host given a passphrase slot rather than the key file.
    pub password: Option<String>,
}

impl Env {
    /// A fresh, initialised store with one dataset `ds`.
    pub fn new() -> Env {
        let env = Env::empty();
        env.init();
        env.ok(&["dataset", "create", "ds"]);
        env
    }

    /// `detafs init`: a sealed store (format 2), or a plaintext one
    /// (format 1) when `DETAFS_TEST_PLAINTEXT=1`; scripts/test.sh runs
    /// the S3 loop so, and each format gets the end-to-end suites.
    fn init(&self) {
        if std::env::var("DETAFS_TEST_PLAINTEXT").is_ok_and(|v| v == "1") {
            self.ok(&["init", "--plaintext"]);
        } else {
            self.ok(&["init"]);
        }
    }

    /// `Env::new` with a format 1 store (`init --plaintext`): objects in
    /// the clear, for tests that change them by hand.
    pub fn new_plaintext() -> Env {
        let env = Env::empty();
        env.ok(&["init", "--plaintext"]);
        env.ok(&["dataset", "create", "ds"]);
        env
    }

    /// `Env::new` on a local folder whatever `DETAFS_TEST_STORE` says.
    pub fn new_local() -> Env {
        let env = Env::empty_local();
        env.init();
        env.ok(&["dataset", "create", "ds"]);
        env
    }

    /// An uninitialised store: a folder, or a bucket when `DETAFS_TEST_STORE=s3`.
    pub fn empty() -> Env {
        match objects::store_by_default().as_str() {
            "s3" => Env::empty_s3(),
            "azure" => Env::empty_azure(),
            _ => Env::empty_local(),
        }
    }

    pub fn empty_local() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let cache = dir.path().join("cache");
        Env {
            objects: Objects::local(&store),
            store: store.to_str().unwrap().to_string(),
            key_file: dir.path().join("store.key"),
            dir,
            cache,
            bucket: None,
            endpoint: String::new(),
            azure: None,
            password: None,
            remote: Default::default(),
        }
    }

    /// A fresh prefix in the Azurite test container.
    pub fn empty_azure() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("t{}/store", hex::encode(rand::random::<[u8; 8]>()));
        Env {
            store: format!("az://{}/{prefix}", objects::AZURE_CONTAINER),
            objects: Objects::azure(&prefix),
            cache: dir.path().join("cache"),
            key_file: dir.path().join("store.key"),
            dir,
            bucket: None,
            endpoint: String::new(),
            azure: Some(prefix),
            password: None,
            remote: Default::default(),
        }
    }

    /// A fresh bucket on the S3 test server; the store lives under a prefix.
    pub fn empty_s3() -> Env {
        Env::empty_s3_at(objects::S3_ENDPOINT)
    }

    /// A fresh bucket on the S3 server at `endpoint`.
    pub fn empty_s3_at(endpoint: &str) -> Env {
        Env::empty_s3_in(endpoint, objects::new_bucket(endpoint))
    }

    /// A store in `bucket` on the S3 server at `endpoint`.
    pub fn empty_s3_in(endpoint: &str, bucket: String) -> Env {
        let dir = tempfile::tempdir().unwrap();
        Env {
            store: format!("s3://{bucket}/store"),
            objects: Objects::s3(endpoint, &bucket, "store"),
            cache: dir.path().join("cache"),
            key_file: dir.path().join("store.key"),
            dir,
            bucket: Some(bucket),
            endpoint: endpoint.to_string(),
            azure: None,
            password: None,
            remote: Default::default(),
        }
    }

    /// Another host using the same store: its own cache, staging and mount point.
    pub fn other_host(&self) -> Env {
        let dir = tempfile::tempdir().unwrap();
        Env {
            store: self.store.clone(),
            objects: match (&self.bucket, &self.azure) {
                (Some(b), _) => Objects::s3(&self.endpoint, b, "store"),
                (_, Some(prefix)) => Objects::azure(prefix),
                _ => Objects::local(Path::new(&self.store)),
            },
            cache: dir.path().join("cache"),
            key_file: self.key_file.clone(),
            dir,
            bucket: self.bucket.clone(),
            endpoint: self.endpoint.clone(),
            azure: self.azure.clone(),
            password: self.password.clone(),
            remote: Default::default(),
        }
    }

    /// `Env::new` on S3 whatever `DETAFS_TEST_STORE` says.
    pub fn new_s3() -> Env {
        Env::ready(Env::empty_s3())
    }

    /// `Env::new` on Azurite whatever `DETAFS_TEST_STORE` says.
    pub fn new_azure() -> Env {
        Env::ready(Env::empty_azure())
    }

    /// `env` initialised, with one dataset `ds`.
    fn ready(env: Env) -> Env {
        env.init();
        env.ok(&["dataset", "create", "ds"]);
        env
    }

    /// Points a command at this store (and, for S3, the test server).
    pub fn configure<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        // Nothing a test runs writes into the user's own folders.
        c.env("HOME", self.dir.path().join("home"))
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env("DETAFS_STORE", &self.store)
            .env("DETAFS_CACHE", &self.cache)
            .env("DETAFS_STAGING", self.staging())
            .env("DETAFS_KEY_FILE", &self.key_file)
            .env_remove("FAILPOINTS")
            // Debris is swept at once here; `gc_refuses_a_grace_below_the_safe_minimum`
            // checks the real minimum.
            .env("DETAFS_TEST_GC_MIN_GRACE", "0s")
            // The stat cache trusts files older than this (`settle`).
            .env(
                "DETAFS_TEST_RACY_WINDOW",
                format!("{}ms", RACY_WINDOW.as_millis()),
            )
            .env("DETAFS_TEST_GC_NOTE_WAIT", "0s")
            // A control-file request's RELEASE may come late on a loaded
            // machine (two cores, a suite's mounts at once): later
            // requests wait for it this long, not the second a user's do
            // (3 s was once not enough in CI's full run).
            .env("DETAFS_TEST_RELEASE_WAIT", "10s")
            // A gateway reads keys and the policy again for each request.
            .env("DETAFS_TEST_KEYS_FRESH", "0s");
        match &self.password {
            Some(p) => c.env("DETAFS_PASSWORD", p),
            None => c.env_remove("DETAFS_PASSWORD"),
        };
        if self.bucket.is_some() {
            c.envs(objects::S3_ENV)
                .env("AWS_ENDPOINT_URL", &self.endpoint);
        }
        if self.azure.is_some() {
            c.envs(objects::AZURE_ENV);
        }
        c
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_detafs"));
        self.configure(&mut c);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command_for(args).output().unwrap()
    }

    /// A command running `args`. Where this host's mounts go through a
    /// gateway, staging's commands do too (their staging is the mounts').
    pub fn command_for(&self, args: &[&str]) -> Command {
        let mut c = self.command();
        c.args(args);
        let on_staging = match args.first() {
            Some(&("status" | "restore" | "checkout" | "trash")) => true,
            Some(&"commit") => !args.contains(&"--from"),
            Some(&"diff") => args.contains(&"staging"),
            _ => false,
        };
        if on_staging && Remote::asked() {
            c.args(self.remote.get_or_init(|| Remote::start(self)).args());
        }
        c
    }

    /// Runs and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "detafs {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs and asserts failure; returns (exit code, stderr).
    pub fn fails(&self, args: &[&str]) -> (i32, String) {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "detafs {args:?} unexpectedly succeeded"
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn commit(&self, dir: &Path, msg: &str) -> String {
        self.commit_to("ds", dir, msg)
    }

    /// `detafs commit DATASET --from DIR -m MSG`.
    pub fn commit_to(&self, dataset: &str, dir: &Path, msg: &str) -> String {
        self.ok(&[
            "commit",
            dataset,
            "--from",
            dir.to_str().unwrap(),
            "-m",
            msg,
        ])
        .trim()
        .to_string()
    }

    /// `detafs commit ds --from DIR -m MSG` with the given FAILPOINTS (fail crate syntax).
    pub fn commit_command(&self, dir: &Path, msg: &str, failpoints: &str) -> Command {
        let mut c = self.command();
        c.args(["commit", "ds", "--from", dir.to_str().unwrap(), "-m", msg]);
        if !failpoints.is_empty() {
            c.env("FAILPOINTS", failpoints);
        }
        c
    }

    /// The log oldest first (`log --json` lists newest first).
    pub fn log(&self) -> Vec<serde_json::Value> {
        self.log_of("ds")
    }

    /// The log of dataset `name`, oldest first.
    pub fn log_of(&self, name: &str) -> Vec<serde_json::Value> {
        let mut log: Vec<serde_json::Value> =
            serde_json::from_str(&self.ok(&["log", name, "--json"])).unwrap();
        log.reverse();
        log
    }
}

/// path → (kind, mode, mtime ns, content hash or link target); the root's own
/// metadata is not part of a version.
pub fn fingerprint(root: &Path) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    // A walk with a stack of its own: folders nest 1,000 deep in tests,
    // more than a test thread's stack holds by recursion.
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let mtime = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
            let desc = if m.is_dir() {
                todo.push(p);
                format!("dir {:o} {mtime}", m.mode() & 0o7777)
            } else if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                format!("link {mtime} {:?}", t)
            } else {
                let data = std::fs::read(&p).unwrap();
                format!(
                    "file {:o} {mtime} {}",
                    m.mode() & 0o7777,
                    hex::encode(Sha256::digest(&data))
                )
            };
            out.insert(rel, desc);
        }
    }
    out
}

/// Deterministic pseudo-random bytes.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A small dataset with the awkward cases: nested dirs, empty file and dir,
/// symlink, executable, non-UTF-8 name, a multi-chunk file.
pub fn sample_tree(dir: &Path, seed: u64) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(dir.join("empty-dir")).unwrap();
    std::fs::write(dir.join("a.csv"), format!("id,v\n1,{seed}\n")).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    std::fs::write(dir.join("sub/big.bin"), noise(1_500_000, seed)).unwrap();
    std::fs::write(dir.join("sub/deeper/note.txt"), b"deep").unwrap();
    let run = dir.join("run.sh");
    std::fs::write(&run, b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.csv", dir.join("link")).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9-latin1.txt");
    std::fs::write(dir.join(odd), b"not utf-8 name").unwrap();
}

/// A live `detafs mount` of dataset `ds`, unmounted (and its daemon stopped) on drop.
pub struct Mount<'e> {
    pub env: &'e Env,
    pub dir: PathBuf,
    pub pid: u32,
}

impl Env {
    pub fn staging(&self) -> PathBuf {
        self.dir.path().join("staging-area")
    }

    pub fn mount(&self, extra: &[&str]) -> Mount<'_> {
        self.mount_failing(extra, "")
    }

    /// A mount whose daemon runs with the given FAILPOINTS (fail crate syntax).
    pub fn mount_failing(&self, extra: &[&str], failpoints: &str) -> Mount<'_> {
        self.mount_polling(extra, failpoints, "200ms")
    }

    /// A mount that looks for new versions every `poll` (`--poll-interval`).
    pub fn mount_with_poll(&self, extra: &[&str], poll: &str) -> Mount<'_> {
        self.mount_polling(extra, "", poll)
    }

    fn mount_polling(&self, extra: &[&str], failpoints: &str, poll: &str) -> Mount<'_> {
        self.mount_in("mnt", extra, failpoints, poll)
    }

    /// A mount of `ds` at folder `name` of the env, its daemon run with
    /// `failpoints`, polling every `poll`.
    pub fn mount_in(&self, name: &str, extra: &[&str], failpoints: &str, poll: &str) -> Mount<'_> {
        self.mount_in_env(name, extra, failpoints, poll, &[])
    }

    /// A mount whose daemon runs with the given FAILPOINTS and
    /// environment variables.
    pub fn mount_env(&self, failpoints: &str, vars: &[(&str, &str)]) -> Mount<'_> {
        self.mount_in_env("mnt", &[], failpoints, "200ms", vars)
    }

    fn mount_in_env(
        &self,
        name: &str,
        extra: &[&str],
        failpoints: &str,
        poll: &str,
        vars: &[(&str, &str)],
    ) -> Mount<'_> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut mount = self.command();
        mount.envs(vars.iter().copied());
        if !failpoints.is_empty() {
            mount.env("FAILPOINTS", failpoints);
        }
        // `DETAFS_TEST_MOUNT=gateway` (scripts/test.sh runs the mount
        // suites so once): a mount naming no store of its own goes
        // through a gateway serving this env's store.
        let through: Vec<String> = match Remote::asked() && !extra.contains(&"--store") {
            true => self.remote.get_or_init(|| Remote::start(self)).args(),
            false => Vec::new(),
        };
        let out = mount
            .args(["mount", "ds"])
            .arg(&dir)
            .args(["--daemon", "--poll-interval", poll])
            .args(&through)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // "mounted ds at MNT (pid N, log PATH)"
        let said = String::from_utf8(out.stdout).unwrap();
        let pid = said
            .split_once("(pid ")
            .and_then(|(_, rest)| rest.split_once(','))
            .and_then(|(pid, _)| pid.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {said:?}"));
        Mount {
            env: self,
            dir,
            pid,
        }
    }
}

impl Mount<'_> {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// The daemon's log (warnings and errors it reported).
    pub fn log(&self) -> String {
        // Staging lives under `<store id>-<location hash>/`: this env's
        // store's, or (through a gateway) the host cache store's.
        let store_id: serde_json::Value =
            serde_json::from_slice(&self.env.objects.read("detafs.json")).unwrap();
        let prefix = format!("{}-", store_id["store_id"].as_str().unwrap());
        let logs = std::fs::read_dir(self.env.staging())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| Remote::asked() || e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path().join("ds/mount.log"));
        // Through a gateway: the one its daemons write (the newest).
        let newest = logs.max_by_key(|l| std::fs::metadata(l).and_then(|m| m.modified()).ok());
        newest
            .and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default()
    }

    pub fn alive(&self) -> bool {
        !gone(self.pid)
    }

    /// Kills the daemon without letting it unmount (a crash).
    pub fn kill(&self) {
        signal(self.pid, libc::SIGKILL);
        for _ in 0..100 {
            if !self.alive() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.dir)
            .output();
        // Gone, with its lock on staging, before the test goes on.
        self.kill();
    }
}

/// Whether a test's mounts go through a gateway in this run, where the
/// test cannot (`why`): it says so and the caller returns. What it tests
/// of a gateway's host is tested in tests/remote_mount.rs.
pub fn local_only(why: &str) -> bool {
    let remote = Remote::asked();
    if remote {
        eprintln!("not through a gateway: {why}");
    }
    remote
}

/// Whether this run's mounts go through a gateway (`DETAFS_TEST_MOUNT`).
pub fn mounts_through_gateway() -> bool {
    Remote::asked()
}

/// Who a commit through a mount is by: the user, or the gateway's key.
pub fn mount_author() -> &'static str {
    match Remote::asked() {
        true => "key:mounter",
        false => "root",
    }
}

/// A gateway serving an env's store to its mounts, with a key that may
/// read and commit; with `DETAFS_TEST_POLICY=hides`, under a policy that
/// hides from it a version and a folder the suites never use (so every
/// answer passes through the policy's filters).
struct Remote {
    gateway: gateway::Gateway,
    key_file: PathBuf,
    cert: PathBuf,
}

impl Remote {
    fn asked() -> bool {
        std::env::var("DETAFS_TEST_MOUNT").is_ok_and(|v| v == "gateway")
    }

    fn start(env: &Env) -> Remote {
        if std::env::var("DETAFS_TEST_POLICY").is_ok_and(|v| v == "hides") {
            gateway::set_policy_and_wait(
                env,
                "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: mounter, effect: allow, principals: [\"key:mounter\"], actions: [\"dataset:*\"], resources: [\"datasets/ds\"]}\n  - {name: not_v999, effect: deny, principals: [\"key:mounter\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v999\"]}\n  - {name: no_hidden, effect: deny, principals: [\"key:mounter\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/zz-hidden-by-policy/*\"]}\n",
            );
        }
        let gateway = gateway::serve(env);
        let key_file = env.path("mounter.key");
        let key = gateway::key(env, "mounter", "read,commit");
        std::fs::write(&key_file, format!("{key}\n")).unwrap();
        Remote {
            gateway,
            key_file,
            cert: gateway::cert(env),
        }
    }

    fn args(&self) -> Vec<String> {
        [
            "--store",
            &self.gateway.url,
            "--api-key-file",
            self.key_file.to_str().unwrap(),
            "--ca-cert",
            self.cert.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    }
}

/// An ordering point in a daemon (`detafs::hold`): `spec` goes into its
/// FAILPOINTS; the daemon stops there until `release`.
pub struct Hold {
    pub spec: String,
    release: PathBuf,
}

impl Hold {
    pub fn new(env: &Env, name: &str) -> Hold {
        Hold::named(env, name, name)
    }

    /// Point `name` for one of several processes (`tag` tells them apart).
    pub fn named(env: &Env, name: &str, tag: &str) -> Hold {
        let release = env.dir.path().join(format!("release-{tag}"));
        let hold = Hold {
            spec: format!("{name}=return({})", release.display()),
            release,
        };
        // A point held again (another round) waits for a new release.
        let _ = std::fs::remove_file(&hold.release);
        let _ = std::fs::remove_file(hold.held());
        hold
    }

    fn held(&self) -> PathBuf {
        let mut held = self.release.clone().into_os_string();
        held.push(".held");
        held.into()
    }

    /// Waits until the daemon is held there.
    pub fn reached(&self) {
        let held = self.held();
        within(
            std::time::Duration::from_secs(120),
            "the hold point",
            || held.exists(),
        );
    }

    pub fn release(&self) {
        std::fs::write(&self.release, b"").unwrap();
    }

    /// A point where every pass waits for a release of its own (`step`).
    pub fn each(env: &Env, name: &str) -> Hold {
        let hold = Hold::new(env, name);
        Hold {
            spec: format!("{name}=return(each:{})", hold.release.display()),
            release: hold.release,
        }
    }

    /// Whether something waits at the point now.
    pub fn is_held(&self) -> bool {
        self.held().exists()
    }

    /// Lets one holder of an `each` point go on; returns once it has, or
    /// once `gone` says no one will (the process ended).
    pub fn step(&self, gone: impl Fn() -> bool) {
        std::fs::write(&self.release, b"").unwrap();
        within(
            std::time::Duration::from_secs(120),
            "a holder to go on",
            || !self.release.exists() || gone(),
        );
    }
}

/// Waits up to `limit` for `cond`; returns how long it took.
pub fn within(
    limit: std::time::Duration,
    what: &str,
    cond: impl Fn() -> bool,
) -> std::time::Duration {
    let t = std::time::Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    t.elapsed()
}

/// `echo MSG > .detafs/commit`: the write's result is the commit's.
pub fn commit_via_control(m: &Mount, msg: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.path(".detafs/commit"))?
        .write_all(msg.as_bytes())
}

pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file under `dir` (none if it is not there).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A tmpfs of `size` (as mount takes it: `16m`) mounted on `dir` (made if
/// missing), unmounted lazily on drop: a small disk a test fills up.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir),
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The stat cache's racy window in tests (`DETAFS_TEST_RACY_WINDOW`).
const RACY_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// Waits until every file under `dir` was last changed longer ago than
/// the racy window, so that a commit stat-caches them all.
pub fn settle(dir: &Path) {
    let newest = files_under(dir)
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            std::time::UNIX_EPOCH
                + std::time::Duration::new(
                    m.ctime().max(0).unsigned_abs(),
                    m.ctime_nsec().try_into().unwrap(),
                )
        })
        .max();
    if let Some(newest) = newest {
        within(
            std::time::Duration::from_secs(10),
            "the racy window",
            || newest.elapsed().is_ok_and(|age| age > RACY_WINDOW),
        );
    }
}

/// Sends signal `sig` to process `pid` (0: only asks whether it is there);
/// whether it was sent.
pub fn signal(pid: u32, sig: i32) -> bool {
    use nix::sys::signal::{Signal, kill};
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    let sig = (sig != 0).then(|| Signal::try_from(sig).expect("a signal"));
    kill(pid, sig).is_ok()
}

/// Whether process `pid` has ended (and been reaped, or is no child of ours).
/// Whether process `pid` has ended: it no longer exists, or is a zombie
/// its parent has not reaped yet (it holds nothing then).
pub fn gone(pid: u32) -> bool {
    !detafs::procs::running(pid)
}

/// Waits until the clock's whole second is past the one it is in now: what
/// detafs records in whole seconds (a deletion's time) is then in the past.
pub fn next_second() {
    let secs = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let now = secs();
    within(std::time::Duration::from_secs(5), "the next second", || {
        secs() > now
    });
}

/// Whether a file system is mounted at `at` (as /proc/self/mountinfo says).
pub fn mounted_at(at: &Path) -> bool {
    let at = at.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(at))
}

/// A process whose working folder is `dir`, killed on drop.
pub struct Inside(pub std::process::Child);

impl Inside {
    pub fn new(dir: &Path) -> Inside {
        Inside(
            Command::new("sleep")
                .arg("600")
                .current_dir(dir)
                .spawn()
                .unwrap(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `detafs status ds`, line by line.
pub fn status(env: &Env) -> Vec<String> {
    env.ok(&["status", "ds"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// v1: a.csv "1", d/b.csv "2"; v2: a.csv "11", c.csv "3", d/ empty.
/// Returns the folder they were committed from (as v2).
pub fn two_versions(env: &Env) -> PathBuf {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a.csv"), "1").unwrap();
    std::fs::write(src.join("d/b.csv"), "2").unwrap();
    env.commit(&src, "v1");
    std::fs::write(src.join("a.csv"), "11").unwrap();
    std::fs::remove_file(src.join("d/b.csv")).unwrap();
    std::fs::write(src.join("c.csv"), "3").unwrap();
    env.commit(&src, "v2");
    src
}
