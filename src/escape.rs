//! Names, messages and authors come from other users and from the store:
//! printed as they are, a newline or an escape sequence in one would forge
//! lines or drive the terminal. Everything detafs prints line by line goes
//! through `line`, so one entry is always one line.

use std::borrow::Cow;
use std::fmt::Write;

/// `bytes` as printable text: control characters, backslashes and bytes
/// that are not UTF-8 are written as C escapes (`\n`, `\\`, `\x1b`); plain
/// text is returned unchanged.
pub fn line(bytes: &[u8]) -> Cow<'_, str> {
    let plain = |c: char| c != '\\' && !c.is_control();
    if let Ok(s) = std::str::from_utf8(bytes)
        && s.chars().all(plain)
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// The bytes `line` escaped, or `None` for text `line` never writes.
pub fn unescape(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next()? {
            'n' => out.push(b'\n'),
            't' => out.push(b'\t'),
            'r' => out.push(b'\r'),
            '\\' => out.push(b'\\'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(
                    u8::from_str_radix(&hex, 16)
                        .ok()
                        .filter(|_| hex.len() == 2)?,
                );
            }
            'u' => {
                let rest = chars.as_str().strip_prefix('{')?;
                let (hex, after) = rest.split_once('}')?;
                let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                chars = after.chars();
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{line, unescape};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn unescape_reads_back_any_line(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(unescape(&line(&bytes)), Some(bytes));
        }

        #[test]
        fn unescape_reads_back_any_text(text in "\\PC*") {
            prop_assert_eq!(unescape(&line(text.as_bytes())), Some(text.into_bytes()));
        }
    }

    #[test]
    fn unescape_refuses_what_line_never_writes() {
        for bad in ["\\", "\\q", "\\x4", "\\xzz", "\\u{110000}", "\\u{41"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn one_entry_is_one_printable_line() {
        assert_eq!(line(b"plain name.csv"), "plain name.csv");
        assert_eq!(line("naïve".as_bytes()), "naïve");
        assert_eq!(line(b"a\nM forged"), "a\\nM forged");
        assert_eq!(line(b"\x1b[2J"), "\\u{1b}[2J");
        assert_eq!(line(b"back\\slash"), "back\\\\slash");
        assert_eq!(line(b"bad\xffbyte"), "bad\\xffbyte");
        assert_eq!(line("\u{85}next".as_bytes()), "\\u{85}next");
    }
}
