//! Goal: a handle that joined a transaction is never inside it once commit has seen the
//! transaction drained, under every interleaving; and a refused start never leaves a count
//! behind.
//! Method: loom explores all schedules of two handle starts racing a commit. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p lanefs --test loom_gate --release` (`.ci/run`
//! does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use lanefs::internals::journal::gate::{Join, TxGate};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn joined_handles_are_never_inside_a_drained_transaction() {
    // Two starters on different lanes, and on the same lane.
    model(|i| i);
    model(|_| 3);
}

fn model(lane_of: fn(usize) -> usize) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let gate = Arc::new(TxGate::new());
        let snapshot = Arc::new(AtomicBool::new(false));
        let starters: Vec<_> = (0..2)
            .map(|i| {
                let (g, s) = (gate.clone(), snapshot.clone());
                let lane = lane_of(i);
                thread::spawn(move || match g.join(lane) {
                    Join::Joined => {
                        // Inside the transaction: commit must not have snapshotted it.
                        assert!(
                            !s.load(Ordering::SeqCst),
                            "handle inside a snapshotted transaction"
                        );
                        g.leave(lane);
                        true
                    }
                    Join::Refused { .. } => false,
                })
            })
            .collect();
        gate.lock();
        while !gate.drained() {
            thread::yield_now();
        }
        snapshot.store(true, Ordering::SeqCst);
        for s in starters {
            s.join().unwrap();
        }
        assert!(gate.drained(), "a count was left behind");
    });
}
