//! Mounting at boot: `mount.fuse.detafs` (and `mount.detafs`), the helper
//! mount(8) runs for an `/etc/fstab` line of type `fuse.detafs` (or
//! `detafs`), is this binary under that name. It reads the line's
//! options as `detafs mount`'s and mounts as a daemon:
//!
//! ```text
//! weather  /data/weather  fuse.detafs  _netdev,store=s3://bucket/x,key-file=/etc/detafs/key  0 0
//! ```

use anyhow::bail;
use std::ffi::OsString;

/// Whether this process was started as the mount helper (by its name).
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    let name = std::path::Path::new(argv0)
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    matches!(name.as_ref(), "mount.detafs" | "mount.fuse.detafs")
}

/// Options that concern mount(8), systemd or the kernel's generic mount
/// flags, not detafs: taken and ignored.
const THEIRS: [&str; 17] = [
    "defaults", "auto", "noauto", "_netdev", "nofail", "user", "users", "nouser", "owner", "group",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "rw",
];

/// `detafs mount`'s command line for the helper's `SOURCE DIR [-o OPTS]
/// [-s] [-f] [-n] [-v]` (as mount(8) calls it); None for a fake mount
/// (`-f`), which does nothing.
pub fn command_line(args: &[OsString]) -> anyhow::Result<Option<Vec<OsString>>> {
    let mut plain = Vec::new();
    let mut options = Vec::new();
    let (mut sloppy, mut fake) = (false, false);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => match it.next() {
                Some(o) => options.extend(o.to_string_lossy().split(',').map(str::to_string)),
                None => bail!("-o needs options"),
            },
            Some("-s") => sloppy = true,
            Some("-f") => fake = true,
            Some("-n" | "-v") => {}
            Some(flag) if flag.starts_with('-') => bail!("unknown flag {flag} for mount.detafs"),
            _ => plain.push(a.clone()),
        }
    }
    let [source, dir] = plain.as_slice() else {
        bail!("usage: mount.detafs DATASET DIR [-o store=…,key-file=…,ro,allow_other] [-s] [-f]");
    };
    let mut globals: Vec<OsString> = vec!["detafs".into()];
    let mut mount: Vec<OsString> = vec![
        "mount".into(),
        source.clone(),
        dir.clone(),
        "--daemon".into(),
    ];
    for o in options.iter().filter(|o| !o.is_empty()) {
        let (key, value) = match o.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (o.as_str(), None),
        };
        let global = |flag: &str| [format!("--{flag}"), value.unwrap_or_default().to_string()];
        match (key, value) {
            (
                "store" | "cache-dir" | "staging-dir" | "key-file" | "password-file" | "cache-size"
                | "store-timeout" | "sse" | "api-key-file" | "token-file" | "ca-cert",
                Some(_),
            ) => globals.extend(global(key).map(Into::into)),
            ("cache", Some(_)) => globals.extend(global("cache-dir").map(Into::into)),
            ("staging", Some(_)) => globals.extend(global("staging-dir").map(Into::into)),
            ("poll-interval", Some(v)) => {
                mount.extend(["--poll-interval".into(), v.into()]);
            }
            ("ro" | "read-only", None) => mount.push("--read-only".into()),
            ("allow_other" | "allow-other", None) => mount.push("--allow-other".into()),
            ("nonempty", None) => mount.push("--nonempty".into()),
            (k, _) if THEIRS.contains(&k) || k.starts_with("x-") || k == "comment" => {}
            _ if sloppy => {}
            _ => bail!(
                "mount.detafs: unknown option {o:?} (detafs takes store=, key-file=, password-file=, api-key-file=, token-file=, ca-cert=, cache=, staging=, cache-size=, store-timeout=, sse=, poll-interval=, ro, allow_other, nonempty)"
            ),
        }
    }
    if fake {
        return Ok(None);
    }
    globals.extend(mount);
    Ok(Some(globals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> anyhow::Result<Option<Vec<String>>> {
        let args: Vec<OsString> = args.iter().map(Into::into).collect();
        Ok(command_line(&args)?.map(|v| v.into_iter().map(|a| a.into_string().unwrap()).collect()))
    }

    #[test]
    fn an_fstab_lines_options_are_detafs_mounts() {
        let got = line(&[
            "mount.fuse.detafs",
            "weather",
            "/data/weather",
            "-o",
            "rw,_netdev,store=s3://b/x,key-file=/k,ro,allow_other,poll-interval=5s,x-systemd.automount",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            got,
            [
                "detafs",
                "--store",
                "s3://b/x",
                "--key-file",
                "/k",
                "mount",
                "weather",
                "/data/weather",
                "--daemon",
                "--read-only",
                "--allow-other",
                "--poll-interval",
                "5s"
            ]
        );
        // Through a gateway: its key and certificate files.
        let got = line(&[
            "mount.fuse.detafs",
            "w",
            "/d",
            "-o",
            "_netdev,ro,store=https://g:1,api-key-file=/k,ca-cert=/c",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            got[1..7],
            [
                "--store",
                "https://g:1",
                "--api-key-file",
                "/k",
                "--ca-cert",
                "/c"
            ]
        );
        assert!(line(&["mount.detafs", "w", "/d", "-o", "bogus=1"]).is_err());
        assert!(line(&["mount.detafs", "w", "/d", "-s", "-o", "bogus=1"]).is_ok());
        assert!(line(&["mount.detafs", "w", "/d", "-f"]).unwrap().is_none());
        assert!(line(&["mount.detafs", "w"]).is_err());
        assert!(line(&["mount.detafs", "w", "/d", "-o", "store"]).is_err());
    }
}
