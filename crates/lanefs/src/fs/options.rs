//! `MountOptions`: what a mount runs (each mechanism or its baseline), the caches'
//! limits and ext4's own options, and their parsing from `mount -o` names.

use super::*;

/// Mount options: which mechanism or baseline each part runs, the caches' limits, and
/// ext4's `ro`, `commit=` and atime options.
///
/// `MountOptions::default()` runs every mechanism (see the crate docs for what each one
/// is); set fields directly, or by the names `mount -o` uses with [`MountOptions::apply`]:
///
/// ```
/// use lanefs::{IcachePolicy, MountOptions, StreamGoal};
/// use std::time::Duration;
///
/// // A read-mostly mount with a bigger inode cache and commits every second.
/// let opts = MountOptions {
///     commit_interval: Duration::from_secs(1),
///     icache: IcachePolicy::Bucket,
///     icache_limit: 256 << 20,
///     ..MountOptions::default()
/// };
///
/// // The same from option strings, as `lanefs mount -o` passes them.
/// let mut parsed = MountOptions::default();
/// for opt in "commit=1,icache=bucket,icache_limit=256M".split(',') {
///     let (key, value) = match opt.split_once('=') {
///         Some((k, v)) => (k, Some(v)),
///         None => (opt, None),
///     };
///     assert_eq!(parsed.apply(key, value), Ok(true));
/// }
/// assert_eq!(parsed, opts);
///
/// // A baseline, to measure seed 000's stream goal against.
/// let mut base = MountOptions::default();
/// base.apply("mb_stream_goal", Some("global")).unwrap();
/// assert_eq!(base.mb_stream_goal, StreamGoal::Global);
/// assert!(base.apply("mb_stream_goal", Some("fastest")).is_err());
/// assert_eq!(base.apply("allow_other", None), Ok(false)); // not the engine's
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Mount read-only.
    pub read_only: bool,
    /// Commit the running transaction at least this often (ext4's `commit=5`);
    /// `Duration::ZERO` commits only on fsync, sync, unmount and a full journal.
    pub commit_interval: std::time::Duration,
    /// Block allocation: skip a group whose lock another thread holds, in every pass but
    /// the last (`mb_trylock=1`, default); false waits for it (ext4 before seed 000).
    pub mb_trylock: bool,
    /// Block allocation: the stream goal's form (`mb_stream_goal`; default per inode).
    pub mb_stream_goal: StreamGoal,
    /// Block allocation: pick groups from the lists keyed by largest free order and
    /// average fragment size (`mb_optimize_scan=1`, default, on for any size), or walk
    /// groups linearly from the goal (`0`).
    pub mb_optimize_scan: bool,
    /// When reads update access times (`relatime`, default; `strictatime`; `noatime`).
    pub atime: AtimePolicy,
    /// Directories' access times are never updated (`nodiratime`).
    pub nodiratime: bool,
    /// Inode allocation: how a free bit is claimed (`ialloc=optimistic|locked`).
    pub ialloc: IallocPolicy,
    /// The inode cache's table (`icache=bucket|global|papaya`).
    pub icache: IcachePolicy,
    /// Bytes of clean, unused cached inodes kept before eviction (`icache_limit=BYTES`,
    /// with an optional K, M or G suffix).
    pub icache_limit: u64,
    /// Directory leaf digests (`dir_digest=1`, default): a create or unlink in a large
    /// directory compares 16-bit name tags instead of walking the leaf's entries; each
    /// directory keeps at most a quarter of `icache_limit` of them. `0` walks every leaf,
    /// as ext4 does (the baseline).
    pub dir_digest: bool,
    /// Bytes of metadata blocks cached (`bufcache_limit=BYTES`; default a sixteenth of
    /// the machine's memory within 64 MiB..1 GiB): clean blocks are evicted past it, and
    /// the journal checkpoints when dirty ones pass half of it.
    pub bufcache_limit: u64,
    /// Bytes of file data cached (`pagecache_limit=BYTES`; default an eighth of the
    /// machine's memory within 64 MiB..2 GiB): clean folios are evicted past it, and
    /// writers write back once dirty data passes a quarter of it.
    pub pagecache_limit: u64,
    /// Largest folio of the page cache, as log2 of its blocks (`folio_max_order=0..6`;
    /// default 4, 64 KiB with 4 KiB blocks); 0 is the baseline of single-block pages.
    pub folio_max_order: u8,
    /// The realtime data device of an image made with `lanefs mkfs --rtdev`
    /// (`rtdev=PATH`): required by such an image, refused by any other.
    pub rtdev: Option<std::path::PathBuf>,
    /// The realtime allocator (`rt_alloc=lean|plain`; seed 003): `lean` (default) has the
    /// 2023 series' changes, `plain` is Linux 6.4's algorithm; both decide alike.
    pub rt_alloc: RtAllocPolicy,
    /// Every time the engine stamps (inode times, the superblock's mount and write
    /// times) is at most this many seconds since the epoch (`clamp_time=SECS`), and new
    /// inodes' generation numbers depend on their number alone: what a reproducible build
    /// sets from `SOURCE_DATE_EPOCH` (`lanefs mkfs -d`). Times given explicitly
    /// (`setattr`) are kept as given.
    pub clamp_time: Option<i64>,
    /// Count this mount in the superblock (mount count, last mount time), as a kernel
    /// mount does; false for filling a just-made image (`mkfs -d`), which is no mount
    /// to the user, as `mke2fs -d`'s is not.
    pub count_mount: bool,
    /// A one-shot read-only mount that reads also while another lanefs writes the image
    /// (what it has made durable so far): `lanefs ls`, `cat`, `fsck -n`. Implies
    /// `read_only`. Not for a long-lived mount, which a writer could change under.
    pub snapshot: bool,
    /// Blocks file data may not take, kept for the metadata a full file system still
    /// needs (ext4's reserved clusters, its sysfs `reserved_clusters`): `None` is ext4's
    /// default, 2% of the blocks or 4096, whichever is fewer. Filling a just-made image
    /// (`mkfs -d`) keeps none, as `mke2fs -d` does not.
    pub reserved_blocks: Option<u64>,
}

/// The inode cache's default memory limit.
pub const DEFAULT_ICACHE_LIMIT: u64 = 64 << 20;

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            read_only: false,
            commit_interval: std::time::Duration::from_secs(5),
            mb_trylock: true,
            mb_stream_goal: StreamGoal::Inode,
            mb_optimize_scan: true,
            atime: AtimePolicy::Relative,
            nodiratime: false,
            ialloc: IallocPolicy::Optimistic,
            icache: IcachePolicy::Bucket,
            icache_limit: DEFAULT_ICACHE_LIMIT,
            dir_digest: true,
            bufcache_limit: crate::buf::default_bufcache_limit(),
            pagecache_limit: crate::page::default_pagecache_limit(),
            folio_max_order: crate::page::DEFAULT_MAX_ORDER,
            rtdev: None,
            rt_alloc: RtAllocPolicy::Lean,
            clamp_time: None,
            count_mount: true,
            snapshot: false,
            reserved_blocks: None,
        }
    }
}

impl MountOptions {
    /// The engine's mount options by name, as `mount -o` spells them (ext4's own names
    /// where ext4 has them): `ro`, `rw`, `commit=SECS`, `mb_trylock=0|1`,
    /// `mb_stream_goal=global|inode|slots`, `mb_optimize_scan=0|1`, `relatime`,
    /// `strictatime`, `noatime`, `atime` (= relatime), `nodiratime`, `diratime`,
    /// `ialloc=optimistic|locked`, `icache=bucket|global|papaya`, `icache_limit=BYTES`,
    /// `dir_digest=0|1`, `bufcache_limit=BYTES`, `pagecache_limit=BYTES`, `folio_max_order=0..6`,
    /// `rtdev=PATH`, `rt_alloc=lean|plain`, `clamp_time=SECS`.
    pub const NAMES: &'static [&'static str] = &[
        "ro",
        "rw",
        "commit",
        "mb_trylock",
        "mb_stream_goal",
        "mb_optimize_scan",
        "relatime",
        "strictatime",
        "noatime",
        "atime",
        "nodiratime",
        "diratime",
        "ialloc",
        "icache",
        "icache_limit",
        "dir_digest",
        "bufcache_limit",
        "pagecache_limit",
        "folio_max_order",
        "rtdev",
        "rt_alloc",
        "clamp_time",
    ];

    /// Apply one option `key` or `key=value`. `Ok(false)` when `key` is not an engine
    /// option (a frontend may know it); an error naming the option when its value is
    /// missing or malformed.
    pub fn apply(&mut self, key: &str, value: Option<&str>) -> std::result::Result<bool, String> {
        let need = || value.ok_or_else(|| format!("option {key} needs a value"));
        let flag = || match need()? {
            "0" => Ok(false),
            "1" => Ok(true),
            other => Err(format!("option {key}={other}: expected 0 or 1")),
        };
        let no_value = || match value {
            None => Ok(()),
            Some(x) => Err(format!("option {key} takes no value (got {key}={x})")),
        };
        match key {
            "ro" => {
                no_value()?;
                self.read_only = true;
            }
            "rw" => {
                no_value()?;
                self.read_only = false;
            }
            "commit" => {
                let v = need()?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("option commit={v}: expected whole seconds"))?;
                // As ext4: commit=0 means the default interval.
                self.commit_interval = if secs == 0 {
                    MountOptions::default().commit_interval
                } else {
                    std::time::Duration::from_secs(secs)
                };
            }
            "relatime" | "atime" | "strictatime" | "noatime" => {
                no_value()?;
                self.atime = match key {
                    "strictatime" => AtimePolicy::Strict,
                    "noatime" => AtimePolicy::Never,
                    _ => AtimePolicy::Relative,
                };
            }
            "nodiratime" | "diratime" => {
                no_value()?;
                self.nodiratime = key == "nodiratime";
            }
            "mb_trylock" => self.mb_trylock = flag()?,
            "mb_optimize_scan" => self.mb_optimize_scan = flag()?,
            "mb_stream_goal" => {
                self.mb_stream_goal = match need()? {
                    "global" => StreamGoal::Global,
                    "inode" => StreamGoal::Inode,
                    "slots" => StreamGoal::Slots,
                    other => {
                        return Err(format!(
                            "option mb_stream_goal={other}: expected global, inode or slots"
                        ))
                    }
                }
            }
            "ialloc" => {
                self.ialloc = match need()? {
                    "optimistic" => IallocPolicy::Optimistic,
                    "locked" => IallocPolicy::Locked,
                    other => {
                        return Err(format!(
                            "option ialloc={other}: expected optimistic or locked"
                        ))
                    }
                }
            }
            "icache" => {
                self.icache = match need()? {
                    "bucket" => IcachePolicy::Bucket,
                    "global" => IcachePolicy::Global,
                    "papaya" => IcachePolicy::Papaya,
                    other => {
                        return Err(format!(
                            "option icache={other}: expected bucket, global or papaya"
                        ))
                    }
                }
            }
            "icache_limit" => {
                let v = need()?;
                self.icache_limit =
                    parse_size(v).map_err(|e| format!("option icache_limit={v}: {e}"))?;
            }
            "dir_digest" => self.dir_digest = flag()?,
            "bufcache_limit" => {
                let v = need()?;
                self.bufcache_limit =
                    parse_size(v).map_err(|e| format!("option bufcache_limit={v}: {e}"))?;
            }
            "pagecache_limit" => {
                let v = need()?;
                self.pagecache_limit =
                    parse_size(v).map_err(|e| format!("option pagecache_limit={v}: {e}"))?;
            }
            "folio_max_order" => {
                let v = need()?;
                self.folio_max_order = v
                    .parse()
                    .ok()
                    .filter(|&o| o <= crate::page::MAX_ORDER)
                    .ok_or_else(|| {
                        format!(
                            "option folio_max_order={v}: expected 0 to {}",
                            crate::page::MAX_ORDER
                        )
                    })?;
            }
            "rtdev" => {
                let v = need()?;
                if v.is_empty() {
                    return Err("option rtdev= needs a path".into());
                }
                self.rtdev = Some(v.into());
            }
            "rt_alloc" => {
                let v = need()?;
                self.rt_alloc = RtAllocPolicy::parse(v)
                    .ok_or_else(|| format!("option rt_alloc={v}: expected lean or plain"))?;
            }
            "clamp_time" => {
                let v = need()?;
                let secs =
                    v.parse::<i64>().ok().filter(|&s| s >= 0).ok_or_else(|| {
                        format!("option clamp_time={v}: expected seconds since 1970")
                    })?;
                self.clamp_time = Some(secs);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
