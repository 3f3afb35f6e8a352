//! Names in staging's database at rest: the SQL functions `sealed(x)` and
//! `opened(x)` that every statement writes and reads names, link targets
//! and paths through. Where staged copies are sealed (`Repo::local_sealing`)
//! they seal under the host's key, the same way each time, so that a
//! name is still looked up by equality and stays unique in its folder;
//! elsewhere they give back what they are given. Rows are ordered by
//! name in Rust, not by SQL, which sees only sealed bytes.

use crate::error::{Error, Result};
use crate::store::sealed_file::Sealing;
use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};

/// Whether names in a staging database are sealed: kept in its `meta`
/// table from its first opening on, so that a host never reads one as
/// the other.
const MARK: &str = "sealed_names";

/// Gives `db` the functions, for staging kept as `sealing` says.
pub fn register(db: &Connection, sealing: &Sealing) -> Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let seal = sealing.clone();
    db.create_scalar_function("sealed", 1, flags, move |ctx| {
        through(ctx, |b| Some(seal.seal_name(b)))
    })?;
    let open = sealing.clone();
    db.create_scalar_function("opened", 1, flags, move |ctx| {
        through(ctx, |b| open.open_name(b))
    })?;
    Ok(())
}

/// Checks a staging database's names are kept as `sealing` keeps them
/// (marking a new one so).
pub(super) fn check(db: &Connection, sealing: &Sealing, new: bool) -> Result<()> {
    if new && sealing.is_sealed() {
        db.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, 1)",
            [MARK],
        )?;
    }
    let marked: bool = db.query_row(
        "SELECT COUNT(*) > 0 FROM meta WHERE key = ?1",
        [MARK],
        |r| r.get(0),
    )?;
    match marked == sealing.is_sealed() {
        true => Ok(()),
        false => Err(Error::InvalidInput(format!(
            "this staging area was made by a host that keeps it {}: commit or discard it there",
            match marked {
                true => "sealed under a key of its own",
                false => "in the clear",
            }
        ))),
    }
}

/// `f` of the argument's bytes, as the argument's type; NULL stays NULL.
fn through(ctx: &Context<'_>, f: impl Fn(&[u8]) -> Option<Vec<u8>>) -> rusqlite::Result<Value> {
    let bad = || rusqlite::Error::UserFunctionError("a sealed name does not open".into());
    Ok(match ctx.get_raw(0) {
        ValueRef::Null => Value::Null,
        ValueRef::Blob(b) => Value::Blob(f(b).ok_or_else(bad)?),
        ValueRef::Text(t) => match f(t).ok_or_else(bad)? {
            // Kept as it is: with its type.
            same if same == t => Value::Text(String::from_utf8_lossy(t).into_owned()),
            other => Value::Blob(other),
        },
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(r) => Value::Real(r),
    })
}
