//! Unit tests of the inode allocator and its baseline.

use super::claim::chunk_start;
use super::searchmap::{find_zero_atomic, test_and_set, SearchLine, CHUNK, CHUNK_WORDS};
use super::*;

fn words(bits: &[usize], n: usize) -> SearchMap {
    let w = SearchMap::new(n, |_| 0);
    for &b in bits {
        test_and_set(&w, b);
    }
    w
}

#[test]
fn atomic_search_finds_the_first_zero_from_a_bit() {
    let w = words(&(0..70).collect::<Vec<_>>(), 256);
    assert_eq!(find_zero_atomic(&w, 0, 256), Some(70));
    assert_eq!(find_zero_atomic(&w, 71, 256), Some(71));
    assert_eq!(find_zero_atomic(&w, 3, 60), None);
    let full = words(&(0..128).collect::<Vec<_>>(), 128);
    assert_eq!(find_zero_atomic(&full, 0, 128), None);
    assert_eq!(find_zero_atomic(&full, 127, 128), None);
}

/// A lane keeps to its chunk while it has room after the cursor, then takes the
/// first entirely free chunk; with none, ext4's search from the first inode.
#[test]
fn chunk_start_keeps_a_lane_in_its_own_chunk() {
    let ipg = 4 * CHUNK;
    let c = CHUNK;
    // Chunks 0 and 1 partly used, chunks 2 and 3 entirely free.
    let used = words(&[0, 1, 2, c, c + 6], ipg);
    assert_eq!(
        chunk_start(0, &used, 0, ipg),
        0,
        "a fresh lane: ext4's search"
    );
    assert_eq!(
        chunk_start(c, &used, 0, ipg),
        2 * c,
        "a full chunk: a new one"
    );
    assert_eq!(
        chunk_start(c + 7, &used, 0, ipg),
        c + 7,
        "room after the cursor"
    );
    assert_eq!(
        chunk_start(2 * c, &used, 0, ipg),
        2 * c,
        "its chunk is done"
    );
    let busy2 = words(&[0, c, 2 * c + 2], ipg);
    assert_eq!(
        chunk_start(2 * c, &busy2, 0, ipg),
        3 * c,
        "the next free chunk"
    );
    let full = words(&(0..ipg).filter(|b| b % 64 == 5).collect::<Vec<_>>(), ipg);
    assert_eq!(chunk_start(70, &full, 11, ipg), 70, "room in its chunk");
    assert_eq!(chunk_start(c, &full, 11, ipg), 11, "no free chunk");
    // Group 0's reserved inodes: never before `first`, whose chunk counts as free.
    let reserved = words(&(0..10).collect::<Vec<_>>(), ipg);
    assert_eq!(chunk_start(0, &reserved, 10, ipg), 10);
    assert_eq!(chunk_start(c, &reserved, 10, ipg), 10);
    assert_eq!(
        chunk_start(5, &used, 10, ipg),
        10,
        "bits before first do not count"
    );
    let taken = words(&[0, 1, 11], ipg);
    assert_eq!(
        chunk_start(c, &taken, 10, ipg),
        c,
        "an inode after first is in use"
    );
    // A chunk is one cache line of the map.
    assert_eq!(std::mem::size_of::<SearchLine>(), 64);
    assert_eq!(std::mem::align_of::<SearchLine>(), 64);
}

/// What every claim writes (the lock, the counters) starts a line pair of its own,
/// after what searches read, and no two groups share a line.
#[test]
fn a_group_keeps_its_lock_off_the_lines_searches_read() {
    let hot = std::mem::offset_of!(IGroup, free);
    assert!(
        hot >= 128 && hot.is_multiple_of(128),
        "counters at offset {hot}"
    );
    // A claim's counters, lock and state on that one line; a free's list after it.
    let g = IGroup {
        bitmap: 0,
        table: 0,
        maps: OnceLock::new(),
        ibuf: OnceLock::new(),
        has_free: AtomicBool::new(false),
        _hot: LineBreak,
        free: AtomicU32::new(0),
        dirs: AtomicU32::new(0),
        pending: AtomicBool::new(false),
        has_busy: AtomicBool::new(false),
        st: Mutex::new(
            &IGROUP,
            IState {
                itable_unused: 0,
                uninit: false,
                fresh: None,
                skew: 0,
                busy: Vec::new(),
            },
        ),
    };
    let base = &g as *const IGroup as usize;
    let st = g.st.lock();
    let at = |p: usize| p - base;
    let fresh = at(&st.fresh as *const _ as usize);
    let lock = at(&g.st as *const _ as usize);
    assert!(lock + 16 <= hot + 64, "lock at {lock}");
    assert!(
        fresh + std::mem::size_of_val(&st.fresh) <= hot + 64,
        "the fresh map at {fresh}"
    );
    drop(st);
    for cold in [
        std::mem::offset_of!(IGroup, table),
        std::mem::offset_of!(IGroup, maps),
        std::mem::offset_of!(IGroup, has_free),
    ] {
        assert!(cold < 128, "a field searches read at offset {cold}");
    }
    assert_eq!(std::mem::align_of::<IGroup>(), 128);
    assert_eq!(std::mem::align_of::<CursorLine>(), 128);
}

/// Past the group's last inode the map reads as used, to the end of its last line.
#[test]
fn search_map_pads_its_last_line_with_used_bits() {
    let m = SearchMap::new(100, |_| 0);
    assert_eq!(find_zero_atomic(&m, 0, 8 * 64), Some(0));
    assert!(!m.test(99));
    assert!(m.test(128) && m.test(511));
    assert!(!m.chunk_free(0, 0));
    assert!(SearchMap::new(512, |_| 0).chunk_free(0, 0));
}

/// The seal's reads of a map: free bits among the group's, and whole words with the
/// block's padding past the map's lines.
#[test]
fn search_map_counts_free_bits_and_pads_past_its_end() {
    let m = words(&[0, 3, 64, 99], 100);
    assert_eq!(m.zeros(100), 96);
    assert_eq!(m.zeros(64), 62);
    assert_eq!(m.word_or_full(0), 0b1001);
    assert_eq!(m.word_or_full(1), 1 | 1 << 35);
    assert_eq!(m.word_or_full(CHUNK_WORDS - 1), u64::MAX, "past the words");
    assert_eq!(m.word_or_full(CHUNK_WORDS), u64::MAX, "past the lines");
    let mut block = vec![0u8; 128];
    for w in 0..16 {
        crate::disk::put_bitmap_word(&mut block, w, m.word_or_full(w));
    }
    assert!(test_bit(&block, 3) && test_bit(&block, 99) && !test_bit(&block, 98));
    assert_eq!(crate::disk::bitmap_word(&block, 1), 1 | 1 << 35);
    assert!((128..1024).all(|i| test_bit(&block, i)));
}

#[test]
fn test_and_set_reports_a_lost_race() {
    let w = words(&[], 64);
    assert!(!test_and_set(&w, 5));
    assert!(test_and_set(&w, 5));
}
