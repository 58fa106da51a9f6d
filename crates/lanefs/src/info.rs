//! info: a human-readable description of an ext4 image, like `dumpe2fs -h` followed by one
//! line per block group and a free-space histogram like `e2freefrag`.
//!
//! Read-only and independent of the engine: it decodes the superblock, the group descriptors
//! and the block bitmaps through [`crate::disk`]. Groups whose block bitmap is not initialized
//! (BLOCK_UNINIT) are computed the way the kernel does.

use crate::dev::BlockDevice;
use crate::disk::geometry::Geometry;
use crate::disk::group::{GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::disk::superblock::{compat, feature_names, incompat, ro_compat, Superblock};
use crate::disk::{find_one, find_zero};
use crate::error::Result;
use crate::fsck::{self, Problem};
use std::fmt::Write;

/// Groups listed one per line; beyond this the middle of the list is elided.
const MAX_GROUP_LINES: u32 = 4096;
/// Histogram buckets: 4K, 8K, ... 512M, and 1G+.
const BUCKETS: usize = 19;
/// Groups whose bitmaps are read at once.
const GROUP_BATCH: u32 = 1024;

/// Describe the file system on `dev`: superblock summary, one line per group, and a
/// histogram of free extents.
///
/// Fails only if the superblock is unusable or the device cannot be read.
///
/// ```
/// use lanefs::{info, mkfs, MemDevice};
/// let dev = MemDevice::new(32 << 20);
/// mkfs::format(&dev, &mkfs::MkfsOptions::default())?;
/// let text = info::report(&dev)?;
/// assert!(text.lines().any(|l| l.starts_with("Block size:") && l.ends_with("4096")));
/// # Ok::<(), lanefs::Error>(())
/// ```
pub fn report(dev: &dyn BlockDevice) -> Result<String> {
    let (sb, problems) = fsck::load_superblock(dev)?;
    let geo = fsck::geometry(&sb, dev.size())?;
    let descs = fsck::read_group_descs(dev, &geo)?;
    let hist = free_histogram(dev, &geo, &descs)?;
    let mut out = String::new();
    write_superblock(&mut out, &sb, &geo, &problems);
    write_groups(&mut out, &geo, &descs);
    write_histogram(&mut out, &geo, &hist);
    write_rt(&mut out, dev, &sb, &geo, &descs)?;
    Ok(out)
}

/// The blocks of a small file's first `n` logical blocks, from its inode's extent tree
/// (read raw; `None` when one is unmapped or the tree is unreadable).
fn file_blocks(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    descs: &[GroupDesc],
    ino: u32,
    n: u64,
) -> Result<Option<Vec<u64>>> {
    use crate::disk::extent::{decode_node, Node};
    let (g, k) = ((ino - 1) / geo.ipg, (ino - 1) % geo.ipg);
    let Some(d) = descs.get(g as usize) else {
        return Ok(None);
    };
    let isz = u64::from(geo.inode_size);
    let bs = u64::from(geo.bs);
    let at = d.inode_table() * bs + u64::from(k) * isz;
    let mut raw = vec![0u8; isz as usize];
    dev.read_at(at, &mut raw)?;
    let inode = crate::disk::inode::DiskInode::from_bytes(&raw);
    // Bounded by the image, whatever its fields say: no file maps more blocks than the
    // file system has, and each tree block is read once (a block named twice or an
    // index naming itself ends the walk: the tree is unreadable).
    if n > geo.blocks {
        return Ok(None);
    }
    let mut out = vec![None; n as usize];
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(inode.iblock().to_vec(), 0u64)];
    while let Some((buf, at)) = stack.pop() {
        match decode_node(&buf, at) {
            Ok(Node::Leaf(v)) => {
                for e in v {
                    for i in 0..u64::from(e.len) {
                        if let Some(slot) = out.get_mut((u64::from(e.lblk) + i) as usize) {
                            *slot = Some(e.pblk + i);
                        }
                    }
                }
            }
            Ok(Node::Index(_, v)) => {
                for ix in v {
                    if !geo.in_fs(ix.child, 1) || stack.len() > 64 || !seen.insert(ix.child) {
                        return Ok(None);
                    }
                    let mut b = vec![0u8; bs as usize];
                    dev.read_at(ix.child * bs, &mut b)?;
                    stack.push((b, ix.child));
                }
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(out.into_iter().collect())
}

/// The realtime device's geometry and free-space histogram, from the summary file (an
/// image made with `lanefs mkfs --rtdev`; the data device is not needed).
fn write_rt(
    out: &mut String,
    dev: &dyn BlockDevice,
    sb: &Superblock,
    geo: &Geometry,
    descs: &[GroupDesc],
) -> Result<()> {
    use crate::disk::rtdev::{self, RtGeometry, RtSuper, RT_SUMMARY_INO};
    if !sb.has_incompat(rtdev::RTDEV_INCOMPAT) {
        return Ok(());
    }
    let Ok(Some(s)) = RtSuper::decode(&sb.raw[..]) else {
        let _ = writeln!(out, "\nRealtime device: geometry missing or invalid");
        return Ok(());
    };
    let rg = RtGeometry::new(sb.block_size(), &s);
    let ext_bytes = rg.extent_bytes();
    let _ = writeln!(
        out,
        "\nRealtime device: {} extents of {} ({} bytes), {} group(s) of {} bitmap block(s)",
        rg.rextents,
        size_label(ext_bytes),
        rg.device_bytes(),
        rg.groups(),
        rg.group_bmblocks
    );
    let Some(blocks) = file_blocks(dev, geo, descs, RT_SUMMARY_INO, rg.summary_blocks())? else {
        let _ = writeln!(out, "Realtime summary: unreadable (run lanefs fsck)");
        return Ok(());
    };
    let bs = u64::from(geo.bs);
    let mut data = Vec::with_capacity(blocks.len());
    for b in blocks {
        let mut buf = vec![0u8; bs as usize];
        dev.read_at(b * bs, &mut buf)?;
        data.push(buf);
    }
    let mut hist = vec![0u64; rg.levels() as usize];
    for g in 0..rg.groups() {
        for log in 0..rg.levels_in(g) {
            for bb in 0..rg.bmblocks_in(g) {
                let (f, off) = rg.summary_at(g, log, bb);
                hist[log as usize] += u64::from(rtdev::counter(&data[f as usize], off));
            }
        }
    }
    let runs: u64 = hist.iter().sum();
    let _ = writeln!(out, "Realtime free runs: {runs} (by the summary)");
    let _ = writeln!(out, "\nHISTOGRAM OF FREE REALTIME RUNS:");
    let _ = writeln!(out, "Run Size Range    :      Free runs");
    for (log, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let lo = size_label(ext_bytes << log);
        let hi = size_label(ext_bytes << (log + 1));
        let _ = writeln!(out, "{lo:>5}...{hi:>5}-  :  {n:>13}");
    }
    Ok(())
}

fn uuid_string(u: &[u8; 16]) -> String {
    let hex: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

fn hash_name(v: u8) -> String {
    match v {
        0 => "legacy".into(),
        1 => "half_md4".into(),
        2 => "tea".into(),
        3 => "legacy_unsigned".into(),
        4 => "half_md4_unsigned".into(),
        5 => "tea_unsigned".into(),
        _ => format!("unknown ({v})"),
    }
}

/// All feature names, space separated, in dumpe2fs order (compat, incompat, ro_compat).
pub(crate) fn features_string(sb: &Superblock) -> String {
    [
        feature_names(sb.feature_compat(), compat::NAMES),
        feature_names(sb.feature_incompat(), incompat::NAMES),
        feature_names(sb.feature_ro_compat(), ro_compat::NAMES),
    ]
    .iter()
    .filter(|s| !s.is_empty())
    .map(|s| s.replace(", ", " "))
    .collect::<Vec<_>>()
    .join(" ")
}

fn state_string(state: u16) -> String {
    let mut s = if state & 1 != 0 {
        "clean".to_string()
    } else {
        "not clean".to_string()
    };
    if state & 2 != 0 {
        s.push_str(" with errors");
    }
    s
}

fn write_superblock(out: &mut String, sb: &Superblock, geo: &Geometry, problems: &[Problem]) {
    let label = sb.volume_name();
    let mut kv: Vec<(&str, String)> = vec![
        (
            "Filesystem volume name",
            if label.is_empty() {
                "<none>".into()
            } else {
                label
            },
        ),
        ("Filesystem UUID", uuid_string(&sb.uuid())),
        ("Filesystem magic number", format!("{:#06X}", sb.magic())),
        ("Filesystem features", features_string(sb)),
        ("lanefs access", crate::fs::access_summary(sb)),
        ("Filesystem state", state_string(sb.state())),
        ("Inode count", sb.inodes_count().to_string()),
        ("Block count", sb.blocks_count().to_string()),
        ("Reserved block count", sb.r_blocks_count().to_string()),
        ("Free blocks", sb.free_blocks_count().to_string()),
        ("Free inodes", sb.free_inodes_count().to_string()),
        ("First block", sb.first_data_block().to_string()),
        ("Block size", geo.bs.to_string()),
        ("Group count", geo.groups.to_string()),
        ("Blocks per group", geo.bpg.to_string()),
        ("Inodes per group", geo.ipg.to_string()),
        ("Inode blocks per group", geo.itable_blocks().to_string()),
        ("Inode size", geo.inode_size.to_string()),
        ("First inode", geo.first_ino.to_string()),
        ("Group descriptor size", geo.desc_size.to_string()),
        ("Reserved GDT blocks", geo.reserved_gdt.to_string()),
    ];
    if sb.has_incompat(incompat::FLEX_BG) {
        let flex = 1u64
            .checked_shl(u32::from(sb.log_groups_per_flex()))
            .unwrap_or(0);
        kv.push(("Flex block group size", flex.to_string()));
    }
    kv.push(("Journal inode", sb.journal_inum().to_string()));
    kv.push(("Default directory hash", hash_name(sb.def_hash_version())));
    let seed: Vec<String> = sb.hash_seed().iter().map(|w| format!("{w:08x}")).collect();
    kv.push(("Directory hash seed", seed.join(" ")));
    if sb.metadata_csum() {
        let ok = if problems.iter().any(|p| p.code == "SB_CHECKSUM") {
            "BAD"
        } else {
            "ok"
        };
        kv.push(("Checksum", format!("{:#010x} ({ok})", sb.checksum())));
    }
    kv.push((
        "Mount count",
        format!("{} (max {})", sb.mnt_count(), sb.max_mnt_count() as i16),
    ));
    let mtime = match sb.mtime() {
        0 => "n/a".to_string(),
        t => format!("{t} (unix)"),
    };
    kv.push(("Last mount time", mtime));
    kv.push(("Last write time", format!("{} (unix)", sb.wtime())));
    kv.push(("Lifetime writes", format!("{} KiB", sb.kbytes_written())));
    kv.push(("Filesystem created", format!("{} (unix)", sb.mkfs_time())));
    kv.push(("First orphan inode", sb.last_orphan().to_string()));
    for (k, v) in kv {
        let _ = writeln!(out, "{:<26}{v}", format!("{k}:"));
    }
}

fn flags_string(flags: u16) -> String {
    let mut v = Vec::new();
    for (bit, name) in [
        (BG_INODE_UNINIT, "INODE_UNINIT"),
        (BG_BLOCK_UNINIT, "BLOCK_UNINIT"),
        (BG_INODE_ZEROED, "ITABLE_ZEROED"),
    ] {
        if flags & bit != 0 {
            v.push(name);
        }
    }
    v.join(",")
}

fn write_groups(out: &mut String, geo: &Geometry, descs: &[GroupDesc]) {
    let _ = writeln!(
        out,
        "\n{:>6} {:>23} {:>11} {:>11} {:>23} {:>8} {:>8} {:>6} {:>8}  flags",
        "group",
        "blocks",
        "blk bitmap",
        "ino bitmap",
        "inode table",
        "free blk",
        "free ino",
        "dirs",
        "unused"
    );
    let n = geo.groups;
    let half = MAX_GROUP_LINES / 2;
    for (g, d) in descs.iter().enumerate() {
        let g = g as u32;
        if n > MAX_GROUP_LINES && g >= half && g < n - half {
            if g == half {
                let _ = writeln!(out, "   ... {} groups omitted ...", n - 2 * half);
            }
            continue;
        }
        let first = geo.group_first(g);
        let last = first + u64::from(geo.group_len(g)).saturating_sub(1);
        let it = d.inode_table();
        let it_end = it.saturating_add(geo.itable_blocks().saturating_sub(1));
        let _ = writeln!(
            out,
            "{g:>6} {:>23} {:>11} {:>11} {:>23} {:>8} {:>8} {:>6} {:>8}  {}",
            format!("{first}-{last}"),
            d.block_bitmap(),
            d.inode_bitmap(),
            format!("{it}-{it_end}"),
            d.free_blocks(),
            d.free_inodes(),
            d.used_dirs(),
            d.itable_unused(),
            flags_string(d.flags())
        );
    }
}

/// Free extents by size bucket, as e2freefrag computes them.
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS],
    blocks: [u64; BUCKETS],
    free: u64,
    extents: u64,
    min: u64,
    max: u64,
    /// Groups whose bitmap could not be located (left out of the histogram).
    unknown_groups: u32,
}

impl Histogram {
    /// Close the free extent being accumulated in `run` (in blocks).
    fn flush(&mut self, run: &mut u64, bs: u64) {
        if *run == 0 {
            return;
        }
        let bytes = run.saturating_mul(bs);
        let lg = 63 - bytes.leading_zeros() as usize;
        let i = lg.saturating_sub(12).min(BUCKETS - 1);
        self.counts[i] += 1;
        self.blocks[i] += *run;
        self.free += *run;
        self.extents += 1;
        self.min = if self.extents == 1 {
            *run
        } else {
            self.min.min(*run)
        };
        self.max = self.max.max(*run);
        *run = 0;
    }

    /// Add one group's bitmap (`len` valid bits); free extents continue across groups.
    fn add_group(&mut self, map: &[u8], len: usize, run: &mut u64, bs: u64) {
        debug_assert!(
            len <= map.len() * 8,
            "{len} bits of a {}-byte map",
            map.len()
        );
        let mut i = 0;
        while i < len {
            let z = find_zero(map, i, len).unwrap_or(len);
            if z > i {
                self.flush(run, bs);
            }
            if z >= len {
                break;
            }
            let e = find_one(map, z, len).unwrap_or(len);
            *run += (e - z) as u64;
            i = e;
        }
    }
}

fn free_histogram(dev: &dyn BlockDevice, geo: &Geometry, descs: &[GroupDesc]) -> Result<Histogram> {
    debug_assert_eq!(descs.len(), geo.groups as usize, "one descriptor per group");
    let mut h = Histogram::default();
    let mut run = 0u64;
    for start in (0..geo.groups).step_by(GROUP_BATCH as usize) {
        let end = (start + GROUP_BATCH).min(geo.groups);
        let (idx, blocks): (Vec<u32>, Vec<u64>) = (start..end)
            .filter_map(|g| {
                let d = &descs[g as usize];
                let readable = d.flags() & BG_BLOCK_UNINIT == 0 && geo.in_fs(d.block_bitmap(), 1);
                readable.then(|| (g, d.block_bitmap()))
            })
            .unzip();
        let mut maps = fsck::read_scattered(dev, geo, &blocks)?.into_iter();
        let mut next = idx.iter().peekable();
        for g in start..end {
            let d = &descs[g as usize];
            let map = if next.peek() == Some(&&g) {
                next.next();
                maps.next().unwrap_or_default()
            } else if d.flags() & BG_BLOCK_UNINIT != 0 && geo.desc_csum.on() {
                crate::disk::group::uninit_block_bitmap(geo, g, d)
            } else {
                h.flush(&mut run, geo.block_bytes());
                h.unknown_groups += 1;
                continue;
            };
            let len = (geo.group_len(g) as usize).min(map.len() * 8);
            h.add_group(&map, len, &mut run, geo.block_bytes());
        }
    }
    h.flush(&mut run, geo.block_bytes());
    // At most each group's own bits are counted, whatever the bitmaps hold.
    debug_assert!(
        h.free <= geo.blocks,
        "{} free blocks of {}",
        h.free,
        geo.blocks
    );
    Ok(h)
}

fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}

fn write_histogram(out: &mut String, geo: &Geometry, h: &Histogram) {
    let bs = geo.block_bytes();
    let pct = |n: u64, of: u64| {
        if of == 0 {
            0.0
        } else {
            n as f64 * 100.0 / of as f64
        }
    };
    let _ = writeln!(out, "\nTotal blocks: {}", geo.blocks);
    let _ = writeln!(
        out,
        "Free blocks: {} ({:.1}%)",
        h.free,
        pct(h.free, geo.blocks)
    );
    let avg = (h.free * bs).checked_div(h.extents).unwrap_or(0) / 1024;
    let _ = writeln!(out, "\nMin. free extent: {} KB ", h.min * bs / 1024);
    let _ = writeln!(out, "Max. free extent: {} KB", h.max * bs / 1024);
    let _ = writeln!(out, "Avg. free extent: {avg} KB");
    let _ = writeln!(out, "Num. free extent: {}", h.extents);
    if h.unknown_groups > 0 {
        let _ = writeln!(
            out,
            "({} groups with an invalid bitmap location left out)",
            h.unknown_groups
        );
    }
    let _ = writeln!(out, "\nHISTOGRAM OF FREE EXTENT SIZES:");
    let _ = writeln!(
        out,
        "Extent Size Range :  Free extents   Free Blocks  Percent"
    );
    for i in 0..BUCKETS {
        if h.counts[i] == 0 {
            continue;
        }
        let lo = size_label(4096 << i);
        let range = if i + 1 == BUCKETS {
            format!("{lo:>5}+        ")
        } else {
            format!("{lo:>5}...{:>5}- ", size_label(4096 << (i + 1)))
        };
        let _ = writeln!(
            out,
            "{range} :  {:>12}  {:>12}  {:>6.2}%",
            h.counts[i],
            h.blocks[i],
            pct(h.blocks[i], h.free)
        );
    }
}
