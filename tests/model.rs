//! The file-system core against a reference model, without the kernel:
//! random sequences of operations are applied to `MountFs` (staging over a
//! local store) and to a plain temporary folder; after every step both
//! trees must be equal, and after every commit the new version must equal
//! the folder too. Results must agree as well: both succeed, or both fail
//! with the same errno. Failures proptest shrinks are kept below as named
//! regression tests.

mod common;

use common::Env;
use common::model::{Core, Model, Op, op};
use proptest::prelude::*;

fn check(ops: &[Op]) {
    let env = Env::new_local();
    let model = Model::new(&env);
    let mut core = Core::open(&env);
    for (step, op) in ops.iter().enumerate() {
        if model.follows_symlink(op) {
            continue;
        }
        let want = model.apply(op);
        let got = core.apply(op);
        assert_eq!(got, want, "step {step}: {op:?}");
        let want = model.tree();
        assert_eq!(
            core.tree("staging", ""),
            want,
            "step {step}: {op:?}: staging"
        );
        if matches!(op, Op::Commit)
            && let Some(latest) = core.latest()
        {
            assert_eq!(
                core.tree("versions", &latest),
                want,
                "step {step}: {latest}"
            );
        }
    }
}

proptest! {
    // PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_core_behaves_like_a_plain_folder(ops in prop::collection::vec(op(), 1..40)) {
        check(&ops);
    }
}

/// A commit's staged copies are removed in the background after it
/// returns; files written again at once (copied up under the same names)
/// must keep their new bytes, through a remount too.
#[test]
fn writes_right_after_a_commit_outlive_its_sweep() {
    let env = Env::new_local();
    let model = Model::new(&env);
    let mut core = Core::open(&env);
    let write = |i: usize, seed| Op::Write {
        path: format!("c/f{i}"),
        offset: 0,
        len: 100,
        seed,
    };
    let mut ops = vec![Op::Mkdir("c".into())];
    ops.extend((0..3000).map(|i| write(i, 1)));
    ops.push(Op::Commit);
    ops.extend((0..3000).rev().map(|i| write(i, 2)));
    ops.push(Op::Remount);
    for op in &ops {
        assert_eq!(core.apply(op), model.apply(op), "{op:?}");
    }
    assert_eq!(core.tree("staging", ""), model.tree());
}
