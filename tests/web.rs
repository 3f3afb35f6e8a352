//! The web page in a real browser: headless Chromium (Debian's
//! `chromium` and `chromium-driver`) driven by Selenium
//! (tests/py/web_browser.py) against `detafs serve` on 127.0.0.1. The
//! script signs in, walks the log, pages a folder of 20,000 files,
//! previews CSV and Parquet, diffs, follows a path's history, reads the
//! audit and health, checks keyboard focus and a phone's width, signs out;
//! then, as a key a policy hides a version and a folder from, it finds
//! neither in any page, link or error. Files named and filled with HTML
//! stay text (no script runs). A screenshot of each page is saved
//! (`DETAFS_WEB_SHOTS`, else the test's folder).

mod common;

use common::Env;
use common::gateway::{key, serve, set_policy_and_wait};
use std::process::Command;

/// v1 with text, tables, a folder of 20,000 files, names and cells that
/// hold markup and a private folder; v2 (hidden from the analyst) adds a
/// file; v3 changes the text and a table, tagged `published`.
fn dataset(env: &Env) {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("tables")).unwrap();
    std::fs::create_dir_all(src.join("private")).unwrap();
    std::fs::create_dir_all(src.join("many")).unwrap();
    std::fs::write(src.join("readme.txt"), "hello\n<b>world</b>\n").unwrap();
    std::fs::write(
        src.join("tables/weather.csv"),
        "city,temp\nOslo,3\n\"<script>alert(1)</script>\",30\n",
    )
    .unwrap();
    std::fs::write(
        src.join("<img src=x onerror=alert(1)>.csv"),
        "a\n<img src=y onerror=alert(2)>\n",
    )
    .unwrap();
    std::fs::write(src.join("private/secret.csv"), "name\nJane\n").unwrap();
    for i in 0..20_000 {
        std::fs::write(src.join(format!("many/f{i:05}")), "").unwrap();
    }
    let parquet = src.join("tables/t.parquet");
    common::run_ok(Command::new("python3").args([
        "-c",
        "import sys, pyarrow as pa, pyarrow.parquet as pq\n\
         t = pa.table({'id': list(range(1000)), 'name': ['n%d' % i for i in range(1000)], 'v': [i * 0.5 for i in range(1000)]})\n\
         pq.write_table(t, sys.argv[1])",
        parquet.to_str().unwrap(),
    ]));
    env.commit(&src, "first");
    std::fs::write(src.join("notes-of-the-hidden-version.txt"), "only there\n").unwrap();
    env.commit(&src, "second");
    std::fs::remove_file(src.join("notes-of-the-hidden-version.txt")).unwrap();
    std::fs::write(src.join("readme.txt"), "hello\nthere\n").unwrap();
    std::fs::write(
        src.join("tables/weather.csv"),
        "city,temp\nOslo,4\nLima,19\n",
    )
    .unwrap();
    env.commit(&src, "third");
    env.ok(&["tag", "ds", "v3", "published"]);
}

#[test]
fn the_web_page_in_a_real_browser() {
    let env = Env::new();
    dataset(&env);
    set_policy_and_wait(
        &env,
        "policies:\n  - {name: admins, effect: allow, principals: [\"user:root\", \"key:officer\"], actions: [\"dataset:*\"], resources: [\"*\"]}\n  - {name: use, effect: allow, principals: [\"key:analyst\"], actions: [\"dataset:read\", \"dataset:versions\"], resources: [\"datasets/ds\"]}\n  - {name: not_v2, effect: deny, principals: [\"key:analyst\"], actions: [\"dataset:versions\"], resources: [\"datasets/ds/versions/v2\"]}\n  - {name: no_private, effect: deny, principals: [\"key:analyst\"], actions: [\"dataset:read\"], resources: [\"datasets/ds/versions/*/files/private/*\"]}\n",
    );
    let officer = key(&env, "officer", "admin");
    let analyst = key(&env, "analyst", "read");
    let g = serve(&env);
    let shots = std::env::var_os("DETAFS_WEB_SHOTS")
        .map_or_else(|| env.path("shots"), std::path::PathBuf::from);
    std::fs::create_dir_all(&shots).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/web_browser.py");
    let out = Command::new("python3")
        .args([script, &g.url, &officer, &analyst, shots.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [
        "login", "datasets", "log", "folder", "csv", "parquet", "diff", "history", "audit",
    ] {
        assert!(shots.join(format!("{page}.png")).exists(), "{page}.png");
    }
}
