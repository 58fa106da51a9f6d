//! Tests of the lock classes, their statistics and the lock-order checker.

use super::*;
use std::sync::Arc;
use std::thread;

// Tests use classes of their own, so counters never mix between tests running in
// parallel; the global on/off flag is shared, so tests that depend on it take FLAG first.
static FLAG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lockstat(on: bool) -> std::sync::MutexGuard<'static, ()> {
    let guard = FLAG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    set_lockstat(on);
    guard
}

/// Wait (bounded) until a thread has counted itself contended on `class`.
fn wait_contended(class: &LockClass) {
    for _ in 0..10_000 {
        if class.stat().contended > 0 {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    panic!("no waiter showed up on `{}`", class.name());
}

#[test]
fn classes_are_in_lock_order() {
    // Goal: the declared order is the lock order, and names are unique.
    let classes = all_classes();
    assert_eq!(classes.len(), 23);
    for pair in classes.windows(2) {
        assert!(
            pair[0].rank() < pair[1].rank(),
            "{} before {}",
            pair[0].name(),
            pair[1].name()
        );
    }
    let snapshot = lockstat_snapshot();
    let names: Vec<_> = snapshot.iter().map(|s| s.name).collect();
    let expected = [
        "rename",
        "inode",
        "journal_commit",
        "journal_gate",
        "icache_global",
        "icache_bucket",
        "stream_goal",
        "orphan",
        "igroup",
        "group",
    ];
    assert_eq!(&names[..10], &expected);
    assert_eq!(
        &names[10..],
        &[
            "rtgroup",
            "writeback",
            "page",
            "dirty_files",
            "folio",
            "inode_stage",
            "buffer",
            "buf_frozen",
            "clock",
            "tx_list",
            "buf_shard",
            "super",
            "mem_device"
        ]
    );
    assert!(INODE.nestable() && !GROUP.nestable());
}

#[test]
fn counters_count_acquisitions() {
    // Goal: every successful acquisition, of any kind, counts once; none is contended.
    static T: LockClass = LockClass::new("t_count", 10, false);
    let _flag = lockstat(true);
    let m = Mutex::new(&T, 0u32);
    for _ in 0..3 {
        *m.lock() += 1;
    }
    assert!(m.try_lock().is_some());
    let rw = RwLock::new(&T, 0u32);
    *rw.write() += 1;
    assert_eq!(*rw.read(), 1);
    assert!(rw.try_read().is_some() && rw.try_write().is_some());
    let s = T.stat();
    assert_eq!(
        (s.acquisitions, s.contended, s.wait_total_ns, s.wait_max_ns),
        (8, 0, 0, 0)
    );
}

#[test]
fn failed_try_lock_is_not_counted() {
    static T: LockClass = LockClass::new("t_try_fail", 10, false);
    let _flag = lockstat(true);
    let m = Mutex::new(&T, ());
    let held = m.lock();
    assert!(m.is_locked());
    thread::scope(|s| s.spawn(|| assert!(m.try_lock().is_none())).join().unwrap());
    drop(held);
    assert_eq!((T.stat().acquisitions, T.stat().contended), (1, 0));
}

#[test]
fn contended_mutex_counts_wait() {
    // Goal: a real wait between two threads is one contended acquisition with a wait.
    // Method: hold the lock until the other thread has counted itself contended.
    static T: LockClass = LockClass::new("t_contended", 10, false);
    let _flag = lockstat(true);
    let m = Arc::new(Mutex::new(&T, 0u32));
    let guard = m.lock();
    let m2 = Arc::clone(&m);
    let waiter = thread::spawn(move || *m2.lock() += 1);
    wait_contended(&T);
    thread::sleep(Duration::from_millis(5));
    drop(guard);
    waiter.join().unwrap();
    let s = T.stat();
    assert_eq!((s.acquisitions, s.contended), (2, 1));
    assert!(s.wait_total_ns > 0);
    assert_eq!(s.wait_max_ns, s.wait_total_ns);
    assert_eq!(*m.lock(), 1);
}

#[test]
fn contended_rwlock_read_counts_wait() {
    static T: LockClass = LockClass::new("t_rw_contended", 10, false);
    let _flag = lockstat(true);
    let rw = RwLock::new(&T, 7u32);
    let writer = rw.write();
    thread::scope(|s| {
        let reader = s.spawn(|| *rw.read());
        wait_contended(&T);
        drop(writer);
        assert_eq!(reader.join().unwrap(), 7);
    });
    let s = T.stat();
    assert_eq!((s.acquisitions, s.contended), (2, 1));
    assert!(s.wait_max_ns > 0);
}

#[test]
fn lockstat_off_leaves_counters_untouched() {
    static T: LockClass = LockClass::new("t_off", 10, false);
    let _flag = lockstat(false);
    let m = Mutex::new(&T, ());
    drop(m.lock());
    drop(m.try_lock());
    let rw = RwLock::new(&T, ());
    drop(rw.read());
    drop(rw.write());
    let zero = LockStat {
        name: "t_off",
        acquisitions: 0,
        contended: 0,
        wait_total_ns: 0,
        wait_max_ns: 0,
        held_ns: 0,
    };
    assert_eq!(T.stat(), zero);
}

#[test]
fn reset_zeroes_engine_classes() {
    let _flag = lockstat(true);
    let m = Mutex::new(&SUPER, ());
    drop(m.lock());
    assert!(SUPER.stat().acquisitions >= 1);
    lockstat_reset();
    set_lockstat(false);
    assert_eq!(SUPER.stat().acquisitions, 0);
}

#[test]
fn table_names_classes_sorted_by_total_wait() {
    let stat = |name, contended, wait_total_ns| LockStat {
        name,
        acquisitions: 100,
        contended,
        wait_total_ns,
        wait_max_ns: wait_total_ns / 2,
        held_ns: 5_000_000,
    };
    let table = lockstat_table(&[stat("buffer", 0, 0), stat("group", 4, 3_000_000)]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("class"));
    assert!(lines[1].starts_with("group") && lines[1].contains("3.00 ms"));
    assert!(lines[1].contains("750.00 us"), "average wait: {table}");
    assert!(
        lines[2].starts_with("buffer") && lines[2].ends_with("-  5.00 ms"),
        "{table}"
    );
    assert!(
        lines.iter().all(|l| l.len() == lines[0].len()),
        "aligned:\n{table}"
    );
    let all = lockstat_table(&lockstat_snapshot());
    assert!(all_classes().iter().all(|c| all.contains(c.name())));
}

#[test]
fn exclusive_holds_are_timed() {
    // Goal: a mutex or write hold adds its length; a condvar wait and a read hold add
    // nothing; with statistics off nothing is timed.
    static T: LockClass = LockClass::new("t_held", 10, false);
    let _flag = lockstat(true);
    let hold = Duration::from_millis(20);
    let m = Mutex::new(&T, ());
    let g = m.lock();
    thread::sleep(hold);
    drop(g);
    let once = T.stat().held_ns;
    assert!(once >= 20_000_000, "{once} ns");
    let rw = RwLock::new(&T, ());
    let r = rw.read();
    thread::sleep(hold);
    drop(r);
    assert_eq!(T.stat().held_ns, once, "a read hold is not timed");
    let w = rw.try_write().expect("free");
    thread::sleep(hold);
    drop(w);
    let twice = T.stat().held_ns;
    assert!(twice >= once + 20_000_000, "{twice} ns");
    let cv = Condvar::new();
    let mut g = m.lock();
    cv.wait_for(&mut g, Duration::from_millis(200));
    drop(g);
    let waited = T.stat().held_ns - twice;
    assert!(waited < 100_000_000, "the wait counted: {waited} ns");
    set_lockstat(false);
    let g = m.lock();
    thread::sleep(hold);
    drop(g);
    assert_eq!(T.stat().held_ns, twice + waited, "off: not timed");
}

#[test]
fn format_ns_units() {
    assert_eq!(format_ns(999), "999 ns");
    assert_eq!(format_ns(1_500), "1.50 us");
    assert_eq!(format_ns(2_000_000_000), "2.00 s");
}

#[test]
fn locks_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Mutex<Vec<u8>>>();
    send_sync::<RwLock<Vec<u8>>>();
    send_sync::<Condvar>();
    send_sync::<LockClass>();
}

#[test]
fn condvar_wakes_waiter() {
    static T: LockClass = LockClass::new("t_condvar", 10, false);
    let pair = (Mutex::new(&T, false), Condvar::new());
    thread::scope(|s| {
        s.spawn(|| {
            *pair.0.lock() = true;
            pair.1.notify_all();
        });
        let mut ready = pair.0.lock();
        for _ in 0..1_000 {
            if *ready {
                break;
            }
            pair.1.wait_for(&mut ready, Duration::from_millis(10));
        }
        assert!(*ready);
    });
}

#[test]
fn in_order_and_get_mut() {
    static LOW: LockClass = LockClass::new("t_in_low", 10, false);
    static HIGH: LockClass = LockClass::new("t_in_high", 20, false);
    let mut low = Mutex::new(&LOW, 1);
    let high = RwLock::new(&HIGH, 2);
    {
        let a = low.lock();
        let b = high.read();
        assert_eq!(*a + *b, 3);
    }
    *low.get_mut() += 1;
    assert_eq!(low.into_inner() + high.into_inner(), 4);
}

#[cfg(debug_assertions)]
mod order_checker {
    use super::*;

    static LOW: LockClass = LockClass::new("t_low", 10, false);
    static MID: LockClass = LockClass::new("t_mid", 20, false);
    static HIGH: LockClass = LockClass::new("t_high", 30, false);
    static NEST: LockClass = LockClass::new("t_nest", 15, true);

    #[test]
    #[should_panic(expected = "lock order violation: taking `t_low` (rank 10) while \
                               holding `t_high` (rank 30")]
    fn taking_lower_rank_panics() {
        let low = Mutex::new(&LOW, ());
        let high = Mutex::new(&HIGH, ());
        let _h = high.lock();
        let _l = low.lock();
    }

    #[test]
    #[should_panic(expected = "taking `t_mid` (rank 20) while holding `t_mid` (rank 20")]
    fn same_rank_not_nestable_panics() {
        let a = RwLock::new(&MID, ());
        let b = RwLock::new(&MID, ());
        let _a = a.read();
        let _b = b.write();
    }

    #[test]
    fn nestable_same_rank_allowed() {
        let parent = Mutex::new(&NEST, ());
        let child = RwLock::new(&NEST, ());
        let _p = parent.lock();
        let _c = child.write();
        assert_eq!(order::held_ranks(), vec![15, 15]);
    }

    #[test]
    fn out_of_order_drop_removes_the_right_hold() {
        let (low, mid, high) = (
            Mutex::new(&LOW, ()),
            Mutex::new(&MID, ()),
            Mutex::new(&HIGH, ()),
        );
        let l = low.lock();
        let m = mid.lock();
        drop(l);
        assert_eq!(order::held_ranks(), vec![20]);
        let h = high.lock();
        drop(m);
        assert_eq!(order::held_ranks(), vec![30]);
        drop(h);
        assert!(order::held_ranks().is_empty());
        let _l = low.lock();
    }

    #[test]
    fn try_lock_skips_check_but_records_hold() {
        let (low, mid, high) = (
            Mutex::new(&LOW, ()),
            RwLock::new(&MID, ()),
            Mutex::new(&HIGH, ()),
        );
        let h = high.lock();
        let l = low.try_lock().expect("free");
        let m = mid.try_write().expect("free");
        assert_eq!(order::held_ranks(), vec![30, 10, 20]);
        drop((h, l, m));
        assert!(order::held_ranks().is_empty());
    }

    #[test]
    #[should_panic(expected = "taking `t_mid` (rank 20) while holding `t_high` (rank 30")]
    fn try_lock_hold_is_checked_later() {
        let (mid, high) = (Mutex::new(&MID, ()), Mutex::new(&HIGH, ()));
        let _h = high.try_lock().expect("free");
        let _m = mid.lock();
    }

    #[test]
    #[should_panic(expected = "condvar wait on `t_low` (rank 10) while holding `t_mid`")]
    fn condvar_wait_under_higher_lock_panics() {
        let (low, mid) = (Mutex::new(&LOW, ()), Mutex::new(&MID, ()));
        let cv = Condvar::new();
        let mut l = low.lock();
        let _m = mid.lock();
        cv.wait_for(&mut l, Duration::from_millis(1));
    }

    #[test]
    fn holds_are_per_thread() {
        let high = Mutex::new(&HIGH, ());
        let _h = high.lock();
        thread::scope(|s| {
            s.spawn(|| drop(Mutex::new(&LOW, ()).lock()))
                .join()
                .unwrap()
        });
    }
}
