//! A commit's `delta`: rows added to and removed from a table file of the
//! dataset, JSON lines (one JSON value a line) or CSV (its header kept).

use crate::error::{Error, Result};
use serde_json::Value;

/// The table a delta goes to when it names none.
pub const DEFAULT_TABLE: &str = "data.jsonl";

pub struct Delta {
    pub path: String,
    pub added: Vec<Value>,
    pub removed: Vec<Value>,
}

fn bad(what: impl Into<String>) -> Error {
    Error::InvalidInput(what.into())
}

/// A delta as sent: a JSON string holding the object (as the seed sends
/// it), or the object itself: `{"path"?, "added": [...], "removed": [...]}`.
pub fn parse(v: &Value) -> Result<Delta> {
    let v = match v {
        Value::String(s) => {
            serde_json::from_str(s).map_err(|e| bad(format!("delta is not JSON: {e}")))?
        }
        other => other.clone(),
    };
    let Value::Object(mut o) = v else {
        return Err(bad("delta must be an object with added and removed rows"));
    };
    let mut rows = |name: &str| match o.remove(name) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(bad(format!("delta.{name} must be a list of rows"))),
    };
    let (added, removed) = (rows("added")?, rows("removed")?);
    let path = match o.remove("path") {
        None => DEFAULT_TABLE.to_string(),
        Some(Value::String(p)) => p,
        Some(_) => return Err(bad("delta.path must be a string")),
    };
    if let Some(k) = o.keys().next() {
        return Err(bad(format!(
            "delta has an unknown field {k:?} (path, added, removed)"
        )));
    }
    Ok(Delta {
        path,
        added,
        removed,
    })
}

/// The table's new bytes: `old` (None: a new table) with the delta applied.
/// A removed row that is not there is an error (nothing is committed).
pub fn apply(old: Option<&[u8]>, d: &Delta) -> Result<Vec<u8>> {
    // Laid out as previews and diffs read it (`Format::of`); a name of no
    // table format is JSON lines.
    match Format::of(&d.path) {
        Some(Format::Delimited(sep)) => csv_apply(old, d, sep),
        Some(Format::JsonLines) | None => jsonl_apply(old, d),
    }
}

fn jsonl_apply(old: Option<&[u8]>, d: &Delta) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(old.unwrap_or_default())
        .map_err(|_| bad(format!("{} is not UTF-8 JSON lines", d.path)))?;
    let mut rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| bad(format!("{} line {}: not JSON ({e})", d.path, i + 1)))
        })
        .collect::<Result<_>>()?;
    for r in &d.removed {
        let at = rows
            .iter()
            .position(|x| x == r)
            .ok_or_else(|| bad(format!("removed row {r} is not in {}", d.path)))?;
        rows.remove(at);
    }
    rows.extend(d.added.iter().cloned());
    let mut out = Vec::new();
    for r in rows {
        out.extend(serde_json::to_vec(&r).expect("serializable"));
        out.push(b'\n');
    }
    Ok(out)
}

/// A row as CSV fields: a list of values, an object by header name, or a
/// string holding one CSV record.
fn fields(row: &Value, header: Option<&[String]>, path: &str) -> Result<Vec<String>> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Bool(_) | Value::Number(_) => Ok(v.to_string()),
        _ => Err(bad(format!("{path}: a CSV field cannot be {v}"))),
    };
    match row {
        Value::Array(a) => a.iter().map(scalar).collect(),
        Value::Object(o) => {
            let header = header.ok_or_else(|| bad(format!("{path} has no header")))?;
            if let Some(k) = o.keys().find(|k| !header.contains(k)) {
                return Err(bad(format!("{path} has no column {k:?}")));
            }
            header
                .iter()
                .map(|h| o.get(h).map_or(Ok(String::new()), scalar))
                .collect()
        }
        Value::String(s) => {
            let mut r = csv::ReaderBuilder::new()
                .has_headers(false)
                .from_reader(s.as_bytes());
            match r.records().next() {
                Some(Ok(rec)) => Ok(rec.iter().map(String::from).collect()),
                _ => Err(bad(format!("{path}: {s:?} is not a CSV record"))),
            }
        }
        other => Err(bad(format!("{path}: a CSV row cannot be {other}"))),
    }
}

fn csv_apply(old: Option<&[u8]>, d: &Delta, sep: u8) -> Result<Vec<u8>> {
    let csv_err = |e: csv::Error| bad(format!("{}: {e}", d.path));
    let (mut header, mut rows): (Option<Vec<String>>, Vec<Vec<String>>) = (None, Vec::new());
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        let mut r = csv::ReaderBuilder::new()
            .delimiter(sep)
            .has_headers(true)
            .flexible(true)
            .from_reader(old);
        header = Some(
            r.headers()
                .map_err(csv_err)?
                .iter()
                .map(String::from)
                .collect(),
        );
        for rec in r.records() {
            rows.push(rec.map_err(csv_err)?.iter().map(String::from).collect());
        }
    } else if let Some(Value::Object(o)) = d.added.first() {
        // A new table takes its header from its first row's names.
        header = Some(o.keys().cloned().collect());
    }
    for r in &d.removed {
        let f = fields(r, header.as_deref(), &d.path)?;
        let at = rows
            .iter()
            .position(|x| *x == f)
            .ok_or_else(|| bad(format!("removed row {r} is not in {}", d.path)))?;
        rows.remove(at);
    }
    for r in &d.added {
        rows.push(fields(r, header.as_deref(), &d.path)?);
    }
    let mut w = csv::WriterBuilder::new()
        .delimiter(sep)
        .flexible(true)
        .from_writer(Vec::new());
    if let Some(h) = &header {
        w.write_record(h).map_err(csv_err)?;
    }
    for r in rows {
        w.write_record(&r).map_err(csv_err)?;
    }
    w.into_inner().map_err(|e| bad(format!("{}: {e}", d.path)))
}

/// How a table file lays its rows out, by its name: what previews and
/// diffs show as a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// CSV (`,`) or TSV (tab), a header first.
    Delimited(u8),
    /// One JSON value a line.
    JsonLines,
}

/// A table as shown: its columns and its rows, each a list of cells.
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    /// Rows past those read (or a line that did not parse) were left out.
    pub truncated: bool,
}

impl Format {
    pub fn of(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        match lower.rsplit_once('.')?.1 {
            "csv" => Some(Format::Delimited(b',')),
            "tsv" | "tab" => Some(Format::Delimited(b'\t')),
            "jsonl" | "ndjson" => Some(Format::JsonLines),
            _ => None,
        }
    }

    /// The first `max` rows of a table file's text.
    pub fn table(self, text: &str, max: usize) -> Table {
        match self {
            Format::Delimited(sep) => {
                let mut r = csv::ReaderBuilder::new()
                    .delimiter(sep)
                    .flexible(true)
                    .from_reader(text.as_bytes());
                let columns = r
                    .headers()
                    .map(|h| h.iter().map(String::from).collect())
                    .unwrap_or_default();
                let mut rows = Vec::new();
                let mut records = r.records();
                for rec in records.by_ref().take(max) {
                    let Ok(rec) = rec else { break };
                    rows.push(rec.iter().map(|f| Value::String(f.into())).collect());
                }
                let truncated = records.next().is_some();
                Table {
                    columns,
                    rows,
                    truncated,
                }
            }
            Format::JsonLines => {
                let mut values = Vec::new();
                let mut lines = text.lines().filter(|l| !l.trim().is_empty());
                let mut truncated = false;
                for l in lines.by_ref().take(max) {
                    match serde_json::from_str::<Value>(l) {
                        Ok(v) => values.push(v),
                        Err(_) => {
                            truncated = true;
                            break;
                        }
                    }
                }
                truncated |= lines.next().is_some();
                let mut columns: Vec<String> = Vec::new();
                for v in &values {
                    for k in v.as_object().into_iter().flat_map(|o| o.keys()) {
                        if !columns.contains(k) && columns.len() < MAX_COLUMNS {
                            columns.push(k.clone());
                        }
                    }
                }
                let whole = columns.is_empty();
                if whole {
                    columns.push("value".into());
                }
                let rows = values
                    .iter()
                    .map(|v| match (whole, v.as_object()) {
                        (false, Some(o)) => columns
                            .iter()
                            .map(|c| o.get(c).cloned().unwrap_or(Value::Null))
                            .collect(),
                        _ => vec![v.clone()],
                    })
                    .collect();
                Table {
                    columns,
                    rows,
                    truncated,
                }
            }
        }
    }

    /// The rows `new` has that `old` has not (each as often as it is
    /// there more), and those `old` has that `new` has not: what a
    /// commit's `delta` would say, at most `max` each way; and the
    /// columns of `new` (or of `old`, when there is no `new`).
    pub fn row_change(
        self,
        old: &str,
        new: &str,
        max: usize,
    ) -> (Vec<Vec<Value>>, Vec<Vec<Value>>, Vec<String>) {
        let (a, b) = (self.table(old, usize::MAX), self.table(new, usize::MAX));
        let key = |r: &Vec<Value>| serde_json::to_string(r).expect("serializable");
        let mut counts: std::collections::HashMap<String, i64> = Default::default();
        for r in &a.rows {
            *counts.entry(key(r)).or_default() += 1;
        }
        let mut added = Vec::new();
        for r in &b.rows {
            let n = counts.entry(key(r)).or_default();
            if *n > 0 {
                *n -= 1;
            } else if added.len() < max {
                added.push(r.clone());
            }
        }
        let mut removed = Vec::new();
        for r in &a.rows {
            let n = counts.entry(key(r)).or_default();
            if *n > 0 {
                *n -= 1;
                if removed.len() < max {
                    removed.push(r.clone());
                }
            }
        }
        let columns = if b.columns.is_empty() {
            a.columns
        } else {
            b.columns
        };
        (added, removed, columns)
    }
}

/// Columns a JSON lines table shows at most.
const MAX_COLUMNS: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_seeds_delta_adds_a_row_to_a_new_table() {
        let d = parse(&json!("{\"added\": [\"row1\"], \"removed\": []}")).unwrap();
        assert_eq!(d.path, DEFAULT_TABLE);
        let t = apply(None, &d).unwrap();
        assert_eq!(t, b"\"row1\"\n");
        let d = parse(&json!({"added": [{"a": 1}], "removed": ["row1"]})).unwrap();
        assert_eq!(apply(Some(&t), &d).unwrap(), b"{\"a\":1}\n");
        let gone = parse(&json!({"removed": ["nope"]})).unwrap();
        assert!(apply(Some(&t), &gone).is_err());
        assert!(parse(&json!({"added": [], "extra": 1})).is_err());
        assert!(parse(&json!("not json")).is_err());
    }

    #[test]
    fn csv_keeps_its_header_and_quotes() {
        let old = b"city,temp\nOslo,3\n\"Rio, RJ\",30\n";
        let d = parse(&json!({
            "path": "t.csv",
            "added": [{"city": "Nairobi", "temp": 25}, ["Lima", "19"]],
            "removed": [["Oslo", "3"]]
        }))
        .unwrap();
        let new = apply(Some(old), &d).unwrap();
        assert_eq!(
            String::from_utf8(new).unwrap(),
            "city,temp\n\"Rio, RJ\",30\nNairobi,25\nLima,19\n"
        );
        let unknown = parse(&json!({"path": "t.csv", "added": [{"town": "x"}]})).unwrap();
        assert!(apply(Some(old), &unknown).is_err());
    }

    #[test]
    fn a_table_change_counts_each_row_as_often_as_it_is_there() {
        let old = "a,b\n1,x\n1,x\n2,y\n";
        let new = "a,b\n1,x\n3,z\n2,y\n";
        let (added, removed, columns) = Format::of("t.CSV").unwrap().row_change(old, new, 10);
        assert_eq!(columns, ["a", "b"]);
        assert_eq!(added, [vec![json!("3"), json!("z")]]);
        assert_eq!(removed, [vec![json!("1"), json!("x")]]);
        let t = Format::JsonLines.table("{\"k\": 1}\n\n{\"j\": true}\n[1]\n", 2);
        assert_eq!(t.columns, ["k", "j"]);
        assert_eq!(
            t.rows,
            [vec![json!(1), Value::Null], vec![Value::Null, json!(true)]]
        );
        assert!(t.truncated);
        assert_eq!(Format::of("x.tsv"), Some(Format::Delimited(b'\t')));
        assert_eq!(Format::of("x.txt"), None);
    }

    #[test]
    fn what_a_delta_writes_a_preview_reads_back() {
        for path in ["t.csv", "t.TSV", "t.jsonl", "data"] {
            let d = parse(&json!({
                "path": path,
                "added": [{"city": "Rio, RJ", "temp": "30"}, {"city": "Oslo\tN", "temp": "3"}],
            }))
            .unwrap();
            let bytes = apply(None, &d).unwrap();
            let t = Format::of(path)
                .unwrap_or(Format::JsonLines)
                .table(std::str::from_utf8(&bytes).unwrap(), 10);
            assert_eq!(t.columns, ["city", "temp"], "{path}");
            assert_eq!(t.rows[1][0], json!("Oslo\tN"), "{path}");
            assert_eq!(t.rows.len(), 2, "{path}");
        }
    }
}
