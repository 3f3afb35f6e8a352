//! The package's `unsafe` code, with why it is sound. Everything else is
//! safe Rust (the workspace denies `unsafe_code`).
#![allow(unsafe_code)]

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A `bytes` object of `len` bytes: those of `spans` in order, then zeros
/// if they hold fewer. Made in place and not zeroed first, as
/// `PyBytes::new_with` does: zeroing fresh pages that the copy overwrites
/// at once was a sixth of a cold read of a large file (docs/benchmarks.md).
pub fn bytes_of<'py, 'a>(
    py: Python<'py>,
    len: usize,
    spans: impl Iterator<Item = &'a [u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let size = pyo3::ffi::Py_ssize_t::try_from(len)
        .map_err(|_| PyOverflowError::new_err("a read larger than Python's bytes can hold"))?;
    // SAFETY: given a null pointer, PyBytes_FromStringAndSize returns a
    // new bytes object of `size` uninitialised bytes, or null with an
    // exception set (an error here). Until it is returned, this function
    // holds its only reference, so its buffer may be written; each of its
    // `len` bytes is written once below (copied, or zeroed past the
    // spans), through raw pointers, and none is read before.
    unsafe {
        let ptr = pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size);
        let bytes = Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyBytes>();
        let out: *mut u8 = pyo3::ffi::PyBytes_AsString(ptr).cast();
        let mut at = 0;
        for span in spans {
            let n = span.len().min(len - at);
            std::ptr::copy_nonoverlapping(span.as_ptr(), out.add(at), n);
            at += n;
        }
        std::ptr::write_bytes(out.add(at), 0, len - at);
        Ok(bytes)
    }
}
