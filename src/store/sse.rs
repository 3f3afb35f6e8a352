//! S3 server-side encryption: asked of every upload (`--sse`), and checked
//! in every answer to one, so a service that silently ignores it is refused
//! at the first write instead of holding objects unencrypted.

use crate::error::{Error, Result};

/// What `--sse` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sse {
    /// SSE-S3.
    Aes256,
    /// SSE-KMS, with the service's default key or this one.
    Kms(Option<String>),
}

/// Starts the error of an answer without the encryption asked for.
pub const REFUSED: &str = "server-side encryption not applied";

impl Sse {
    /// `aes256`, `kms` or `kms:KEY_ID`.
    pub fn parse(s: &str) -> Result<Sse> {
        match s.split_once(':') {
            None if s.eq_ignore_ascii_case("aes256") => Ok(Sse::Aes256),
            None if s.eq_ignore_ascii_case("kms") => Ok(Sse::Kms(None)),
            Some((k, id)) if k.eq_ignore_ascii_case("kms") && !id.is_empty() => {
                Ok(Sse::Kms(Some(id.to_string())))
            }
            _ => Err(Error::InvalidInput(format!(
                "--sse {s:?}: use aes256, kms or kms:KEY_ID"
            ))),
        }
    }

    /// The `x-amz-server-side-encryption` value asked for and expected back.
    pub fn header(&self) -> &'static str {
        match self {
            Sse::Aes256 => "AES256",
            Sse::Kms(_) => "aws:kms",
        }
    }
}
