//! detafs's errors as Python exceptions: a missing dataset, version or
//! path is `FileNotFoundError`, a denial `PermissionError`, the rest a
//! `detafs.Error` subclass; each carries the message the CLI prints.

use detafs::Error;
use detafs::error::FsError;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyPermissionError};
use pyo3::prelude::*;
use pyo3::types::PyList;

pyo3::create_exception!(
    detafs,
    DetafsError,
    PyException,
    "Every detafs error that is not a missing file or a denial."
);
pyo3::create_exception!(
    detafs,
    ConflictError,
    DetafsError,
    "A version committed meanwhile changed the same paths (`.paths`); nothing was committed."
);
pyo3::create_exception!(
    detafs,
    InvalidInputError,
    DetafsError,
    "Bad input: a name, a version spec, a path or an option; nothing was changed."
);
pyo3::create_exception!(
    detafs,
    NothingToCommitError,
    InvalidInputError,
    "The commit would record no change (its content equals the latest version); nothing was recorded."
);
pyo3::create_exception!(
    detafs,
    ErasedError,
    DetafsError,
    "The file's bytes were erased from the store (`detafs erase`): gone, not missing."
);
pyo3::create_exception!(
    detafs,
    StoreError,
    DetafsError,
    "The store could not be reached or answered wrongly."
);
pyo3::create_exception!(
    detafs,
    DamagedError,
    DetafsError,
    "An object of the store is missing, corrupt or malformed: nothing wrong was served."
);
pyo3::create_exception!(
    detafs,
    WrongKeyError,
    DetafsError,
    "The store is not one detafs opens with the key or passphrase given."
);

/// `e` as the Python exception a caller catches.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::NoDataset(_)
        | Error::DatasetDeleted { .. }
        | Error::NoVersion { .. }
        | Error::NoPath { .. }
        | Error::Fs {
            kind: FsError::NotFound,
            ..
        } => PyFileNotFoundError::new_err(msg),
        Error::Forbidden(_)
        | Error::NotOwned { .. }
        | Error::Fs {
            kind: FsError::Denied,
            ..
        } => PyPermissionError::new_err(msg),
        Error::Conflict { paths, .. } | Error::Unresolved { paths, .. } => Python::attach(|py| {
            let err = ConflictError::new_err(msg);
            let names: Vec<String> = paths
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            if let Ok(list) = PyList::new(py, names) {
                let _ = err.value(py).setattr("paths", list);
            }
            err
        }),
        Error::NothingToCommit(_) => NothingToCommitError::new_err(msg),
        Error::Erased { .. } => ErasedError::new_err(msg),
        Error::InvalidInput(_)
        | Error::NoKeySlot(_)
        | Error::Policy { .. }
        | Error::DatasetExists(_)
        | Error::Fs { .. } => InvalidInputError::new_err(msg),
        // What to give, in this package's terms (the library says what is missing).
        Error::Locked(_) => StoreError::new_err(format!(
            "{msg}: give Store(key_file=...) or passphrase=..., or set DETAFS_KEY_FILE or DETAFS_PASSWORD"
        )),
        Error::Store { .. } | Error::StoreGone(_) | Error::TooManyRetries(_) => {
            StoreError::new_err(msg)
        }
        Error::Missing { .. } | Error::Corrupt { .. } | Error::Malformed { .. } => {
            DamagedError::new_err(msg)
        }
        Error::WrongKey(_)
        | Error::NotAStore(_)
        | Error::FormatTooNew { .. }
        | Error::UnsafeStore { .. }
        | Error::Downgraded { .. } => WrongKeyError::new_err(msg),
        _ => DetafsError::new_err(msg),
    }
}

/// Registers the exception classes in module `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<DetafsError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    m.add(
        "NothingToCommitError",
        py.get_type::<NothingToCommitError>(),
    )?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("DamagedError", py.get_type::<DamagedError>())?;
    m.add("ErasedError", py.get_type::<ErasedError>())?;
    m.add("WrongKeyError", py.get_type::<WrongKeyError>())?;
    Ok(())
}
