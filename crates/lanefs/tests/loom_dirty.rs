//! Goal: the buffer cache's lock-free dirty accounting is exact at quiescence and never
//! reports more dirty buffers than exist, under every interleaving.
//! Method: loom explores all schedules of threads marking and clearing (write-back) two
//! buffers. Run with `RUSTFLAGS="--cfg loom" cargo test -p lanefs --test loom_dirty --release`
//! (`.ci/run` does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use lanefs::internals::dirty::{DirtyCount, DirtyFlag};
use loom::sync::Arc;
use loom::thread;

#[test]
fn counter_matches_flags_after_racing_marks_and_clears() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let count = Arc::new(DirtyCount::new());
        let flags = Arc::new([DirtyFlag::new(), DirtyFlag::new()]);
        // Two writers mark the same buffer and one each of their own, racing a write-back.
        let markers: Vec<_> = (0..2)
            .map(|i| {
                let (c, f) = (count.clone(), flags.clone());
                thread::spawn(move || {
                    f[i].mark(&c);
                })
            })
            .collect();
        let (c, f) = (count.clone(), flags.clone());
        let cleaner = thread::spawn(move || {
            let mut cleared = 0;
            for flag in f.iter() {
                cleared += usize::from(flag.clear(&c));
                // A reader mid-race never sees more dirty buffers than exist.
                assert!(c.get() <= 2, "dirty count {} above buffer count", c.get());
            }
            cleared
        });
        for m in markers {
            m.join().unwrap();
        }
        let cleared = cleaner.join().unwrap();
        let dirty = flags.iter().filter(|f| f.is_set()).count();
        assert_eq!(count.raw(), dirty as isize, "exact at quiescence");
        // Each buffer became dirty exactly once: now either still dirty or cleared once.
        assert_eq!(cleared + dirty, 2);
    });
}
