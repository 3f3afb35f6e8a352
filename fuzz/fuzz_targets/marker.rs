//! The store marker (`detafs.json`): any bytes decode to a checked marker
//! or an error, and an accepted store id can name no path.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = detafs::store::StoreInfo::decode(data, "fuzz") {
        assert_eq!(info.store_id.len(), 32);
        assert!(info.store_id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
});
