//! Configuration and the base image: the image shapes the workloads run on (ext4 with 4 KiB
//! and 1 KiB blocks, ext3, a small buffer cache, large folios) and the thread's current one,
//! the `LANEFS_CRASH_*` settings, seed mixing, the freshly made base image of each shape,
//! the mount options, the pool of image buffers, and the file-content pattern.

use super::*;

// ---------------------------------------------------------------------------------------
// Configuration and the base image.

/// An image shape the workloads run on.
pub(super) struct Shape {
    /// Index into the per-shape caches.
    idx: usize,
    /// Prefix of test names and saved images ("" for the default shape).
    pub(super) name: &'static str,
    bs: u64,
    /// New files get extents (else block maps, and fallocate may be refused).
    extents: bool,
    /// `mke2fs` arguments; empty: `mkfs.ext4 -b 4096 -J size=4` as always.
    mkfs: &'static [&'static str],
    /// The mount's `bufcache_limit` (0: the default).
    bufcache_limit: u64,
    /// The mount's `folio_max_order` and `pagecache_limit` (`None`: the defaults).
    pages: Option<(u8, u64)>,
}

/// mkfs.ext4's defaults with 4 KiB blocks (metadata_csum, 64-bit journal tags, csum v3).
pub(super) const EXT4_4K: Shape = Shape {
    idx: 0,
    name: "",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 0,
    pages: None,
};

/// ext4 with 1 KiB blocks: the superblock in block 1, 1 KiB journal blocks.
pub(super) const EXT4_1K: Shape = Shape {
    idx: 1,
    name: "1k_",
    bs: 1024,
    extents: true,
    mkfs: &["-t", "ext4", "-b", "1024", "-J", "size=4"],
    bufcache_limit: 0,
    pages: None,
};

/// ext3: block-mapped files, a journal with 32-bit block tags and no checksums.
pub(super) const EXT3: Shape = Shape {
    idx: 2,
    name: "ext3_",
    bs: 4096,
    extents: false,
    mkfs: &["-t", "ext3", "-b", "4096", "-J", "size=4"],
    bufcache_limit: 0,
    pages: None,
};

/// mkfs.ext4's defaults with 4 KiB blocks, mounted with a 256 KiB buffer cache: a
/// transaction closes past 8 blocks and the journal checkpoints once 32 blocks are pinned,
/// so nearly every commit checkpoints and evictions run all the time.
pub(super) const SMALL_CACHE: Shape = Shape {
    idx: 0,
    name: "smallcache_",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 256 << 10,
    pages: None,
};

/// mkfs.ext4's defaults with 4 KiB blocks, mounted with folios up to order 6 (256 KiB) in
/// a 1 MiB page cache: writes make dirty folios of every order, punches and truncations
/// split them, the dirty limit (a quarter of the cache) throttles writers into writing back
/// their own files, and clean folios are evicted all the time.
pub(super) const FOLIOS: Shape = Shape {
    idx: 0,
    name: "folios_",
    bs: 4096,
    extents: true,
    mkfs: &[],
    bufcache_limit: 0,
    pages: Some((6, 1 << 20)),
};

/// What a test thread's shape sets: (block size, extents, bufcache_limit, pages).
type ShapeCell = std::cell::Cell<(u64, bool, u64, Option<(u8, u64)>)>;

thread_local! {
    /// The shape this test thread runs on.
    static SHAPE: ShapeCell = const { std::cell::Cell::new((4096, true, 0, None)) };
}

pub(super) fn set_shape(s: &Shape) {
    SHAPE.with(|c| c.set((s.bs, s.extents, s.bufcache_limit, s.pages)));
}

/// The block size of this thread's image.
pub(super) fn bs() -> u64 {
    SHAPE.with(|c| c.get().0)
}

/// Whether this thread's image gives new files extents.
pub(super) fn extents() -> bool {
    SHAPE.with(|c| c.get().1)
}

pub(super) fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

/// Total states for the workload tests together.
pub(super) fn total_states() -> u64 {
    env_u64("LANEFS_CRASH_STATES")
        .unwrap_or(3000)
        .max(WORKLOADS)
}

/// The base seed: `LANEFS_CRASH_SEED`, or a fresh one printed once.
pub(super) fn base_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = env_u64("LANEFS_CRASH_SEED").unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)) & 0xFFFF_FFFF
        });
        println!("crash: LANEFS_CRASH_SEED={seed:#x}");
        seed
    })
}

pub(super) fn e2fsck_every() -> u64 {
    env_u64("LANEFS_CRASH_E2FSCK_EVERY")
        .unwrap_or_else(|| match total_states() {
            t if t <= 600 => 1,
            t => t / 300,
        })
        .max(1)
}

/// Bytes a torn write is cut at: `LANEFS_CRASH_TEAR` (default the block size, at most
/// 4096: a device that writes a file-system block atomically; 512 tears inside blocks).
pub(super) fn tear_unit() -> usize {
    let t = env_u64("LANEFS_CRASH_TEAR").unwrap_or(bs().min(4096)) as usize;
    assert!(
        t >= 512 && t.is_multiple_of(512),
        "LANEFS_CRASH_TEAR={t}: a multiple of 512"
    );
    t
}

pub(super) fn max_failures() -> usize {
    env_u64("LANEFS_CRASH_MAX_FAILURES").unwrap_or(5).max(1) as usize
}

/// splitmix64: independent seeds from one.
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(super) fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The freshly made image every run on `shape` starts from, or None (after a SKIP)
/// without mkfs.ext4.
pub(super) fn base_image(test: &str, shape: &Shape) -> Option<&'static [u8]> {
    static BASE: [OnceLock<Option<Vec<u8>>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let base = BASE[shape.idx].get_or_init(|| {
        if !common::have_tool("mkfs.ext4") || !common::have_tool("e2fsck") {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = if shape.mkfs.is_empty() {
            common::mkfs_image_args(dir.path(), "base.img", IMG_SIZE, &["-J", "size=4"])
        } else {
            common::mke2fs_image(dir.path(), "base.img", IMG_SIZE, shape.mkfs)
                .unwrap_or_else(|e| panic!("{test}: {e}"))
        };
        Some(std::fs::read(&path).expect("read base image"))
    });
    if base.is_none() {
        common::require_tools(test, &["mkfs.ext4", "e2fsck"]);
    }
    base.as_deref()
}

pub(super) fn opts() -> MountOptions {
    let mut o = MountOptions {
        read_only: false,
        commit_interval: Duration::ZERO,
        ..MountOptions::default()
    };
    let (_, _, limit, pages) = SHAPE.with(|c| c.get());
    if limit > 0 {
        o.bufcache_limit = limit;
    }
    if let Some((order, limit)) = pages {
        o.folio_max_order = order;
        o.pagecache_limit = limit;
    }
    o
}

thread_local! {
    /// Image-sized buffers to reuse: a fresh 64 MiB allocation is mapped anew and costs
    /// far more in page faults than the copy into it.
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(super) fn take_buf() -> Vec<u8> {
    POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

pub(super) fn give_buf(b: Vec<u8>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < 4 {
            p.push(b);
        }
    });
}

/// A device's latest bytes, without a copy when nothing else holds it; then give its
/// buffer back with [`give_buf`].
pub(super) fn device_bytes(dev: Arc<CrashDevice>) -> Vec<u8> {
    match Arc::try_unwrap(dev) {
        Ok(d) => d.into_vec(),
        Err(d) => {
            let mut b = take_buf();
            d.snapshot_into(&mut b);
            b
        }
    }
}

/// File contents: a function of a seed and the offset, never zero, so stale data, lost
/// writes and zeros are all told apart.
pub(super) fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = mix(seed, (off + i) / 8);
            (x >> (((off + i) % 8) * 8)) as u8 | 1
        })
        .collect()
}
