//! Goal: the scan lists' lock-free group sets stay exact when groups sharing one word
//! move between orders at the same time (each under its own group lock, so two movers
//! never move the same group), and a lock-free walk never yields a group that was in no
//! set it walks.
//! Method: loom explores all schedules of two groups of one word each moving from one
//! order's set to another's while a reader walks both. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p lanefs --test loom_lists --release` (`.ci/run`
//! does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use lanefs::internals::alloc::lists::{walk, GroupSet};
use loom::sync::Arc;
use loom::thread;

#[test]
fn racing_moves_in_one_word_stay_exact() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        // Order sets "low" and "high" for 64 groups; groups 3 and 5 start low.
        let sets = Arc::new([GroupSet::new(64), GroupSet::new(64)]);
        sets[0].insert(3);
        sets[0].insert(5);
        sets[1].insert(40);
        let movers: Vec<_> = [3u32, 5]
            .into_iter()
            .map(|g| {
                let s = sets.clone();
                thread::spawn(move || {
                    s[0].remove(g);
                    s[1].insert(g);
                })
            })
            .collect();
        let s = sets.clone();
        let reader = thread::spawn(move || {
            let high = [&s[1]];
            let seen: Vec<u32> = walk(&high, 64, 10).collect();
            // The high set only ever held 40, 3 and 5; 40 never left it.
            assert!(
                seen.contains(&40),
                "walk lost a group that never moved: {seen:?}"
            );
            assert!(
                seen.iter().all(|g| [3, 5, 40].contains(g)),
                "walk invented {seen:?}"
            );
            // Ordered from group 10, wrapping.
            let pos = |g| seen.iter().position(|&x| x == g);
            if let (Some(a), Some(b)) = (pos(40), pos(3)) {
                assert!(a < b, "walk not in order from the goal: {seen:?}");
            }
        });
        for m in movers {
            m.join().unwrap();
        }
        reader.join().unwrap();
        for g in [3, 5] {
            assert!(
                !sets[0].contains(g) && sets[1].contains(g),
                "group {g} lost in a move"
            );
        }
        assert!(sets[1].contains(40) && !sets[0].contains(40));
    });
}
