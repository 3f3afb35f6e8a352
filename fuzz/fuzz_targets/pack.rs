//! Packs: the header check and blob decoding (raw, zstd or sealed, bounded)
//! take any bytes; what decodes is exactly what its reference names.
#![no_main]
use detafs::id::PackId;
use detafs::store::codec::Codec;
use detafs::store::pack::{self, BlobKind, BlobRef};
use detafs::store::seal::{Keys, MasterKey};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, LazyLock};

static SEALED: LazyLock<Codec> = LazyLock::new(|| {
    Codec::Sealed(Arc::new(Keys::derive(
        &MasterKey::from_bytes([7; 32]),
        "fuzz",
    )))
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let pack_id = PackId::of(b"fuzz pack");
    let _ = pack::check_header(&pack_id, &rest[..rest.len().min(8)]);
    let kind = if selector & 1 == 0 {
        BlobKind::Chunk
    } else {
        BlobKind::Tree
    };
    let codec = if selector & 4 == 0 {
        Codec::Plain
    } else {
        SEALED.clone()
    };
    // The id is either that of the payload (so decoding can succeed) or a
    // fixed one (so it must fail); the size that of a raw blob or any.
    let payload = rest.get(1..).unwrap_or_default();
    let id = if selector & 2 == 0 {
        codec.blob_id(payload)
    } else {
        detafs::id::BlobId::from_bytes(*pack_id.as_bytes())
    };
    let size = if selector & 8 == 0 {
        BlobRef::raw_size(rest.len() as u32)
    } else {
        u32::from(selector)
    };
    let r = BlobRef {
        id,
        pack: pack_id,
        offset: 8,
        len: rest.len() as u32,
        size,
    };
    if let Ok(decoded) = codec.decode_blob(&r, kind, rest.to_vec().into()) {
        assert_eq!(codec.blob_id(&decoded), id);
    }
});
