//! Goal: the inode cache never hands out an inode it evicts, and never evicts one in use.
//! Method: loom explores every schedule of lookups taking a use of one cached inode while
//! the sweep tries to evict it (`UseGate`, the handshake both sides run without a lock).
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p lanefs --test loom_icache --release`
//! (`.ci/run` does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use lanefs::internals::usegate::UseGate;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn a_use_and_an_eviction_never_both_succeed() {
    loom::model(|| {
        let gate = Arc::new(UseGate::new());
        let holding = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (g, h) = (gate.clone(), holding.clone());
                thread::spawn(move || {
                    if g.try_use() {
                        h.store(true, Ordering::SeqCst);
                        h.store(false, Ordering::SeqCst);
                        g.unuse();
                    }
                })
            })
            .collect();
        // Once the sweep is past the handshake, no reader may hold a use.
        let killed = gate.try_kill(|| {
            assert!(!holding.load(Ordering::SeqCst), "evicting an inode in use");
            true
        });
        for r in readers {
            r.join().unwrap();
        }
        if killed {
            // Once dead, no new use starts.
            assert!(!gate.try_use());
        }
    });
}

#[test]
fn a_failed_eviction_leaves_the_inode_usable() {
    loom::model(|| {
        let gate = Arc::new(UseGate::new());
        let g = gate.clone();
        let sweep = thread::spawn(move || g.try_kill(|| false));
        // The sweep gives up (its check refuses): a lookup after it always succeeds, one
        // during it may back off and look again.
        let mut got = gate.try_use();
        let killed = sweep.join().unwrap();
        assert!(!killed);
        if !got {
            got = gate.try_use();
        }
        assert!(got);
        gate.unuse();
    });
}
