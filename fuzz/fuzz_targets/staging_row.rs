//! Staging's row codec: a row of any values decodes strictly or fails,
//! never as a wrong kind of node.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rusqlite::params;

#[derive(Arbitrary, Debug)]
struct Row {
    parent: i64,
    name: Vec<u8>,
    kind: i64,
    mode: i64,
    uid: i64,
    gid: i64,
    mtime_s: i64,
    mtime_ns: i64,
    size: i64,
    chunks: Option<Vec<u8>>,
    tree: Option<Vec<u8>>,
    upper: i64,
    target: Option<Vec<u8>>,
    was: Option<Vec<u8>>,
    rdev: i64,
    atime: (Option<i64>, Option<i64>),
    ctime: (Option<i64>, Option<i64>),
}

thread_local! {
    static DB: rusqlite::Connection = {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(detafs::staging::SCHEMA).unwrap();
        detafs::staging::sealed_names::register(&db, &Default::default()).unwrap();
        db
    };
}

fuzz_target!(|row: Row| {
    DB.with(|db| {
        db.execute("DELETE FROM nodes", []).unwrap();
        db.execute(
            "INSERT INTO nodes(parent, name, kind, mode, uid, gid, mtime_s, mtime_ns, size, chunks, tree, upper, target, was,
                               rdev, atime_s, atime_ns, ctime_s, ctime_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            params![row.parent, row.name, row.kind, row.mode, row.uid, row.gid, row.mtime_s,
                    row.mtime_ns, row.size, row.chunks, row.tree, row.upper, row.target, row.was,
                    row.rdev, row.atime.0, row.atime.1, row.ctime.0, row.ctime.1],
        )
        .unwrap();
        let sql = format!("SELECT {} FROM nodes", detafs::staging::COLUMNS);
        let decoded = db.query_row(&sql, [], detafs::staging::row);
        if let Ok(n) = decoded {
            assert!((0..=6).contains(&row.kind));
            assert!(n.mode <= 0o7777);
            for t in [Some(n.mtime), n.atime, n.ctime].into_iter().flatten() {
                assert!(t.1 < 1_000_000_000);
            }
        }
    });
});
