//! Packs: the header check and blob decoding (raw or zstd, bounded) take
//! any bytes; what decodes is exactly what its id names.
#![no_main]
use detafs::id::ObjectId;
use detafs::store::pack::{self, BlobKind, BlobRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let pack_id = ObjectId::of(b"fuzz pack");
    let _ = pack::check_header(&pack_id, &rest[..rest.len().min(8)]);
    let kind = if selector & 1 == 0 { BlobKind::Chunk } else { BlobKind::Tree };
    // The id is either the hash of the payload (so decoding can succeed) or
    // a fixed one (so it must fail).
    let id = if selector & 2 == 0 {
        ObjectId::of(rest.get(1..).unwrap_or_default())
    } else {
        pack_id
    };
    let r = BlobRef {
        id,
        pack: pack_id,
        offset: 8,
        len: rest.len() as u32,
    };
    if let Ok(decoded) = pack::decode(&r, kind, rest.to_vec().into()) {
        assert_eq!(ObjectId::of(&decoded), id);
    }
});
