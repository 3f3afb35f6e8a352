//! Requests the kernel sent, by kind, on every connection of the mount
//! (`.detafs/health`): what an operation costs in round trips to the
//! daemon, for users and benchmarks (`cp -a` into staging: requests per
//! file).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! ops {
    ($($op:ident => $name:literal),* $(,)?) => {
        /// A kind of kernel request.
        #[derive(Clone, Copy)]
        pub enum Op { $($op),* }
        const NAMES: &[&str] = &[$($name),*];
    };
}

ops! {
    Lookup => "lookup", Forget => "forget", Getattr => "getattr",
    Setattr => "setattr", Readlink => "readlink", Mknod => "mknod",
    Mkdir => "mkdir", Unlink => "unlink", Rmdir => "rmdir",
    Symlink => "symlink", Rename => "rename", Link => "link",
    Open => "open", Read => "read", Write => "write", Flush => "flush",
    Release => "release", Fsync => "fsync", Opendir => "opendir",
    Readdir => "readdir", Readdirplus => "readdirplus",
    Releasedir => "releasedir", Statfs => "statfs", Xattr => "xattr",
    Ioctl => "ioctl", Create => "create", Fallocate => "fallocate",
}

#[derive(Default)]
pub struct Requests([AtomicU64; NAMES.len()]);

impl Requests {
    pub fn seen(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The kinds seen so far and how many of each, and their total.
    pub fn to_json(&self) -> serde_json::Value {
        let mut total = 0;
        let mut by = serde_json::Map::new();
        for (n, name) in self.0.iter().zip(NAMES) {
            let n = n.load(Ordering::Relaxed);
            total += n;
            if n > 0 {
                by.insert((*name).into(), n.into());
            }
        }
        by.insert("total".into(), total.into());
        by.into()
    }
}
