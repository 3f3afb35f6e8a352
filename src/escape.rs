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

#[cfg(test)]
mod tests {
    use super::line;

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
