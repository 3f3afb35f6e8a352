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
    if d.path.ends_with(".csv") {
        csv_apply(old, d)
    } else {
        jsonl_apply(old, d)
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

fn csv_apply(old: Option<&[u8]>, d: &Delta) -> Result<Vec<u8>> {
    let csv_err = |e: csv::Error| bad(format!("{}: {e}", d.path));
    let (mut header, mut rows): (Option<Vec<String>>, Vec<Vec<String>>) = (None, Vec::new());
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        let mut r = csv::ReaderBuilder::new()
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
}
