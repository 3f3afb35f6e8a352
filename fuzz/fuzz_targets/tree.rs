//! Trees: any bytes decode to a validated tree or an error; an accepted
//! tree round-trips and every entry is one detafs itself would write.
#![no_main]
use detafs::snapshot::Tree;
use detafs::snapshot::tree::{check_name, check_node};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = Tree::decode(data) {
        for e in &tree.entries {
            check_name(&e.name).expect("accepted name");
            check_node(&e.node).expect("accepted node");
        }
        assert_eq!(Tree::decode(&tree.encode()).expect("round trip"), tree);
    }
});
