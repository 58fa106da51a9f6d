//! Goal: a directory leaf's hint never yields a buffer that has left the buffer cache's
//! map: a hinted reader (no shard lock) and an eviction (under the shard's lock) never
//! both go on, the reader with the buffer as cached and the eviction with it removed,
//! under every interleaving; and an eviction that saw a reader leaves the flag set.
//! Method: loom explores all schedules of the `Resident` handshake the engine runs
//! (`BufCache::get_hinted`, the shard eviction), with a loom atomic standing for the
//! buffer's strong count, taken as `Weak::upgrade` does (an `Acquire` increment) and read
//! as `Arc::strong_count` does (`Relaxed`). Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p lanefs --test loom_resident --release`
//! (`.ci/run` does); without `--cfg loom` this file is empty.
//! Checked by mutation: without either fence (`Resident::confirm`, `Resident::try_clear`)
//! loom finds the schedule where both go on.
#![cfg(loom)]

use lanefs::internals::resident::Resident;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

#[test]
fn a_hinted_reader_and_an_eviction_never_both_go_on() {
    loom::model(|| {
        // The map's count, the flag set: the buffer is cached and unheld.
        let count = Arc::new(AtomicUsize::new(1));
        let flag = Arc::new(Resident::new(true));
        let (c, f) = (count.clone(), flag.clone());
        let reader = thread::spawn(move || {
            c.fetch_add(1, Ordering::Acquire);
            let kept = f.confirm();
            if !kept {
                c.fetch_sub(1, Ordering::Release);
            }
            kept
        });
        let evicted = flag.try_clear(|| count.load(Ordering::Relaxed));
        let used = reader.join().unwrap();
        assert!(!(used && evicted), "the reader kept an evicted buffer");
        if !evicted {
            assert!(flag.get(), "an eviction that saw a holder cleared the flag");
        }
    });
}
