//! A file's first rows or lines, over REST (what the web page shows of a
//! file; any client may ask): `GET
//! /datasets/{id}/versions/{v}/preview/{path}?rows=N`.
//!
//! - CSV, TSV and JSON lines: a table of the first rows, with each
//!   column's type as its cells suggest (integer, number, boolean, text);
//! - Parquet: a table of the first rows with the schema's types, the file
//!   read by ranges (its footer, then the first pages of each column: a
//!   few MiB of a file of any size, `bytes_read` says how many);
//! - images (PNG, JPEG, GIF, WebP, by their first bytes): their type;
//! - text: its first lines;
//! - anything else: its size and, where its first bytes tell, its type.
//!
//! The file is found and checked by the one read rule (`Caller::readable`)
//! as a download is.

use super::core::{Api, ApiError, Reply, err, query_number};
use super::logline::asking;
use super::rest::{InVersion, READS};
use super::sniff::{binary_type, image_type};
use super::table::Format;
use crate::read::chunks::ChunkCache;
use crate::snapshot::Node;
use crate::store::pack::BlobRef;
use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rows shown by default, and at most.
const ROWS: usize = 100;
const MAX_ROWS: usize = 1_000;
/// Bytes of a text or table file read for its preview.
const HEAD: u64 = 1 << 20;
/// Lines of text shown at most.
const MAX_LINES: usize = 2_000;
/// A Parquet reader's reads of the file, at least this many bytes each.
const WINDOW: u64 = 256 << 10;
/// Most bytes one preview reads of a file, and most bytes of a Parquet
/// file's footer: a crafted file (a footer or pages claiming gigabytes)
/// costs an error, not the gateway's memory.
const MAX_READ: u64 = 64 << 20;
const MAX_FOOTER: u64 = 16 << 20;
/// Most bytes a Parquet page may say it holds decompressed, and most of
/// them one preview decompresses: a page header is believed (the reader
/// makes a buffer of the size it claims), so it is read first.
const MAX_PAGE: u64 = 64 << 20;
const MAX_DECODED: u64 = 256 << 20;
/// Most bytes of a page header (its statistics included).
const MAX_HEADER: u64 = 1 << 20;

pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new().route(
        "/datasets/{id}/versions/{v}/preview/{*path}",
        asking(READS, get(preview)),
    )
}

async fn preview(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    at: InVersion,
) -> Reply {
    let rows = query_number(&q, "rows", ROWS)?.clamp(1, MAX_ROWS);
    let caller = api.caller(&headers).await?;
    let (_, record, versions) = api.visible_version(&caller, &at.id, &at.v).await?;
    let cache = api.chunks.clone();
    let out = api
        .run(move |repo| {
            let node = repo.lookup(&record.tree, &at.path)?;
            let node = caller.readable(&record, &versions, &at.path, node)?;
            let name = at.path.to_string();
            match node {
                Node::File { chunks, size, .. } => {
                    let file = Ranges::new(cache, chunks, size);
                    Ok(of_file(&file, &name, rows)?)
                }
                Node::Dir { .. } => Err(err(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("{name} is a folder: list it at files/{name}"),
                )),
                Node::Symlink { target, .. } => Ok(json!({
                    "kind": "symlink",
                    "target": String::from_utf8_lossy(&target),
                })),
                Node::Special { kind, .. } => Ok(json!({"kind": "special", "type": kind})),
            }
        })
        .await?;
    Ok(Json(out).into_response())
}

/// A version file's bytes, read by range through the chunk cache (each
/// chunk verified as it is read), counting what was read.
struct Ranges {
    cache: Arc<ChunkCache>,
    chunks: Vec<BlobRef>,
    size: u64,
    read: AtomicU64,
    /// The last window read (its offset): a reader asks for the same
    /// bytes more than once (Parquet: a page's header, then the page).
    last: parking_lot::Mutex<(u64, Bytes)>,
}

impl Ranges {
    fn new(cache: Arc<ChunkCache>, chunks: Vec<BlobRef>, size: u64) -> Arc<Ranges> {
        Arc::new(Ranges {
            cache,
            chunks,
            size,
            read: AtomicU64::new(0),
            last: Default::default(),
        })
    }

    /// Bytes `[start, end)`, read a window at least at a time.
    fn range(&self, start: u64, end: u64) -> crate::error::Result<Bytes> {
        let end = end.min(self.size);
        if start >= end {
            return Ok(Bytes::new());
        }
        let mut last = self.last.lock();
        let (at, kept) = &*last;
        if *at <= start && end <= at + kept.len() as u64 {
            let from = crate::limits::to_usize(start - at);
            return Ok(kept.slice(from..from + crate::limits::to_usize(end - start)));
        }
        let to = end.max(start.saturating_add(WINDOW)).min(self.size);
        if self.read.load(Ordering::Relaxed) + (to - start) > MAX_READ {
            return Err(crate::error::Error::InvalidInput(format!(
                "a preview reads at most {MAX_READ} bytes of a file"
            )));
        }
        let parts = self
            .cache
            .slices(&self.chunks, start, to, false)?
            .expect("all is read when not memory-only");
        self.read.fetch_add(to - start, Ordering::Relaxed);
        let window = match parts.len() {
            1 => parts.into_iter().next().expect("one"),
            _ => Bytes::from(parts.concat()),
        };
        *last = (start, window.clone());
        Ok(window.slice(..crate::limits::to_usize(end - start)))
    }
}

fn of_file(file: &Arc<Ranges>, name: &str, rows: usize) -> Result<Value, ApiError> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".parquet") || lower.ends_with(".pq") {
        return parquet(file, rows).or_else(|e| {
            Ok(json!({"kind": "binary", "size": file.size, "type": "parquet", "problem": e}))
        });
    }
    let head = file.range(0, HEAD)?;
    if let Some(image) = image_type(&head) {
        return Ok(json!({"kind": "image", "size": file.size, "type": image}));
    }
    // What is read of it ends at a line's end (or the file's).
    let whole = file.size <= HEAD;
    let text = match std::str::from_utf8(&head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).expect("valid")
        }
        Err(_) => "\0",
    };
    if text.contains('\0') {
        return Ok(json!({"kind": "binary", "size": file.size, "type": binary_type(&head)}));
    }
    let text = match whole {
        true => text,
        false => text.rsplit_once('\n').map_or(text, |(t, _)| t),
    };
    if let Some(format) = Format::of(name) {
        let t = format.table(text, rows);
        let columns: Vec<Value> = t
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": c, "type": cell_type(t.rows.iter().filter_map(|r| r.get(i)))}))
            .collect();
        return Ok(json!({
            "kind": "table", "size": file.size, "columns": columns, "rows": t.rows,
            "truncated": t.truncated || !whole,
        }));
    }
    let lines: Vec<&str> = text.lines().take(MAX_LINES).collect();
    let truncated = !whole || text.lines().nth(MAX_LINES).is_some();
    Ok(json!({"kind": "text", "size": file.size, "lines": lines, "truncated": truncated}))
}

/// The type most cells of a column share: integer, number, boolean, text.
fn cell_type<'a>(cells: impl Iterator<Item = &'a Value>) -> &'static str {
    let mut kinds = cells.filter_map(|c| {
        let s = match c {
            Value::Null => return None,
            Value::Bool(_) => return Some("boolean"),
            Value::Number(n) if n.is_i64() || n.is_u64() => return Some("integer"),
            Value::Number(_) => return Some("number"),
            Value::String(s) if s.is_empty() => return None,
            Value::String(s) => s,
            _ => return Some("json"),
        };
        Some(if s.parse::<i64>().is_ok() {
            "integer"
        } else if s.parse::<f64>().is_ok() {
            "number"
        } else if s == "true" || s == "false" {
            "boolean"
        } else {
            "text"
        })
    });
    let Some(first) = kinds.next() else {
        return "text";
    };
    kinds
        .try_fold(first, |a, b| match (a, b) {
            (a, b) if a == b => Some(a),
            ("integer", "number") | ("number", "integer") => Some("number"),
            _ => None,
        })
        .unwrap_or("text")
}

/// The first `rows` rows of a Parquet file, read by ranges.
fn parquet(file: &Arc<Ranges>, rows: usize) -> Result<Value, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    // The footer's length, checked before the reader takes it.
    let tail = file
        .range(file.size.saturating_sub(8), file.size)
        .map_err(|e| e.to_string())?;
    let footer = match &tail[..] {
        [a, b, c, d, b'P', b'A', b'R', b'1'] => u64::from(u32::from_le_bytes([*a, *b, *c, *d])),
        _ => return Err("not a Parquet file (no PAR1 at its end)".into()),
    };
    if footer > MAX_FOOTER {
        return Err(format!(
            "a footer of {footer} bytes (at most {MAX_FOOTER} are read)"
        ));
    }
    let pages = Arc::new(Pages::default());
    let source = Source {
        file: file.clone(),
        pages: pages.clone(),
    };
    let reader = SerializedFileReader::new(source).map_err(|e| e.to_string())?;
    // The footer read: from here on the reader reads pages alone.
    pages.armed.store(true, Ordering::Relaxed);
    let meta = reader.metadata().file_metadata();
    let schema = meta.schema_descr();
    let columns: Vec<Value> = schema
        .columns()
        .iter()
        .map(|c| {
            let logical = c.logical_type_ref().map(|l| format!("{l:?}"));
            json!({
                "name": c.path().string(),
                "type": logical.unwrap_or_else(|| format!("{}", c.physical_type())),
            })
        })
        .collect();
    let mut out = Vec::new();
    for row in reader
        .get_row_iter(None)
        .map_err(|e| e.to_string())?
        .take(rows)
    {
        let row = row.map_err(|e| e.to_string())?;
        out.push(
            row.get_column_iter()
                .map(|(_, field)| field.to_json_value())
                .collect::<Vec<_>>(),
        );
    }
    Ok(json!({
        "kind": "table", "format": "parquet", "size": file.size, "columns": columns,
        "rows": out, "total_rows": meta.num_rows(),
        "truncated": (out.len() as i64) < meta.num_rows(),
        "bytes_read": file.read.load(Ordering::Relaxed),
    }))
}

/// A Parquet reader's view of a file: ranges asked for as they are
/// needed, never the whole file; each page's header checked before the
/// page is handed over to be decompressed.
struct Source {
    file: Arc<Ranges>,
    pages: Arc<Pages>,
}

/// What the reader's pages claim. For each page it opens a stream where
/// the page's header starts and reads the header (perhaps ahead, to
/// peek), then asks for the page's bytes, which follow the header.
#[derive(Default)]
struct Pages {
    /// Whether the footer is read: every read after it is a page's.
    armed: std::sync::atomic::AtomicBool,
    /// Where the reader opened streams lately (pages' headers).
    opened: parking_lot::Mutex<std::collections::VecDeque<u64>>,
    /// Bytes the pages handed over claim decompressed.
    decoded: AtomicU64,
}

/// Stream openings remembered: more than a row group's columns ever
/// leave between a peek at a page and its read.
const OPENINGS: usize = 4096;

impl Pages {
    fn opened(&self, at: u64) {
        let mut opened = self.opened.lock();
        if opened.len() == OPENINGS {
            opened.pop_front();
        }
        opened.push_back(at);
    }

    /// Bytes `[start, start + length)` asked for: once the footer is
    /// read, a page's, whose header lies just before it, starting where a
    /// stream opened, exactly up to the page, and claims that length.
    /// Each header that fits so is weighed (the reader's is among them,
    /// whichever stream it read it from), the largest claim counted.
    /// Refused unless one is found and none claims more than a page, or
    /// the claims more than a preview, may decompress.
    fn check(&self, file: &Ranges, start: u64, length: usize) -> Result<(), String> {
        if !self.armed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let candidates: Vec<u64> = {
            let opened = self.opened.lock();
            let mut near: Vec<u64> = opened
                .iter()
                .copied()
                .filter(|&at| at < start && start - at <= MAX_HEADER)
                .collect();
            near.sort_unstable();
            near.dedup();
            near
        };
        let mut claimed = None;
        for at in candidates {
            let header = file.range(at, start).map_err(|e| e.to_string())?;
            if let Some((claim, stored)) = page_sizes(&header)
                && usize::try_from(stored) == Ok(length)
            {
                claimed = claimed.max(Some(claim));
            }
        }
        match claimed {
            Some(claim) => self.claim(claim),
            None => Err(format!(
                "{length} bytes at {start} asked for with no page header before them"
            )),
        }
    }

    /// A page claiming `claimed` bytes decompressed.
    fn claim(&self, claimed: i32) -> Result<(), String> {
        let claimed = u64::try_from(claimed).map_err(|_| "a page of a negative size")?;
        let total = self.decoded.fetch_add(claimed, Ordering::Relaxed) + claimed;
        if claimed > MAX_PAGE || total > MAX_DECODED {
            return Err(format!(
                "a page of {claimed} bytes decompressed ({total} in all; at most {MAX_PAGE} a page and {MAX_DECODED} in all are decompressed)"
            ));
        }
        Ok(())
    }
}

/// The sizes a Parquet page header claims, decompressed and stored, if
/// `header` is one, whole: a header that ends before its last byte is not
/// the one just before a page.
#[allow(deprecated)] // parquet's current reader of page headers is private; this is its published form
fn page_sizes(header: &[u8]) -> Option<(i32, i32)> {
    use parquet::thrift::TSerializable;
    let mut rest = header;
    let h = parquet::format::PageHeader::read_from_in_protocol(
        &mut thrift::protocol::TCompactInputProtocol::new(&mut rest),
    )
    .ok()?;
    rest.is_empty()
        .then_some((h.uncompressed_page_size, h.compressed_page_size))
}

impl parquet::file::reader::Length for Source {
    fn len(&self) -> u64 {
        self.file.size
    }
}

impl parquet::file::reader::ChunkReader for Source {
    type T = Stream;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Stream> {
        self.pages.opened(start);
        Ok(Stream {
            file: self.file.clone(),
            at: start,
            buf: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let external =
            |e: crate::error::Error| parquet::errors::ParquetError::External(Box::new(e));
        let end = start.saturating_add(length as u64);
        if end > self.file.size {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{length} bytes at {start} of {}",
                self.file.size
            )));
        }
        self.pages
            .check(&self.file, start, length)
            .map_err(parquet::errors::ParquetError::General)?;
        self.file.range(start, end).map_err(external)
    }
}

/// The file from an offset on, read a window at a time as it is read.
struct Stream {
    file: Arc<Ranges>,
    at: u64,
    buf: Bytes,
}

impl std::io::Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            self.buf = self
                .file
                .range(self.at, self.at.saturating_add(WINDOW))
                .map_err(std::io::Error::other)?;
            self.at += self.buf.len() as u64;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_columns_type_is_what_its_cells_share() {
        let cells = |v: &[Value]| cell_type(v.iter());
        assert_eq!(cells(&[json!("1"), json!("2"), json!("")]), "integer");
        assert_eq!(cells(&[json!("1"), json!("2.5")]), "number");
        assert_eq!(cells(&[json!("1"), json!("x")]), "text");
        assert_eq!(cells(&[json!(true), Value::Null]), "boolean");
        assert_eq!(cells(&[]), "text");
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_type(b"<svg onload=alert(1)>"), None);
    }

    /// A page header written as Parquet writes them, claiming `size`.
    #[allow(deprecated)]
    fn header(size: i32) -> Vec<u8> {
        use parquet::thrift::TSerializable;
        let h = parquet::format::PageHeader {
            type_: parquet::format::PageType::DATA_PAGE,
            uncompressed_page_size: size,
            compressed_page_size: 10,
            crc: None,
            data_page_header: None,
            index_page_header: None,
            dictionary_page_header: None,
            data_page_header_v2: None,
        };
        let mut out = Vec::new();
        h.write_to_out_protocol(&mut thrift::protocol::TCompactOutputProtocol::new(&mut out))
            .unwrap();
        out
    }

    #[test]
    fn a_page_is_refused_before_it_is_decompressed_past_the_bounds() {
        let pages = Pages::default();
        assert_eq!(page_sizes(&header(1000)), Some((1000, 10)));
        assert_eq!(page_sizes(b"\xff\xff"), None);
        // A header followed by more bytes is not the one before a page.
        let mut longer = header(1000);
        longer.push(0);
        assert_eq!(page_sizes(&longer), None);
        pages.claim(1 << 20).unwrap();
        let err = pages.claim(i32::MAX).unwrap_err();
        assert!(err.contains(&format!("{} bytes", i32::MAX)), "{err}");
        assert!(pages.claim(-1).is_err());
        // Pages each within the bound, more than a preview decompresses.
        let pages = Pages::default();
        for _ in 0..4 {
            pages.claim(60 << 20).unwrap();
        }
        assert!(pages.claim(60 << 20).is_err());
    }
}
