//! Writing the planned file system: the reserved inodes with root, lost+found, the resize
//! inode, the journal and the MMP block; then every group's bitmaps and descriptor; then
//! the superblock and descriptor copies, the primary superblock last.

use super::layout::{lpf_blocks, FileMap, MapKind, Plan, FIRST_INO};
use super::{invalid, CHUNK};
use crate::dev::BlockDevice;
use crate::disk::extent::{self, Index, Node};
use crate::disk::geometry::Geometry;
use crate::disk::group::{self, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::disk::superblock::{incompat, location, Superblock};
use crate::disk::{blockmap, count_ones, dir, jbd2, mmp, put16, put32, set_bit};
use crate::error::Result;
use crate::types::Timespec;
use std::collections::BTreeMap;

use crate::disk::inode::reserved::{
    JOURNAL as JOURNAL_INO, RESIZE as RESIZE_INO, ROOT as ROOT_INO,
};
/// lost+found: the first non-reserved inode, as mke2fs makes it.
const LPF_INO: u32 = FIRST_INO;
/// Directory file type in entries (with filetype).
const FT_DIR: u8 = 2;
/// Blocks to write: (block, bytes).
type Blocks = Vec<(u64, Vec<u8>)>;
/// Groups whose bitmaps are built and written together.
const GROUP_BATCH: u32 = 64;

/// Writes to the device, counted for `s_kbytes_written`.
pub(super) struct Out<'a> {
    dev: &'a dyn BlockDevice,
    bs: u64,
    pub written: u64,
    /// The device reads as zeros: [`Out::zero`] has nothing to do.
    prezeroed: bool,
}

impl<'a> Out<'a> {
    pub fn new(dev: &'a dyn BlockDevice, bs: u32, prezeroed: bool) -> Out<'a> {
        Out {
            dev,
            bs: u64::from(bs),
            written: 0,
            prezeroed,
        }
    }

    /// Write `data` at block `block`.
    pub fn put(&mut self, block: u64, data: &[u8]) -> Result<()> {
        debug_assert!((data.len() as u64).is_multiple_of(self.bs) || data.len() < self.bs as usize);
        debug_assert!(
            block * self.bs + data.len() as u64 <= self.dev.size(),
            "write of {} bytes at block {block} past the device",
            data.len()
        );
        self.dev.write_at(block * self.bs, data)?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Zero `[start, end)`, writing only what does not read as zero already (a fresh
    /// sparse image stays sparse; a reused one is cleared); nothing on a prezeroed device.
    pub fn zero(&mut self, start: u64, end: u64) -> Result<()> {
        debug_assert!(start <= end, "zero {start}..{end}");
        if self.prezeroed {
            return Ok(());
        }
        let per = (CHUNK as u64 / self.bs).max(1);
        let mut buf = vec![0u8; (per.min(end - start) * self.bs) as usize];
        let mut b = start;
        while b < end {
            let n = (end - b).min(per);
            let len = (n * self.bs) as usize;
            self.dev.read_at(b * self.bs, &mut buf[..len])?;
            if buf[..len].iter().any(|&x| x != 0) {
                buf[..len].fill(0);
                self.put(b, &buf[..len])?;
            }
            b += n;
        }
        Ok(())
    }
}

/// What every writer needs from the superblock.
struct Ctx<'g> {
    geo: &'g Geometry,
    bs: usize,
    /// metadata_csum: inode, directory, extent and MMP checksums from this seed.
    seed: Option<u32>,
    filetype: bool,
    now: Timespec,
}

/// An inode with times, links and mode, as mke2fs writes new ones.
fn new_inode(cx: &Ctx, mode: u16, links: u16) -> DiskInode {
    let mut i = DiskInode::new(cx.geo.inode_size as usize);
    i.set_mode(mode);
    i.set_links(links);
    let t = Timespec {
        sec: cx.now.sec,
        nsec: 0,
    };
    i.set_atime(t);
    i.set_ctime(t);
    i.set_mtime(t);
    i.set_crtime(t);
    i
}

/// A reserved inode as mke2fs leaves it: zero, no extra fields; inode 1 (bad blocks)
/// carries the times.
fn reserved_inode(cx: &Ctx, ino: u32) -> DiskInode {
    debug_assert!(
        (1..=FIRST_INO).contains(&ino),
        "inode {ino} is not reserved"
    );
    let mut i = DiskInode::new(cx.geo.inode_size as usize);
    if cx.geo.inode_size > 128 {
        put16(&mut i.raw, 0x80, 0); // i_extra_isize = 0
    }
    if ino == 1 {
        let t = Timespec {
            sec: cx.now.sec,
            nsec: 0,
        };
        i.set_atime(t);
        i.set_ctime(t);
        i.set_mtime(t);
    }
    i
}

/// Point inode `ino` at `f`'s blocks; returns the map's own blocks (extent leaf or
/// indirect blocks) to write.
fn map_inode(cx: &Ctx, i: &mut DiskInode, ino: u32, f: &FileMap) -> Blocks {
    let mut extra = Vec::new();
    match &f.kind {
        MapKind::Extents { leaf: None } => {
            i.set_flags(i.flags() | FL_EXTENTS);
            extent::encode_node(i.iblock_mut(), &Node::Leaf(f.runs.clone()));
        }
        MapKind::Extents { leaf: Some(at) } => {
            i.set_flags(i.flags() | FL_EXTENTS);
            let root = Node::Index(
                1,
                vec![Index {
                    lblk: 0,
                    child: *at,
                }],
            );
            extent::encode_node(i.iblock_mut(), &root);
            let mut b = vec![0u8; cx.bs];
            extent::encode_block(&mut b, &Node::Leaf(f.runs.clone()));
            if let Some(seed) = cx.seed {
                extent::set_block_csum(i.csum_seed(seed, ino), &mut b);
            }
            extra.push((*at, b));
        }
        MapKind::Blocks(nodes) => {
            let (iblock, blocks) = blockmap::encode(&f.runs, nodes, cx.bs);
            i.iblock_mut()[..blockmap::IBLOCK_BYTES].copy_from_slice(&iblock);
            extra = blocks;
        }
    }
    let blocks = f.data_blocks() + f.map_blocks();
    i.set_blocks_512(blocks * (cx.bs as u64 / 512), cx.bs as u32);
    extra
}

/// A leaf directory block holding `entries` (ino, name), the last one spanning to the
/// end; with a checksum tail under metadata_csum.
fn dir_block(cx: &Ctx, entries: &[(u32, &[u8])], inode_seed: Option<u32>) -> Vec<u8> {
    let mut b = vec![0u8; cx.bs];
    let end = dir::entries_end(cx.bs, inode_seed.is_some());
    let ft = if cx.filetype { FT_DIR } else { 0 };
    let mut off = 0;
    for (n, &(ino, name)) in entries.iter().enumerate() {
        let rec = if n + 1 == entries.len() {
            end - off
        } else {
            dir::rec_len_for(name.len()).max(12)
        };
        // put_entry stores 64 KiB record lengths as ext4 does (65535 for a whole block).
        dir::put_entry(&mut b, off, ino, rec, if ino == 0 { 0 } else { ft }, name);
        off += rec;
    }
    debug_assert_eq!(off, end, "directory records do not fill the block");
    if let Some(seed) = inode_seed {
        dir::init_tail(&mut b);
        dir::set_leaf_csum(seed, &mut b);
    }
    b
}

/// A directory inode over `f`, with its blocks: the entries in block 0, empty blocks
/// after.
fn directory(
    cx: &Ctx,
    ino: u32,
    mode: u16,
    links: u16,
    f: &FileMap,
    entries: &[(u32, &[u8])],
) -> (DiskInode, Blocks) {
    debug_assert!(f.data_blocks() >= 1, "directory {ino} without a block");
    let mut i = new_inode(cx, 0o040000 | mode, links);
    let mut blocks = map_inode(cx, &mut i, ino, f);
    i.set_size(f.data_blocks() * cx.bs as u64);
    let seed = cx.seed.map(|s| i.csum_seed(s, ino));
    blocks.push((f.pblk(0), dir_block(cx, entries, seed)));
    for l in 1..f.data_blocks() {
        blocks.push((f.pblk(l), dir_block(cx, &[(0, b"")], seed)));
    }
    (i, blocks)
}

/// i_size of the resize inode: what a double-indirect tree addresses (mke2fs's choice).
pub(super) fn resize_inode_size(bs: u32) -> u64 {
    let apb = u64::from(bs / 4);
    (apb * apb + apb + blockmap::NDIR as u64) * u64::from(bs)
}

/// The resize inode (ext2fs_create_resize_inode): its double-indirect block lists the
/// primary reserved GDT blocks, each of which lists its copies in the backup groups.
fn resize_inode(cx: &Ctx, dind: u64) -> (DiskInode, Blocks) {
    let geo = cx.geo;
    let apb = cx.bs / 4;
    let sb_blk = location(geo.bs).0;
    let backups: Vec<u32> = (1..geo.groups)
        .filter(|&g| geo.backups.has_super(g))
        .collect();
    let mut dind_buf = vec![0u8; cx.bs];
    let mut blocks = Vec::new();
    for j in 0..geo.reserved_gdt {
        let gdt_blk = sb_blk + 1 + u64::from(geo.gdt_blocks + j);
        let slot = (geo.gdt_blocks + j) as usize % apb;
        // The resize inode's pointers are 32 bits.
        assert!(gdt_blk < 1 << 32, "reserved GDT block {gdt_blk} past 2^32");
        put32(&mut dind_buf, slot * 4, gdt_blk as u32);
        let mut b = vec![0u8; cx.bs];
        for (k, &g) in backups.iter().enumerate().take(apb) {
            let copy = gdt_blk + u64::from(g) * u64::from(geo.bpg);
            assert!(
                copy < geo.blocks && copy < 1 << 32,
                "reserved GDT copy {copy}"
            );
            put32(&mut b, k * 4, copy as u32);
        }
        blocks.push((gdt_blk, b));
    }
    blocks.push((dind, dind_buf));
    let mut i = new_inode(cx, 0o100600, 1);
    assert!(dind < 1 << 32, "resize inode's block {dind} past 2^32");
    put32(i.iblock_mut(), blockmap::DIND_SLOT * 4, dind as u32);
    i.set_size(resize_inode_size(geo.bs));
    let n = 1 + u64::from(geo.reserved_gdt) * (1 + backups.len().min(apb) as u64);
    i.set_blocks_512(n * (cx.bs as u64 / 512), geo.bs);
    (i, blocks)
}

/// The journal inode over `f`, after zeroing the log and writing its superblock: v2,
/// clean, with the features the engine writes the log with (64-bit tags with 64bit,
/// checksum v3 with metadata_csum, neither on ext3).
fn journal(
    cx: &Ctx,
    out: &mut Out,
    f: &FileMap,
    n: u32,
    sb: &Superblock,
) -> Result<(DiskInode, Blocks)> {
    debug_assert_eq!(f.data_blocks(), u64::from(n), "journal map");
    let mut i = new_inode(cx, 0o100600, 1);
    let blocks = map_inode(cx, &mut i, JOURNAL_INO, f);
    i.set_size(u64::from(n) * cx.bs as u64);
    for e in &f.runs {
        out.zero(e.pblk, e.pblk + u64::from(e.len))?;
    }
    let mut b = vec![0u8; cx.bs];
    jbd2::format_superblock(&mut b, cx.bs as u32, n, sb.uuid());
    let mut js = jbd2::JournalSuper::decode(&b).map_err(invalid)?;
    js.set_write_features(sb.has_incompat(incompat::BIT64), cx.seed.is_some());
    js.update_checksum();
    b[..js.raw.len()].copy_from_slice(&js.raw);
    out.put(f.pblk(0), &b)?;
    Ok((i, blocks))
}

/// This host's name for the MMP block.
fn hostname() -> Vec<u8> {
    std::fs::read("/proc/sys/kernel/hostname")
        .map(|mut h| {
            while h.last().is_some_and(|c| c.is_ascii_whitespace()) {
                h.pop();
            }
            h
        })
        .unwrap_or_default()
}

/// Write root, lost+found, the resize inode, the journal, the MMP block and the inode
/// tables holding the reserved inodes; returns the journal inode (for `s_jnl_blocks`).
pub(super) fn files(
    out: &mut Out,
    geo: &Geometry,
    plan: &Plan,
    sb: &Superblock,
    now: Timespec,
    device_name: &str,
) -> Result<Option<DiskInode>> {
    let cx = Ctx {
        geo,
        bs: geo.bs as usize,
        seed: geo.csum.then_some(geo.seed),
        filetype: sb.has_incompat(incompat::FILETYPE),
        now,
    };
    debug_assert_eq!(plan.lpf.data_blocks(), lpf_blocks(geo.bs));
    let mut inodes: BTreeMap<u32, DiskInode> = BTreeMap::new();
    let mut blocks = Vec::new();
    let root_dir: [(u32, &[u8]); 3] = [
        (ROOT_INO, b"."),
        (ROOT_INO, b".."),
        (LPF_INO, b"lost+found"),
    ];
    let (root, b) = directory(&cx, ROOT_INO, 0o755, 3, &plan.root, &root_dir);
    inodes.insert(ROOT_INO, root);
    blocks.extend(b);
    let lpf_dir: [(u32, &[u8]); 2] = [(LPF_INO, b"."), (ROOT_INO, b"..")];
    let (lpf, b) = directory(&cx, LPF_INO, 0o700, 2, &plan.lpf, &lpf_dir);
    inodes.insert(LPF_INO, lpf);
    blocks.extend(b);
    if let Some(dind) = plan.resize_dind {
        let (i, b) = resize_inode(&cx, dind);
        inodes.insert(RESIZE_INO, i);
        blocks.extend(b);
    }
    if let Some(f) = &plan.journal {
        let (i, b) = journal(&cx, out, f, plan.journal_blocks, sb)?;
        inodes.insert(JOURNAL_INO, i);
        blocks.extend(b);
    }
    if let Some(at) = plan.mmp {
        let mut m = mmp::Mmp::clean(&hostname(), device_name.as_bytes(), mmp::UPDATE_INTERVAL);
        m.time = now.sec.max(0) as u64;
        let mut b = vec![0u8; cx.bs];
        m.encode(&mut b, cx.seed);
        blocks.push((at, b));
    }
    for (at, b) in &blocks {
        out.put(*at, b)?;
    }
    for ino in 1..=FIRST_INO {
        inodes
            .entry(ino)
            .or_insert_with(|| reserved_inode(&cx, ino));
    }
    if let Some(seed) = cx.seed {
        for (ino, i) in inodes.iter_mut() {
            i.update_checksum(seed, *ino);
        }
    }
    write_inode_tables(out, &cx, plan, &inodes)?;
    Ok(inodes.remove(&JOURNAL_INO))
}

/// Inodes in use in group `g`: the reserved ones and lost+found, 1..=FIRST_INO.
fn used_inodes(geo: &Geometry, g: u32) -> u32 {
    debug_assert!(g < geo.groups, "group {g} of {}", geo.groups);
    let before = u64::from(g) * u64::from(geo.ipg);
    (u64::from(FIRST_INO).saturating_sub(before)).min(u64::from(geo.ipg)) as u32
}

/// Zero the inode tables that need it (every one without descriptor checksums, else
/// those holding inodes), then write the inodes 1..=FIRST_INO.
fn write_inode_tables(
    out: &mut Out,
    cx: &Ctx,
    plan: &Plan,
    inodes: &BTreeMap<u32, DiskInode>,
) -> Result<()> {
    let geo = cx.geo;
    let itb = geo.itable_blocks();
    let isz = geo.inode_size as usize;
    for g in 0..geo.groups {
        let used = used_inodes(geo, g);
        if used == 0 && geo.desc_csum.on() {
            continue;
        }
        let table = plan.meta[g as usize].inode_table;
        out.zero(table, table + itb)?;
        if used == 0 {
            continue;
        }
        let mut buf = vec![0u8; (used as usize * isz).div_ceil(cx.bs) * cx.bs];
        debug_assert!(
            buf.len() as u64 <= itb * geo.block_bytes(),
            "inodes past the table"
        );
        for k in 0..used {
            let ino = g * geo.ipg + k + 1;
            if let Some(i) = inodes.get(&ino) {
                let off = k as usize * isz;
                buf[off..off + isz].copy_from_slice(&i.raw);
            }
        }
        out.put(table, &buf)?;
    }
    Ok(())
}

/// Set bits `[from, to)`.
fn set_bits(map: &mut [u8], from: usize, to: usize) {
    debug_assert!(from <= to && to <= map.len() * 8, "bits {from}..{to}");
    let mut i = from;
    while i < to && i & 7 != 0 {
        set_bit(map, i);
        i += 1;
    }
    let whole = to.saturating_sub(i) / 8;
    map[i / 8..i / 8 + whole].fill(0xFF);
    i += whole * 8;
    while i < to {
        set_bit(map, i);
        i += 1;
    }
}

/// Group `g`'s block bitmap from the used ranges, padding set past the group's end.
fn block_bitmap(geo: &Geometry, used: &[(u64, u64)], g: u32) -> Vec<u8> {
    let mut map = vec![0u8; geo.bs as usize];
    let (gs, len) = (geo.group_first(g), u64::from(geo.group_len(g)));
    let ge = gs + len;
    for &(s, e) in &used[used.partition_point(|r| r.1 <= gs)..] {
        if s >= ge {
            break;
        }
        set_bits(
            &mut map,
            (s.max(gs) - gs) as usize,
            (e.min(ge) - gs) as usize,
        );
    }
    set_bits(&mut map, len as usize, geo.bs as usize * 8);
    map
}

/// The bitmap the kernel computes for a BLOCK_UNINIT group (ext4_init_block_bitmap): its
/// superblock and descriptor copies and its own bitmaps and table where they lie in it.
fn uninit_bitmap(geo: &Geometry, plan: &Plan, g: u32) -> Vec<u8> {
    let mut map = vec![0u8; geo.bs as usize];
    let (gs, len) = (geo.group_first(g), u64::from(geo.group_len(g)));
    let (s, n) = geo.base_meta(g);
    debug_assert!(
        s >= gs && s + n <= gs + len,
        "group {g}'s base metadata outside it"
    );
    set_bits(&mut map, (s - gs) as usize, (s - gs + n) as usize);
    let m = plan.meta[g as usize];
    for (b, k) in [
        (m.block_bitmap, 1),
        (m.inode_bitmap, 1),
        (m.inode_table, geo.itable_blocks()),
    ] {
        for x in b..b + k {
            if (gs..gs + len).contains(&x) {
                set_bit(&mut map, (x - gs) as usize);
            }
        }
    }
    set_bits(&mut map, len as usize, geo.bs as usize * 8);
    map
}

/// Write `(block, bytes)` pieces, merging neighbours into one write.
fn put_merged(out: &mut Out, mut pieces: Blocks, bs: u64) -> Result<()> {
    debug_assert!(
        pieces.iter().all(|p| (p.1.len() as u64).is_multiple_of(bs)),
        "piece of part of a block"
    );
    pieces.sort_by_key(|p| p.0);
    let mut i = 0;
    while i < pieces.len() {
        let start = pieces[i].0;
        let mut buf = std::mem::take(&mut pieces[i].1);
        let mut next = start + buf.len() as u64 / bs;
        i += 1;
        while i < pieces.len() && pieces[i].0 == next && buf.len() < CHUNK {
            buf.extend_from_slice(&pieces[i].1);
            next += pieces[i].1.len() as u64 / bs;
            i += 1;
        }
        out.put(start, &buf)?;
    }
    Ok(())
}

/// Write every bitmap, fill the descriptors and the superblock's free counts and
/// overhead; returns the descriptor table (padded to whole blocks).
pub(super) fn groups(
    out: &mut Out,
    geo: &Geometry,
    plan: &Plan,
    sb: &mut Superblock,
) -> Result<Vec<u8>> {
    let bs = geo.bs as usize;
    let ds = geo.desc_size as usize;
    let mut gdt = vec![0u8; geo.gdt_blocks as usize * bs];
    let mut free_blocks: u64 = 0;
    let dir_groups = [
        geo.group_of_inode(u64::from(ROOT_INO)),
        geo.group_of_inode(u64::from(LPF_INO)),
    ];
    for g0 in (0..geo.groups).step_by(GROUP_BATCH as usize) {
        let mut pieces = Vec::new();
        for g in g0..(g0 + GROUP_BATCH).min(geo.groups) {
            let m = plan.meta[g as usize];
            let bb = block_bitmap(geo, &plan.space.used, g);
            let len = geo.group_len(g) as usize;
            let free = (len - count_ones(&bb, len)) as u32;
            free_blocks += u64::from(free);
            let used = used_inodes(geo, g);
            let mut ib = vec![0u8; bs];
            set_bits(&mut ib, 0, used as usize);
            set_bits(&mut ib, geo.ipg as usize, bs * 8);
            let mut d = GroupDesc::zeroed(ds);
            d.set_block_bitmap(m.block_bitmap);
            d.set_inode_bitmap(m.inode_bitmap);
            d.set_inode_table(m.inode_table);
            d.set_free_blocks(free);
            d.set_free_inodes(geo.ipg - used);
            d.set_used_dirs(dir_groups.iter().filter(|&&x| x == g).count() as u32);
            if geo.desc_csum.on() {
                let mut flags = 0;
                if used == 0 {
                    flags |= BG_INODE_UNINIT;
                } else {
                    flags |= BG_INODE_ZEROED;
                }
                if g + 1 < geo.groups && bb == uninit_bitmap(geo, plan, g) {
                    flags |= BG_BLOCK_UNINIT;
                }
                d.set_flags(flags);
                d.set_itable_unused(geo.ipg - used);
            }
            if geo.csum {
                let wide = ds >= 64;
                d.set_block_bitmap_csum(group::bitmap_csum(
                    geo.seed,
                    &bb,
                    geo.bpg as usize / 8,
                    wide,
                ));
                d.set_inode_bitmap_csum(group::bitmap_csum(
                    geo.seed,
                    &ib,
                    geo.ipg as usize / 8,
                    wide,
                ));
            }
            d.seal(geo.desc_csum, g);
            gdt[g as usize * ds..(g as usize + 1) * ds].copy_from_slice(&d.raw);
            pieces.push((m.block_bitmap, bb));
            pieces.push((m.inode_bitmap, ib));
        }
        put_merged(out, pieces, bs as u64)?;
    }
    // The bitmaps count exactly what the plan left free.
    debug_assert_eq!(free_blocks, plan.space.free(), "free blocks");
    sb.set_free_blocks_count(free_blocks);
    sb.set_free_inodes_count((geo.inodes() - u64::from(FIRST_INO)) as u32);
    set_overhead(sb, geo, plan);
    Ok(gdt)
}

/// `s_overhead_clusters` as mke2fs counts it: the blocks before the first group, every
/// superblock and descriptor copy, bitmaps and inode tables, and the journal's data.
fn set_overhead(sb: &mut Superblock, geo: &Geometry, plan: &Plan) {
    let copies: u64 = (0..geo.groups).map(|g| geo.base_meta(g).1).sum();
    let tables = u64::from(geo.groups) * (2 + geo.itable_blocks());
    let journal = plan.journal.as_ref().map_or(0, FileMap::data_blocks);
    let overhead = u64::from(geo.first_data_block) + copies + tables + journal;
    debug_assert!(
        overhead <= geo.blocks,
        "overhead {overhead} of {}",
        geo.blocks
    );
    // s_overhead_clusters: u32 at 0x248.
    put32(
        &mut sb.raw[..],
        0x248,
        overhead.min(u64::from(u32::MAX)) as u32,
    );
}

/// Write the superblock and descriptor copies, then the primary superblock and table last.
pub(super) fn superblocks(
    out: &mut Out,
    geo: &Geometry,
    sb: &mut Superblock,
    gdt: &[u8],
) -> Result<()> {
    let bs = geo.bs as usize;
    let backups: Vec<u32> = (1..geo.groups)
        .filter(|&g| geo.backups.has_super(g))
        .collect();
    let old_gdt = if geo.meta_bg {
        geo.first_meta_bg.min(geo.gdt_blocks) as usize
    } else {
        geo.gdt_blocks as usize
    };
    let copy_blocks = 1
        + old_gdt
        + if geo.meta_bg {
            0
        } else {
            geo.reserved_gdt as usize
        };
    let total = out.written + (copy_blocks * bs) as u64 * (backups.len() as u64 + 1);
    sb.set_kbytes_written(total / 1024);
    // Each backup: the superblock at the start of its group's first block, naming its
    // group, then the descriptor table and zeroed reserved GDT blocks.
    let mut buf = vec![0u8; copy_blocks * bs];
    buf[bs..bs + old_gdt * bs].copy_from_slice(&gdt[..old_gdt * bs]);
    for &g in &backups {
        debug_assert!(
            copy_blocks as u64 <= u64::from(geo.group_len(g)),
            "backup copy longer than group {g}"
        );
        let mut copy = sb.clone();
        copy.set_block_group_nr(g as u16);
        copy.update_checksum();
        buf[..1024].copy_from_slice(&copy.raw[..]);
        out.put(geo.group_first(g), &buf)?;
    }
    if geo.meta_bg {
        write_meta_bg_descriptors(out, geo, gdt)?;
    }
    sb.update_checksum();
    let (at, off) = location(geo.bs);
    let mut first = vec![0u8; bs * (1 + old_gdt)];
    first[off..off + 1024].copy_from_slice(&sb.raw[..]);
    first[bs..].copy_from_slice(&gdt[..old_gdt * bs]);
    out.put(at, &first)
}

/// meta_bg: each descriptor block from `first_meta_bg` on in the first, second and last
/// group of its meta group, after that group's superblock copy if it has one.
fn write_meta_bg_descriptors(out: &mut Out, geo: &Geometry, gdt: &[u8]) -> Result<()> {
    let bs = geo.bs as usize;
    let per = geo.descs_per_block();
    for m in geo.first_meta_bg..geo.gdt_blocks {
        let block = &gdt[m as usize * bs..(m as usize + 1) * bs];
        let first = m * per;
        let mut groups = vec![first, first + 1, first + per - 1];
        groups.dedup();
        for g in groups.into_iter().filter(|&g| g < geo.groups) {
            let at = if g == first {
                geo.gdt_block(m)
            } else {
                geo.group_first(g) + u64::from(geo.backups.has_super(g))
            };
            out.put(at, block)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_bits_ranges() {
        let mut m = vec![0u8; 8];
        set_bits(&mut m, 3, 21);
        assert_eq!(count_ones(&m, 64), 18);
        assert!(!crate::disk::test_bit(&m, 2) && crate::disk::test_bit(&m, 20));
        assert!(!crate::disk::test_bit(&m, 21));
    }

    #[test]
    fn resize_inode_sizes() {
        // mke2fs: 4299210752 bytes on 4 KiB blocks.
        assert_eq!(resize_inode_size(4096), 4_299_210_752);
        assert_eq!(resize_inode_size(1024), (65536 + 256 + 12) * 1024);
    }
}
