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
    // A 2x2 PNG, made by its specification's own pieces.
    common::run_ok(Command::new("python3").args([
        "-c",
        "import struct, sys, zlib\n\
         def chunk(kind, data):\n\
         \x20   return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n\
         raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 2 for _ in range(2))\n\
         png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 2, 2, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n\
         open(sys.argv[1], 'wb').write(png)",
        src.join("plot.png").to_str().unwrap(),
    ]));
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

/// `curl` with a cookie jar: status, headers and body.
fn browse(jar: &std::path::Path, args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-sk",
            "-D",
            "-",
            "-c",
            jar.to_str().unwrap(),
            "-b",
            jar.to_str().unwrap(),
        ])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// The session's rules without a browser: its cookie is `HttpOnly`,
/// `Secure` and `SameSite=Strict`; the sign-in form's CSRF token must come
/// back with it; sign-out without the session's CSRF token changes
/// nothing; a key revoked ends its session at the next page.
#[test]
fn a_session_is_bound_to_its_key_and_forms_to_their_tokens() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), "a\n").unwrap();
    env.commit(&src, "one");
    let reader = key(&env, "reader", "read");
    let g = serve(&env);
    let jar = env.path("jar");
    let at = |p: &str| format!("{}{p}", g.url);
    let csrf = |body: &str| {
        let at = body.find("name=\"csrf\" value=\"").unwrap() + 19;
        body[at..at + 64].to_string()
    };
    let (status, _, _) = browse(&jar, &[&at("/ui/")]);
    assert_eq!(status, 303, "signed out: to the sign-in page");
    let (_, head, form) = browse(&jar, &[&at("/ui/login")]);
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(csrf(&form).bytes().all(|b| b.is_ascii_hexdigit()));
    let sign_in = |token: &str| {
        browse(
            &jar,
            &[
                "--data-urlencode",
                &format!("key={reader}"),
                "--data",
                &format!("csrf={token}"),
                &at("/ui/login"),
            ],
        )
    };
    let (status, _, body2) = sign_in(&"0".repeat(64));
    assert_eq!(status, 401, "a form without its token: {body2}");
    let token = csrf(&body2);
    let (status, head, _) = sign_in(&token);
    assert_eq!(status, 303, "{head}");
    let cookie = head
        .lines()
        .find(|l| l.starts_with("set-cookie: detafs_session="))
        .unwrap();
    for flag in [
        "httponly",
        "secure",
        "samesite=strict",
        "path=/ui",
        "max-age=3600",
    ] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    let (status, _, page) = browse(&jar, &[&at("/ui/datasets/ds")]);
    assert!(status == 200 && page.contains("one"), "{status}");
    let (status, _, _) = browse(&jar, &["--data", "csrf=nope", &at("/ui/logout")]);
    assert_eq!(status, 403, "sign-out without the session's token");
    assert_eq!(browse(&jar, &[&at("/ui/")]).0, 200, "still signed in");
    env.ok(&["apikey", "revoke", "reader"]);
    let (status, head, _) = browse(&jar, &[&at("/ui/datasets/ds")]);
    assert!(
        status == 303 && head.contains("location: /ui/login"),
        "{head}"
    );
}

/// The audit page marks a broken chain: a record rewritten in the store
/// (its message) breaks the next one's link, and the page says a check
/// failed and which version is broken, to whoever may see that version.
#[test]
fn the_audit_page_marks_a_broken_chain() {
    let env = Env::new_plaintext();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for v in ["v1", "v2", "v3"] {
        std::fs::write(src.join("a.txt"), v).unwrap();
        env.commit(&src, v);
    }
    let reader = key(&env, "reader", "read");
    let g = serve(&env);
    let jar = env.path("jar");
    let at = |p: &str| format!("{}{p}", g.url);
    let (_, _, form) = browse(&jar, &[&at("/ui/login")]);
    let csrf = {
        let i = form.find("name=\"csrf\" value=\"").unwrap() + 19;
        form[i..i + 64].to_string()
    };
    let (status, _, _) = browse(
        &jar,
        &[
            "--data-urlencode",
            &format!("key={reader}"),
            "--data",
            &format!("csrf={csrf}"),
            &at("/ui/login"),
        ],
    );
    assert_eq!(status, 303);
    let (_, _, page) = browse(&jar, &[&at("/ui/datasets/ds/audit")]);
    assert!(
        page.contains("Every chain check holds") && !page.contains("BROKEN"),
        "{page}"
    );
    let record = "datasets/ds/records/00000000000000000002.json";
    let forged = String::from_utf8(env.objects.read(record))
        .unwrap()
        .replace("\"v2\"", "\"rewritten\"");
    env.objects.write(record, forged.into_bytes());
    let (status, _, page) = browse(&jar, &[&at("/ui/datasets/ds/audit")]);
    assert_eq!(status, 200);
    assert!(
        page.contains("A check failed") && page.contains("BROKEN"),
        "{page}"
    );
    assert!(
        page.contains("parent hash does not match record v2"),
        "{page}"
    );
}

/// A Parquet file of one column, snappy-compressed, whose first page's
/// header claims `claimed` bytes decompressed (a header of the same length
/// as the one written, so every offset stays right).
#[allow(deprecated)]
fn parquet_claiming(claimed: i32) -> Vec<u8> {
    use parquet::file::reader::FileReader;
    use parquet::thrift::TSerializable;
    let schema = std::sync::Arc::new(
        parquet::schema::parser::parse_message_type("message t { required int32 a; }").unwrap(),
    );
    let props = parquet::file::properties::WriterProperties::builder()
        .set_dictionary_enabled(false)
        .set_data_page_size_limit(4 << 20)
        .set_data_page_row_count_limit(usize::MAX)
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let mut out = Vec::new();
    let mut w =
        parquet::file::writer::SerializedFileWriter::new(&mut out, schema, props.into()).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    let values: Vec<i32> = (0..1_500_000).collect();
    col.typed::<parquet::data_type::Int32Type>()
        .write_batch(&values, None, None)
        .unwrap();
    col.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
    let reader =
        parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(out.clone())).unwrap();
    let at = usize::try_from(reader.metadata().row_group(0).column(0).data_page_offset()).unwrap();
    let mut input = thrift::protocol::TCompactInputProtocol::new(&out[at..]);
    let mut header = parquet::format::PageHeader::read_from_in_protocol(&mut input).unwrap();
    let mut old = Vec::new();
    header
        .write_to_out_protocol(&mut thrift::protocol::TCompactOutputProtocol::new(&mut old))
        .unwrap();
    header.uncompressed_page_size = claimed;
    let mut new = Vec::new();
    header
        .write_to_out_protocol(&mut thrift::protocol::TCompactOutputProtocol::new(&mut new))
        .unwrap();
    assert_eq!(
        old.len(),
        new.len(),
        "the claim must keep the header's length"
    );
    out[at..at + new.len()].copy_from_slice(&new);
    out
}

/// Crafted table files preview as what they are, never at the gateway's
/// memory: a Parquet footer claiming a gigabyte, a page claiming 100 MiB
/// decompressed (refused before the reader makes a buffer of that size),
/// a file that only ends like Parquet, a CSV whose cells hold markup
/// (text, not HTML).
#[test]
fn crafted_files_preview_as_an_error_or_text() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("page.parquet"), parquet_claiming(100 << 20)).unwrap();
    let mut bomb = vec![b'P', b'A', b'R', b'1'];
    bomb.extend(vec![0u8; 4096]);
    bomb.extend((1u32 << 30).to_le_bytes());
    bomb.extend(b"PAR1");
    std::fs::write(src.join("bomb.parquet"), &bomb).unwrap();
    std::fs::write(src.join("junk.parquet"), b"not a table at all").unwrap();
    std::fs::write(src.join("t.csv"), "a\n\"<script>x</script>\"\n").unwrap();
    env.commit(&src, "crafted");
    let reader = key(&env, "reader", "read");
    let g = serve(&env);
    let preview = |p: &str| {
        let (status, body) = common::gateway::curl(&[
            "-H",
            &format!("Authorization: Bearer {reader}"),
            &format!("{}/datasets/ds/versions/latest/preview/{p}", g.url),
        ]);
        (status, common::gateway::json_of(&body))
    };
    for p in ["bomb.parquet", "junk.parquet", "page.parquet"] {
        let (status, v) = preview(p);
        assert_eq!(status, 200, "{p}: {v}");
        assert_eq!(v["kind"], "binary", "{p}: {v}");
        assert!(v["problem"].is_string(), "{p}: {v}");
    }
    let (_, v) = preview("page.parquet");
    let problem = v["problem"].as_str().unwrap();
    assert!(
        problem.contains(&format!("a page of {} bytes decompressed", 100 << 20)),
        "{problem}"
    );
    let (_, v) = preview("t.csv");
    assert_eq!(v["rows"][0][0], "<script>x</script>", "{v}");
}
