//! A network partition between detafs and its S3 server. The server (a
//! LocalStack of its own) runs in a network namespace this test creates,
//! reached over a veth pair; iptables in that namespace drops its traffic.
//! (This kernel has no `netem` qdisc: a partition drops packets with
//! iptables, a slow link is a token-bucket `tbf` qdisc on both ends.)

mod common;

use common::{Env, commit_via_control, fingerprint, noise, run_ok, sample_tree, within};
use std::process::Command;
use std::time::{Duration, Instant};

/// A network namespace holding an S3 server, removed on drop.
struct Netns {
    name: String,
    subnet: u8,
    dir: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

impl Netns {
    fn new() -> Netns {
        let id: u16 = rand::random();
        let subnet = (id % 200) as u8 + 20;
        let name = format!("dfs{id:04x}");
        let (host_if, ns_if) = (format!("{name}h"), format!("{name}n"));
        ip(&["netns", "add", &name]);
        let net = Netns {
            name: name.clone(),
            subnet,
            dir: tempfile::tempdir().unwrap(),
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&[
            "addr",
            "add",
            &format!("10.213.{subnet}.1/30"),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        net.exec(&[
            "ip",
            "addr",
            "add",
            &format!("10.213.{subnet}.2/30"),
            "dev",
            &ns_if,
        ]);
        net.exec(&["ip", "link", "set", &ns_if, "up"]);
        net.exec(&["ip", "link", "set", "lo", "up"]);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/localstack.sh");
        run_ok(
            Command::new("ip")
                .args(["netns", "exec", &name, script])
                .env("LOCALSTACK_LISTEN", "0.0.0.0:4566")
                .env("LOCALSTACK_DATA", net.dir.path().join("data"))
                .env("LOCALSTACK_PIDFILE", net.dir.path().join("pid")),
        );
        net
    }

    fn exec(&self, args: &[&str]) {
        run_ok(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .args(args),
        );
    }

    fn endpoint(&self) -> String {
        format!("http://10.213.{}.2:4566", self.subnet)
    }

    /// Limits (or stops limiting) the link to `rate` both ways with a token
    /// bucket: a slow, congested link.
    fn slow(&self, rate: Option<&str>) {
        let ns_if = format!("{}n", self.name);
        let host_if = format!("{}h", self.name);
        let tbf = |dev: &str| -> Vec<String> {
            let base = [
                "qdisc",
                if rate.is_some() { "add" } else { "del" },
                "dev",
                dev,
                "root",
            ];
            let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            if let Some(r) = rate {
                args.extend(["tbf", "rate", r, "burst", "16kb", "latency", "2s"].map(String::from));
            }
            args
        };
        let ns_args = tbf(&ns_if);
        let mut all = vec!["tc"];
        all.extend(ns_args.iter().map(String::as_str));
        self.exec(&all);
        run_ok(Command::new("tc").args(tbf(&host_if)));
    }

    /// Drops (or stops dropping) every packet to the S3 server.
    fn partition(&self, on: bool) {
        let op = if on { "-A" } else { "-D" };
        self.exec(&[
            "iptables", op, "INPUT", "-p", "tcp", "--dport", "4566", "-j", "DROP",
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pid")) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
        // Deleting the namespace deletes the veth pair too.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn health(m: &common::Mount) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(m.path(".detafs/health")).unwrap()).unwrap()
}

#[test]
fn a_partition_degrades_the_mount_and_commits_retry_or_fail_cleanly() {
    let net = Netns::new();
    let env = Env::empty_s3_at(&net.endpoint());
    env.ok(&["init"]);
    env.ok(&["dataset", "create", "ds"]);
    let v1 = env.path("v1");
    sample_tree(&v1, 1);
    env.commit(&v1, "one");
    let v2 = env.path("v2");
    run_ok(Command::new("cp").arg("-a").arg(&v1).arg(&v2));
    std::fs::write(v2.join("later.bin"), noise(300_000, 5)).unwrap();
    env.commit(&v2, "two");

    let m = env.mount(&["--store-timeout", "4s"]);
    // This host reads v1 once: now it is in its cache.
    assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&v1));
    assert_eq!(health(&m)["status"], "ok");

    net.partition(true);
    let took = within(Duration::from_secs(20), "degraded health", || {
        health(&m)["status"] == "degraded"
    });
    eprintln!(
        "health degraded {took:?} after the partition: {}",
        health(&m)
    );
    // Cached versions are still served.
    assert_eq!(fingerprint(&m.path("versions/v1")), fingerprint(&v1));
    // What is not cached fails with EIO after the deadline, never hangs.
    let t = Instant::now();
    let err = std::fs::read(m.path("versions/v2/later.bin")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    eprintln!("uncached read failed after {:?}", t.elapsed());
    // More uncached reads than the mount has workers: the ones past the
    // workers wait in a queue, not on the kernel's request thread, so a
    // request answered from memory (a lookup in a cached folder) still
    // returns at once, while every read is still waiting on the store.
    // Direct I/O at distinct offsets: page-cache reads of one file would
    // wait for each other in the kernel and send one request at a time.
    let readers: Vec<_> = (0..24)
        .map(|i| {
            Command::new("dd")
                .arg(format!("if={}", m.path("versions/v2/later.bin").display()))
                .args(["of=/dev/null", "bs=4096", "count=1", "iflag=direct"])
                .arg(format!("skip={}", i * 3))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Longer than the root's entries live in the kernel (1 s): the path
    // walk looks `versions` up in the root again, which must not wait
    // behind the reads either. (The kernel's clock is the condition.)
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    let missing = std::fs::metadata(m.path("versions/v1/no-such-file")).unwrap_err();
    let took = t.elapsed();
    eprintln!("a lookup beside 24 waiting reads took {took:?}");
    // Less than the store timeout: it waited on no store request.
    assert!(took < Duration::from_secs(4), "the lookup waited {took:?}");
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    let mut readers = readers;
    let finished = readers
        .iter_mut()
        .filter_map(|c| c.try_wait().unwrap())
        .count();
    let waiting = 24 - finished;
    assert_eq!(waiting, 24, "the lookup waited for store reads");
    for mut c in readers {
        assert!(!c.wait().unwrap().success(), "read failed with EIO");
    }
    // A commit from the CLI fails cleanly once its deadline passes.
    let v3 = env.path("v3");
    run_ok(Command::new("cp").arg("-a").arg(&v2).arg(&v3));
    std::fs::write(v3.join("third.txt"), b"third").unwrap();
    let out = env
        .command()
        .args(["--store-timeout", "3s", "commit", "ds", "--from"])
        .arg(&v3)
        .args(["-m", "during the partition"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a commit landed through a partition");
    eprintln!(
        "commit failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    // So does a commit through the mount, and staging keeps the change.
    let staged = std::fs::write(m.path("staging/staged.txt"), b"staged");
    assert!(staged.is_ok(), "{staged:?}: {}", m.log());
    assert!(commit_via_control(&m, "through the mount").is_err());
    assert_eq!(
        std::fs::read_to_string(m.path(".detafs/status")).unwrap(),
        "A staged.txt\n"
    );

    net.partition(false);
    let took = within(Duration::from_secs(20), "healthy again", || {
        health(&m)["status"] == "ok"
    });
    eprintln!("health ok {took:?} after the partition healed");
    let healed = std::fs::read(m.path("versions/v2/later.bin"));
    assert!(healed.is_ok(), "{healed:?}: {}", m.log());
    assert_eq!(healed.unwrap(), noise(300_000, 5));
    assert_eq!(env.log().len(), 2, "no version from the failed commits");

    // A partition that starts during a commit and heals within its deadline:
    // the commit retries and lands, whole.
    std::fs::write(v3.join("big.bin"), noise(24_000_000, 7)).unwrap();
    let uploaded = common::Hold::new(&env, "pack-uploaded");
    let child = env
        .command()
        .args(["--store-timeout", "60s", "commit", "ds", "--from"])
        .arg(&v3)
        .args(["-m", "across the partition"])
        .env("FAILPOINTS", &uploaded.spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its first pack is in the store; the rest goes into the partition,
    // which lasts 4 s (well within the commit's deadline).
    uploaded.reached();
    net.partition(true);
    uploaded.release();
    std::thread::sleep(Duration::from_secs(4));
    net.partition(false);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = env.log();
    assert_eq!(log.len(), 3);
    let export = env.path("export-v3");
    env.ok(&["export", "ds", "v3", export.to_str().unwrap()]);
    assert_eq!(fingerprint(&export), fingerprint(&v3));
    std::fs::remove_dir_all(&export).unwrap();
    // A slow link (a latency spike for every request): the commit takes
    // longer and lands.
    std::fs::write(v3.join("slow.bin"), noise(2_000_000, 8)).unwrap();
    net.slow(Some("4mbit"));
    let t = Instant::now();
    env.commit(&v3, "over a slow link");
    eprintln!("commit of 2 MB over a 4 Mbit/s link took {:?}", t.elapsed());
    net.slow(None);
    assert_eq!(env.log().len(), 4);
    // No orphaned record: the history verifies (garbage from the failed
    // attempts is allowed; gc removes it).
    env.ok(&["verify"]);
    // The change staged during the partition commits now (rebased onto v3).
    commit_via_control(&m, "after healing").unwrap();
    assert_eq!(env.log().len(), 5);
    assert_eq!(
        env.ok(&["cat", "ds", "v5", "staged.txt"]),
        "staged",
        "staged bytes survived"
    );
}

#[test]
fn the_gateway_waits_out_a_short_partition_and_answers_503_for_a_long_one() {
    use common::gateway::{bearer, curl, json_of, key, post_json, serve_with};
    let net = Netns::new();
    let env = Env::empty_s3_at(&net.endpoint());
    env.ok(&["init"]);
    env.ok(&["dataset", "create", "ds"]);
    let k = key(&env, "k", "read,commit");
    let g = serve_with(&env, &["--store-timeout", "8s"]);
    let url = format!("{}/datasets/ds/commit", g.url);
    let post = {
        let (url, k) = (url.clone(), k.clone());
        move |name: &str| {
            let body = serde_json::json!({"commit_message": name, "files": {name: "eA=="}});
            post_json(&url, &k, &body.to_string())
        }
    };
    // Keys and the policy are read before the network goes.
    assert_eq!(
        curl(&[&format!("{}/datasets", g.url), "-H", &bearer(&k)]).0,
        200
    );
    // A partition shorter than the store timeout: the commit lands.
    net.partition(true);
    let p = post.clone();
    let short = std::thread::spawn(move || p("a.txt"));
    // Healed once the commit has met the partition (its store requests
    // fail: /health says the store is unreachable).
    within(
        Duration::from_secs(30),
        "the commit to meet the partition",
        || {
            let (_, h) = curl(&[&format!("{}/health", g.url)]);
            json_of(&h)["store"]["reachable"] == false
        },
    );
    net.partition(false);
    let (s, b) = short.join().unwrap();
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    // Longer: 503 with the store's message, /health says so, and once the
    // network is back no version of it shows.
    net.partition(true);
    let (s, b) = post("b.txt");
    assert_eq!(s, 503, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["error"]["code"], "store_unavailable");
    let (s, h) = curl(&[&format!("{}/health", g.url)]);
    assert_eq!(s, 503, "{}", String::from_utf8_lossy(&h));
    assert_eq!(json_of(&h)["store"]["reachable"], false);
    net.partition(false);
    let log = env.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(env.ok(&["ls", "ds", "latest"]).lines().count(), 1);
    assert!(env.run(&["audit", "ds"]).status.success());
    // And it recovers.
    let (s, b) = post("c.txt");
    assert_eq!(s, 201, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)["version_id"], "v2");
    within(Duration::from_secs(10), "health back", || {
        curl(&[&format!("{}/health", g.url)]).0 == 200
    });
}
