//! What a file's first bytes say it is: a raster image the web page may
//! show (never SVG, which may hold script), or a kind of binary file.
//! Shared by previews (REST) and the web page's images.

/// A raster image's type by its first bytes (SVG is text: it may hold
/// script, and is shown as such).
pub(super) fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// What a binary file's first bytes say it is, where they tell.
pub(super) fn binary_type(head: &[u8]) -> &'static str {
    match head {
        [b'P', b'K', 3, 4, ..] => "zip",
        [0x1f, 0x8b, ..] => "gzip",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "zstd",
        [b'%', b'P', b'D', b'F', ..] => "pdf",
        [b'P', b'A', b'R', b'1', ..] => "parquet",
        [0x7f, b'E', b'L', b'F', ..] => "elf",
        [b'S', b'Q', b'L', b'i', b't', b'e', ..] => "sqlite",
        _ => "binary",
    }
}
