//! One mount, one lifetime: `detafs umount` detaches both kernel
//! connections or neither and returns once the daemon has ended; health
//! says which connection serves `versions/`; a mount whose daemon died is
//! recovered by the next `detafs mount`; a daemon that still holds staging
//! after a lazy detach is named, with what keeps it.

mod common;

use common::{Env, Inside, Mount, mounted_at};
use std::process::Command;
use std::time::Duration;

fn committed(env: &Env) {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/a.csv"), "1").unwrap();
    env.commit(&src, "v1");
}

/// The daemon's pid, as its health says.
fn daemon_pid(m: &Mount) -> u32 {
    u32::try_from(health(m)["pid"].as_u64().unwrap()).unwrap()
}

/// `detafs mount ds DIR --daemon`: whether it mounted, and what it said.
fn mount_at(env: &Env, dir: &std::path::Path) -> (bool, String) {
    let out = env
        .command()
        .args(["mount", "ds"])
        .arg(dir)
        .arg("--daemon")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), err)
}

fn health(m: &Mount) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap()
}

/// A refused unmount (a shell in `staging/`, or in `versions/`) detaches
/// nothing and names the process; once it left, both go, and the daemon
/// has ended when the command returns.
#[test]
fn umount_detaches_both_connections_or_neither() {
    let env = Env::new();
    committed(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/d/b.csv"), "staged").unwrap();
    for inside in ["staging/d", "versions/v1/d", "staging"] {
        let shell = Inside::new(&m.path(inside));
        let (code, err) = env.fails(&["umount", m.dir.to_str().unwrap()]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!("in use by {} (sleep)", shell.pid())),
            "{err}"
        );
        assert!(
            mounted_at(&m.dir) && mounted_at(&m.path("versions")),
            "{inside}"
        );
        assert_eq!(health(&m)["versions_connection"], "own");
        assert_eq!(std::fs::read(m.path("versions/v1/d/a.csv")).unwrap(), b"1");
    }
    let pid = daemon_pid(&m);
    assert_eq!(pid, m.pid);
    env.ok(&["umount", m.dir.to_str().unwrap()]);
    // Returned once the daemon let go: the staging folder is free.
    assert!(
        common::gone(pid),
        "the daemon still runs after umount returned"
    );
    assert!(!mounted_at(&m.dir) && !mounted_at(&m.path("versions")));
    assert_eq!(
        env.ok(&["status", "ds"]).trim(),
        "A d/b.csv",
        "staging is the command's at once"
    );
}

/// `versions/`'s connection unmounted alone (`fusermount3 -u
/// MNT/versions`): health says the main connection serves it, and it
/// does; `fusermount3 -u MNT` alone is refused (busy) and `detafs umount`
/// is the one command that takes both.
#[test]
fn health_says_which_connection_serves_versions() {
    let env = Env::new();
    committed(&env);
    let m = env.mount(&[]);
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(&m.dir)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "fusermount3 -u takes the mount with versions/ inside"
    );
    assert!(mounted_at(&m.dir) && mounted_at(&m.path("versions")));
    common::run_ok(
        Command::new("fusermount3")
            .arg("-u")
            .arg(m.path("versions")),
    );
    common::within(Duration::from_secs(10), "health saying shared", || {
        health(&m)["versions_connection"] == "shared"
    });
    assert_eq!(std::fs::read(m.path("versions/v1/d/a.csv")).unwrap(), b"1");
    env.ok(&["umount", m.dir.to_str().unwrap()]);
    assert!(!mounted_at(&m.dir));
}

/// After `kill -9` of the daemon, `detafs mount` recovers: on the same
/// folder (detached and mounted again) and elsewhere (the dead mount is
/// detached, staging is free); staged work is all there.
#[test]
fn a_mount_whose_daemon_died_is_recovered() {
    let env = Env::new();
    committed(&env);
    let m = env.mount(&[]);
    std::fs::write(m.path("staging/new.txt"), "kept").unwrap();
    m.kill();
    let (mounted, err) = mount_at(&env, &m.dir);
    assert!(mounted, "{err}");
    assert!(err.contains("daemon is gone"), "{err}");
    assert_eq!(std::fs::read(m.path("staging/new.txt")).unwrap(), b"kept");
    let pid = daemon_pid(&m);
    common::signal(pid, libc::SIGKILL);
    common::within(Duration::from_secs(10), "the daemon's end", || {
        common::gone(pid)
    });
    // Elsewhere: the dead one at m.dir is detached on the way.
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let (mounted, err) = mount_at(&env, &other);
    assert!(mounted, "{err}");
    assert!(!mounted_at(&m.dir), "the dead mount was detached");
    assert_eq!(
        std::fs::read(other.join("staging/new.txt")).unwrap(),
        b"kept"
    );
    env.ok(&["umount", other.to_str().unwrap()]);
    // `detafs umount` of a dead mount detaches it too.
    let m = env.mount(&[]);
    m.kill();
    env.ok(&["umount", m.dir.to_str().unwrap()]);
    assert!(!mounted_at(&m.dir));
}

/// A lazily detached mount whose process stays inside keeps staging: a
/// new mount and the CLI name the daemon and the process; once it left,
/// they work.
#[test]
fn a_lazily_detached_mount_says_what_holds_staging() {
    let env = Env::new();
    committed(&env);
    let m = env.mount(&[]);
    let shell = Inside::new(&m.path("staging/d"));
    env.ok(&["umount", "--lazy", m.dir.to_str().unwrap()]);
    assert!(!mounted_at(&m.dir) && m.alive());
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let (mounted, err) = mount_at(&env, &other);
    assert!(!mounted, "{err}");
    for said in [
        format!("pid {}", m.pid),
        format!("in use by {} (sleep)", shell.pid()),
        "detached lazily".to_string(),
    ] {
        assert!(err.contains(&said), "{said}: {err}");
    }
    let (_, err) = env.fails(&["restore", "ds"]);
    assert!(err.contains(&format!("pid {}", m.pid)), "{err}");
    drop(shell);
    common::within(Duration::from_secs(20), "the daemon's end", || !m.alive());
    env.ok(&["mount", "ds", other.to_str().unwrap(), "--daemon"]);
    env.ok(&["umount", other.to_str().unwrap()]);
}

/// A version record that does not open with the store's key (record 2
/// replaced by a copy of record 1), or a gap, costs only itself and what
/// follows, on a fresh host too: v1 is listed, read and mounted; v2 is
/// named as damaged by log, health and verify; v3 is not served; nothing
/// is committed onto it.
#[test]
fn a_damaged_record_costs_only_itself_and_what_follows() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for v in 1..=3 {
        std::fs::write(src.join("a.csv"), format!("v{v}")).unwrap();
        env.commit(&src, &format!("v{v}"));
    }
    let key = |v: u64| format!("datasets/ds/records/{v:020}.json");
    env.objects.write(&key(2), env.objects.read(&key(1)));
    let fresh = env.other_host();
    let out = fresh.run(&["log", "ds"]);
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // Listed, then the damage is the command's error.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        said.starts_with("v1 ") && !said.contains("v2 ") && !said.contains("v3 "),
        "{said}"
    );
    assert!(err.contains("damaged at v2"), "{err}");
    assert_eq!(fresh.ok(&["cat", "ds", "v1", "a.csv"]), "v1");
    for asked in ["v3", "3", "v2"] {
        let (_, err) = fresh.fails(&["cat", "ds", asked, "a.csv"]);
        assert!(
            err.contains("damaged at v2") || err.contains("no version"),
            "{asked}: {err}"
        );
    }
    let (_, err) = fresh.fails(&["ls", "ds", "v3"]);
    assert!(err.contains("damaged at v2"), "{err}");
    let out = fresh.run(&["verify", "ds"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        said.contains("00000000000000000002") && said.contains("ds v2"),
        "{said}"
    );
    {
        let m = fresh.mount(&[]);
        assert_eq!(std::fs::read(m.path("versions/v1/a.csv")).unwrap(), b"v1");
        assert!(!m.path("versions/v2").exists() && !m.path("versions/v3").exists());
        assert_eq!(
            std::fs::read_link(m.path("versions/latest"))
                .unwrap()
                .to_str(),
            Some("v1")
        );
        let h = health(&m);
        assert_eq!(h["status"], "damaged");
        assert!(h["damaged"].as_str().unwrap().starts_with("v2: "), "{h}");
        // Nothing is committed onto a damaged history.
        std::fs::write(m.path("staging/a.csv"), "mine").unwrap();
        assert!(common::commit_via_control(&m, "onto v1").is_err());
        let error = std::fs::read_to_string(m.path(".detafs/last-error")).unwrap();
        assert!(error.contains("damaged at v2"), "{error}");
    }
    let (_, err) = fresh.fails(&["commit", "ds", "--from", src.to_str().unwrap(), "-m", "x"]);
    assert!(err.contains("damaged at v2"), "{err}");
    assert_eq!(
        env.objects.read(&key(2)),
        env.objects.read(&key(1)),
        "nothing written"
    );
    assert!(!env.objects.exists(&key(4)));

    // A gap: record 2 gone. v1 is served, and v3 is not.
    env.objects.delete(&key(2));
    let fresh = env.other_host();
    let out = fresh.run(&["log", "ds"]);
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && said.starts_with("v1 ") && !said.contains("v3 "),
        "{said}{err}"
    );
    assert!(
        err.contains("damaged at v2") && err.contains("missing"),
        "{err}"
    );
}

/// The helper mount(8) runs for an `/etc/fstab` line of type
/// `fuse.detafs` (`/sbin/mount.fuse.detafs`, this binary by that name).
struct Helper(std::path::PathBuf);

impl Helper {
    fn install() -> Helper {
        let at = std::path::PathBuf::from("/sbin/mount.fuse.detafs");
        let _ = std::fs::remove_file(&at);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_detafs"), &at).unwrap();
        Helper(at)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An fstab line of type `fuse.detafs` is mounted by `mount -a` (through
/// the helper), with every setting in its options, on a store or through
/// a gateway; a line with an option detafs does not know is refused
/// naming it, and nothing is mounted.
#[test]
fn an_fstab_line_is_mounted_by_mount_a() {
    let env = Env::new_local();
    committed(&env);
    let _helper = Helper::install();
    let mnt = env.path("boot");
    std::fs::create_dir_all(&mnt).unwrap();
    // Whatever happens below, nothing stays mounted in the test's folder.
    struct Detach(std::path::PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3").arg("-uz").arg(&self.0).output();
        }
    }
    let _detach = Detach(mnt.clone());
    let fstab = env.path("fstab");
    let line = |extra: &str| {
        format!(
            "ds {} fuse.detafs _netdev,store={},cache={},staging={},key-file={},poll-interval=1s{extra} 0 0\n",
            mnt.display(),
            env.store,
            env.cache.display(),
            env.staging().display(),
            env.key_file.display()
        )
    };
    let mount_a = || {
        Command::new("mount")
            .args(["-a", "-T"])
            .arg(&fstab)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", env.path("home"))
            .output()
            .unwrap()
    };
    std::fs::write(&fstab, line(",bogus=1")).unwrap();
    let out = mount_a();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bogus"), "{err}");
    assert!(!mounted_at(&mnt));
    std::fs::write(&fstab, line("")).unwrap();
    let out = mount_a();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounted_at(&mnt) && mounted_at(&mnt.join("versions")));
    assert_eq!(
        std::fs::read(mnt.join("versions/v1/d/a.csv")).unwrap(),
        b"1"
    );
    std::fs::write(mnt.join("staging/boot.txt"), "at boot").unwrap();
    env.ok(&["umount", mnt.to_str().unwrap()]);
    assert!(!mounted_at(&mnt));
    assert_eq!(env.ok(&["status", "ds"]).trim(), "A boot.txt");
    // A host without the store key: the line names a gateway and a key.
    let g = common::gateway::serve(&env);
    let key_file = env.path("boot.apikey");
    std::fs::write(&key_file, common::gateway::key(&env, "boot", "read")).unwrap();
    let remote = format!(
        "ds {} fuse.detafs _netdev,ro,store={},api-key-file={},ca-cert={},cache={},poll-interval=1s 0 0\n",
        mnt.display(),
        g.url,
        key_file.display(),
        common::gateway::cert(&env).display(),
        env.path("host-cache").display()
    );
    std::fs::write(&fstab, remote).unwrap();
    let out = mount_a();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(mounted_at(&mnt));
    assert_eq!(
        std::fs::read(mnt.join("versions/v1/d/a.csv")).unwrap(),
        b"1"
    );
    assert!(!mnt.join("staging").exists(), "read-only");
    env.ok(&["umount", mnt.to_str().unwrap()]);
    assert!(!mounted_at(&mnt));
}

/// The systemd units shipped in contrib/systemd/ verify
/// (`systemd-analyze verify`, where systemd is installed).
#[test]
fn the_systemd_units_verify() {
    let Ok(analyze) = which("systemd-analyze") else {
        eprintln!("systemd-analyze is not installed: the units are not verified here");
        return;
    };
    let env = Env::new();
    let dir = env.path("units");
    std::fs::create_dir_all(&dir).unwrap();
    let contrib = concat!(env!("CARGO_MANIFEST_DIR"), "/contrib/systemd");
    for (file, as_name) in [
        ("detafs-serve.service", "detafs-serve.service"),
        ("detafs-mount@.service", "detafs-mount@weather.service"),
    ] {
        // The binary where the test built it; the settings file present.
        let text = std::fs::read_to_string(format!("{contrib}/{file}"))
            .unwrap()
            .replace("/usr/local/bin/detafs", env!("CARGO_BIN_EXE_detafs"))
            .replace("/etc/detafs/", &format!("{}/", dir.display()));
        std::fs::write(dir.join(as_name), text).unwrap();
    }
    std::fs::write(dir.join("serve.env"), "DETAFS_LISTEN=127.0.0.1:8443\n").unwrap();
    std::fs::write(dir.join("weather.env"), "MOUNTPOINT=/data/weather\n").unwrap();
    for unit in ["detafs-serve.service", "detafs-mount@weather.service"] {
        let out = Command::new(&analyze)
            .args(["verify", "--man=no"])
            .arg(dir.join(unit))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{unit}: {said}");
        assert!(!said.contains(unit), "{unit}: {said}");
    }
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.exists())
        .ok_or(())
}
