//! Version records: any bytes decode to a checked record or an error; an
//! accepted record can be shown and encoded again.
#![no_main]
use detafs::snapshot::Record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Record::decode(data, "fuzz") {
        let _ = r.log_entry();
        let again = Record::decode(&r.encode(), "fuzz").expect("re-encoded record decodes");
        assert_eq!(again, r);
    }
});
