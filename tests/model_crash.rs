//! Crash and restart: the reference model's random sequences (tests/model.rs),
//! with commits interrupted at each durability step of staging and commit
//! (a panic at a failpoint; then everything in memory is dropped and staging
//! is opened again, as a restarted daemon does). After the restart staging
//! must equal the model exactly, the newest version must be the one before
//! the commit or staging's, and the next commit must make it staging's.
//! One test in this binary: failpoints are set for the whole process.

mod common;

use common::Env;
use common::model::{Core, Model, Op, op};
use proptest::prelude::*;
use std::panic::AssertUnwindSafe;

/// The durability steps of a commit of staging, in order.
const STEPS: [&str; 6] = [
    "staging-frozen",
    "pack-uploaded",
    "staging-pending",
    "before-record",
    "after-record",
    "staging-finished",
];

fn check(ops: &[(Op, Option<usize>)]) {
    let env = Env::new_local();
    let model = Model::new(&env);
    let mut core = Core::open(&env);
    for (step, (op, crash)) in ops.iter().enumerate() {
        if model.follows_symlink(op) {
            continue;
        }
        let (Op::Commit, Some(at)) = (op, crash) else {
            assert_eq!(core.apply(op), model.apply(op), "step {step}: {op:?}");
            assert_eq!(
                core.tree("staging", ""),
                model.tree(),
                "step {step}: {op:?}"
            );
            continue;
        };
        let fp = STEPS[*at];
        let want = model.tree();
        let before = core.latest();
        fail::cfg(fp, "panic").unwrap();
        let res = std::panic::catch_unwind(AssertUnwindSafe(|| core.apply(op)));
        fail::remove(fp);
        core.remount();
        let ctx = format!("step {step}: commit crashed at {fp} ({})", res.is_err());
        assert_eq!(core.tree("staging", ""), want, "{ctx}: staging");
        let latest = core.latest();
        if latest != before {
            let v = latest.clone().unwrap();
            assert_eq!(core.tree("versions", &v), want, "{ctx}: {v}");
        }
        assert_eq!(core.apply(&Op::Commit), Ok(()), "{ctx}: the next commit");
        if let Some(v) = core.latest() {
            assert_eq!(core.tree("versions", &v), want, "{ctx}: {v} after");
        }
        assert_eq!(core.tree("staging", ""), want, "{ctx}: staging after");
    }
}

proptest! {
    // PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(32),
        ..ProptestConfig::default()
    })]

    #[test]
    fn commits_crashed_at_any_step_lose_nothing(
        ops in prop::collection::vec((op(), prop::option::of(0..STEPS.len())), 1..30)
    ) {
        check(&ops);
    }
}
