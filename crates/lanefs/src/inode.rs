//! In-memory inodes: reading and storing them in their table, and their block maps.
//!
//! An `Inode` holds the on-disk bytes (so unknown fields and in-inode xattrs survive),
//! the extent map once loaded, and its page cache mapping (`page::Mapping`). Its state lock (class `inode`)
//! orders before journal handles. The cache that holds them is `icache`; inode numbers
//! come from `ialloc`.

use crate::alloc::Allocator;
use crate::buf::Buf;
use crate::buf::BufCache;
use crate::disk::blockmap;
use crate::disk::extent::{self, Extent, Node};
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::disk::seal::Seal;
use crate::error::{Error, Result};
use crate::extmap::ExtentMap;
use crate::ialloc::InodeAllocator;
use crate::journal::Handle;
use crate::leafdigest::LeafDigests;
use crate::page::Mapping;
use crate::sync::{Mutex, RwLock, INODE, INODE_STAGE};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// What the inode cache keeps in each inode (its use count and eviction mark, CLOCK bit
/// and the bytes it charged); only `icache` changes it.
pub struct CacheLink {
    /// Uses held (`icache::IRef`s) and whether it is being evicted.
    pub gate: crate::usegate::UseGate,
    /// Looked up since the sweep last passed (CLOCK's reference bit).
    pub referenced: AtomicBool,
    /// Bytes the cache charged for it.
    pub charge: AtomicU64,
    /// Its link in a `bucket` table's chain (the kernel's `i_hash`).
    pub next: crate::usegate::Link,
}

impl CacheLink {
    /// Not cached yet: no use, not referenced, nothing charged, unlinked.
    pub fn new(ino: u64) -> CacheLink {
        CacheLink {
            gate: crate::usegate::UseGate::new(),
            referenced: AtomicBool::new(false),
            charge: AtomicU64::new(0),
            next: crate::usegate::Link::new(ino),
        }
    }
}

/// Mutable state of a cached inode.
pub struct InodeState {
    /// The on-disk inode bytes (authoritative while cached).
    pub d: DiskInode,
    /// Extent map, loaded on first use for extent-mapped inodes.
    pub ext: Option<ExtentMap>,
    /// Blocks the on-disk extent tree occupies (index and leaf blocks).
    pub tree_blocks: Vec<u64>,
    /// The first logical block of each leaf as `store_tree` last laid them out (the first
    /// `tree_blocks`, in order); empty when the tree on disk is not in that layout (as
    /// loaded), so the next store rewrites every leaf.
    pub leaf_keys: Vec<u32>,
    /// The indirect blocks of a block-mapped inode (ext2/ext3 style), by what they map.
    pub ind: blockmap::Nodes,
    /// The extent map changed since the tree was last written.
    pub ext_dirty: bool,
    /// The inode has been released on disk; any further use is an error.
    pub freed: bool,
    /// An O_TMPFILE inode not yet linked and not made with O_EXCL: [`crate::Fs::link`]
    /// may give it its first name (the VFS's I_LINKABLE).
    pub linkable: bool,
    /// Blocks reserved for the file's next logical blocks (open files only).
    pub pa: Option<crate::alloc::PaRef>,
    /// The newest transaction that may hold a change to this inode (fsync commits it).
    pub tid: u64,
    /// A directory's leaf digests (`leafdigest`), made by the directory code as it uses
    /// the leaves.
    pub digests: Option<Box<LeafDigests>>,
}

/// A cached inode.
pub struct Inode {
    /// Inode number.
    pub ino: u64,
    /// Metadata state.
    pub state: RwLock<InodeState>,
    /// Cached file data (the page cache's mapping of this file).
    pub mapping: Arc<Mapping>,
    /// Open references (files opened, created, or held by the bench).
    pub open: AtomicU32,
    /// The transaction that last put this inode on its ordered-data list.
    pub ordered_tid: AtomicU64,
    /// Where this inode's last block allocation ended (its own stream goal; 0: none).
    pub last_alloc: AtomicU64,
    /// A directory's hint of the group its last new child went to (ext4's
    /// `i_last_alloc_group`; `ialloc::NO_GROUP`: none).
    pub last_group: AtomicU32,
    /// The inode was released on disk (mirrors `InodeState::freed`, readable without the
    /// state lock).
    pub gone: AtomicBool,
    /// The inode cache's bookkeeping.
    pub cache: CacheLink,
    /// Its bytes staged for the running transaction's commit (made at its first store).
    pub stage: std::sync::OnceLock<Arc<InodeStage>>,
}

/// An inode's on-disk bytes as its last store in the running transaction left them,
/// copied into its table block once, when the transaction commits (`LogItem::format`).
/// Stores change only this copy, so operations on inodes sharing a table block do not
/// rewrite (or checksum) that block each time; the commit copies each staged inode and
/// stamps its checksum, once per transaction.
pub struct InodeStage {
    ino: u64,
    /// The checksum seed (`None`: no metadata_csum).
    seed: Option<u32>,
    data: Mutex<Staged>,
}

struct Staged {
    /// The transaction whose commit formats this stage (0: nothing staged).
    tid: u64,
    d: DiskInode,
    /// The inode's table block (dirtied in `tid`) and its offset there.
    buf: Option<Arc<Buf>>,
    off: usize,
    /// Keep the `dtime` on disk (an orphan's list link, written in place).
    keep_dtime: bool,
}

impl InodeStage {
    fn new(ino: u64, seed: Option<u32>) -> InodeStage {
        InodeStage {
            ino,
            seed,
            data: Mutex::new(
                &INODE_STAGE,
                Staged {
                    tid: 0,
                    d: DiskInode { raw: Vec::new() },
                    buf: None,
                    off: 0,
                    keep_dtime: false,
                },
            ),
        }
    }

    /// Nothing staged (checked without waiting: a stage being changed is not idle).
    pub fn idle(&self) -> bool {
        self.data.try_lock().is_some_and(|s| s.tid == 0)
    }

    /// Drop what is staged: the caller wrote the inode through to its block.
    fn cancel(&self) {
        let mut s = self.data.lock();
        s.tid = 0;
        s.buf = None;
    }

    fn bytes(&self) -> usize {
        self.data.try_lock().map_or(0, |s| s.d.raw.capacity())
    }
}

impl crate::journal::LogItem for InodeStage {
    fn format(&self, tid: u64) {
        let mut s = self.data.lock();
        if s.tid == 0 {
            return;
        }
        debug_assert_eq!(
            s.tid, tid,
            "inode {} staged in another transaction",
            self.ino
        );
        s.tid = 0;
        let (Some(b), off) = (s.buf.take(), s.off) else {
            return;
        };
        let len = s.d.raw.len();
        let mut w = b.write_records();
        debug_assert!(
            off.is_multiple_of(len) && off + len <= w.len(),
            "inode {} staged at {off} of {len} bytes",
            self.ino
        );
        if s.keep_dtime {
            let dtime = crate::disk::le32(&w, off + crate::disk::inode::I_DTIME);
            s.d.set_dtime(dtime);
        }
        if let Some(seed) = self.seed {
            s.d.update_checksum(seed, self.ino as u32);
        }
        w[off..off + len].copy_from_slice(&s.d.raw);
        b.set_record_checked(off / len);
    }
}

impl crate::journal::OrderedData for Inode {
    fn ordered_tid(&self) -> &AtomicU64 {
        &self.ordered_tid
    }
    fn write_ordered(&self, dev: &dyn crate::dev::BlockDevice, bs: usize) -> Result<()> {
        self.mapping.write_back(dev, bs)
    }
}

impl InodeState {
    /// Bytes the state holds outside the inode's fixed part: the on-disk copy, the
    /// extent map, the tree's block list and the indirect-block map.
    pub fn heap_bytes(&self) -> usize {
        // A BTreeMap entry costs about its key and value plus a share of its node.
        const BTREE_OVERHEAD: usize = 16;
        let ext = self.ext.as_ref().map_or(0, |m| {
            m.len() * (std::mem::size_of::<(u32, Extent)>() + BTREE_OVERHEAD)
        });
        let ind =
            self.ind.len() * (std::mem::size_of::<(blockmap::NodeKey, u64)>() + BTREE_OVERHEAD);
        self.d.raw.len()
            + ext
            + self.tree_blocks.capacity() * 8
            + self.leaf_keys.capacity() * 4
            + ind
            + self.digests.as_ref().map_or(0, |g| g.bytes())
    }
}

impl Inode {
    /// Bytes this inode holds, as the inode cache accounts them.
    pub fn mem_bytes(&self) -> usize {
        let heap = self.state.try_read().map_or(0, |st| st.heap_bytes());
        self.mem_bytes_with(heap)
    }

    /// [`Inode::mem_bytes`] with the state's heap bytes given (by a holder of its lock).
    pub fn mem_bytes_with(&self, heap: usize) -> usize {
        let stage = self
            .stage
            .get()
            .map_or(0, |s| std::mem::size_of::<InodeStage>() + s.bytes());
        std::mem::size_of::<Inode>() + std::mem::size_of::<Mapping>() + heap + stage
    }

    /// Whether the inode was released on disk.
    pub fn is_freed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Whether the cache may drop this inode: not open, no dirty data, no extent-map
    /// change the tree lacks, no preallocation, nothing staged for its table block
    /// (checked without waiting for any lock). Its clean folios go with it.
    pub fn evictable(&self) -> bool {
        if self.is_open() || self.mapping.has_dirty() {
            return false;
        }
        if self.stage.get().is_some_and(|s| !s.idle()) {
            return false;
        }
        self.state
            .try_read()
            .is_some_and(|st| !st.ext_dirty && st.pa.is_none())
    }

    /// Whether some handle holds the inode open.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire) > 0
    }
}

impl InodeState {
    /// The state of an inode whose bytes are `d`, nothing else loaded yet.
    pub fn from_disk(d: DiskInode) -> InodeState {
        InodeState {
            d,
            ext: None,
            tree_blocks: Vec::new(),
            leaf_keys: Vec::new(),
            ind: blockmap::Nodes::new(),
            ext_dirty: false,
            freed: false,
            linkable: false,
            pa: None,
            tid: 0,
            digests: None,
        }
    }
}

/// Build a fresh in-memory inode around on-disk bytes.
pub fn new_inode(ino: u64, d: DiskInode) -> Inode {
    inode_from_state(ino, InodeState::from_disk(d))
}

/// Build an in-memory inode around a state built by its creator.
pub fn inode_from_state(ino: u64, st: InodeState) -> Inode {
    Inode {
        ino,
        state: RwLock::new(&INODE, st),
        mapping: Arc::new(Mapping::default()),
        open: AtomicU32::new(0),
        ordered_tid: AtomicU64::new(0),
        last_alloc: AtomicU64::new(0),
        last_group: AtomicU32::new(crate::ialloc::NO_GROUP),
        gone: AtomicBool::new(false),
        cache: CacheLink::new(ino),
        stage: std::sync::OnceLock::new(),
    }
}

/// Give an inode an empty block map: an empty extent root when the image has extents,
/// else an all-zero `i_block` (direct and indirect blocks), and an empty map in memory
/// that the next store writes out.
pub fn init_empty_map(st: &mut InodeState, extents: bool) {
    st.d.iblock_mut().fill(0);
    if extents {
        st.d.set_flags(st.d.flags() | FL_EXTENTS);
        extent::encode_node(st.d.iblock_mut(), &Node::Leaf(Vec::new()));
    } else {
        st.d.set_flags(st.d.flags() & !FL_EXTENTS);
    }
    st.ext = Some(ExtentMap::default());
    st.ext_dirty = true;
}

/// Read inode `ino` from its table and verify its checksum (unless it was checked since
/// its block was read, or written here: [`crate::buf::Buf::record_checked`]).
pub fn read_disk_inode(ial: &InodeAllocator, bufs: &BufCache, ino: u64) -> Result<DiskInode> {
    Ok(read_disk_inode_in(ial, bufs, ino)?.0)
}

/// Inode `ino`'s bytes as its table block holds them now, unverified: for a field that
/// never changes once set (an EA inode's flag and type), read without taking the inode's
/// lock. Its checksum may be stale (a cached inode's later stores reach the block only at
/// commit), so nothing else read this way is to be trusted.
pub fn peek_disk_inode(ial: &InodeAllocator, bufs: &BufCache, ino: u64) -> Result<DiskInode> {
    let loc = ial.inode_loc(ino)?;
    let isz = ial.geo().inode_size as usize;
    let b = bufs.get(loc.blk)?;
    let r = b.read();
    Ok(DiskInode::from_bytes(&r[loc.off..loc.off + isz]))
}

/// [`read_disk_inode`], and the table block's buffer with the inode's offset in it (for
/// a write back without a second lookup, [`store_inode_at`]).
pub fn read_disk_inode_in(
    ial: &InodeAllocator,
    bufs: &BufCache,
    ino: u64,
) -> Result<(DiskInode, Arc<Buf>, usize)> {
    let loc = ial.inode_loc(ino)?;
    let geo = ial.geo();
    let b = bufs.get(loc.blk)?;
    // An inode checked since its block was read, or written here with its checksum, is
    // not checked again (a large directory's unlinks read back inodes the cache evicted).
    // Mark and bytes are read, checked and marked under one guard: a write that drops
    // the marks cannot come between.
    let rec = loc.off / geo.inode_size as usize;
    let d = {
        let r = b.read();
        let d = DiskInode::from_bytes(&r[loc.off..loc.off + geo.inode_size as usize]);
        if geo.csum && !b.record_checked(rec) {
            if d.checksum() != d.compute_checksum(geo.seed, ino as u32) {
                return Err(Error::corrupt("inode", ino, "checksum mismatch"));
            }
            b.set_record_checked(rec);
        }
        d
    };
    let extra = usize::from(d.extra_isize());
    if d.raw.len() > 128 && (128 + extra > d.raw.len() || extra % 4 != 0) {
        return Err(Error::corrupt(
            "inode",
            ino,
            format!("extra_isize {extra} invalid"),
        ));
    }
    Ok((d, b, loc.off))
}

/// Write the inode's bytes (with a fresh checksum) into its table block. With
/// `keep_dtime`, the `dtime` already on disk is kept (an orphan's list link).
pub fn store_inode(
    ial: &InodeAllocator,
    bufs: &BufCache,
    h: &Handle,
    ino: u64,
    d: &mut DiskInode,
    keep_dtime: bool,
) -> Result<()> {
    let loc = ial.inode_loc(ino)?;
    let b = bufs.get(loc.blk)?;
    store_inode_at(ial, h, &b, loc.off, ino, d, keep_dtime);
    Ok(())
}

/// [`store_inode`] into `b`, the inode's table block, at `off` (as
/// [`read_disk_inode_in`] found them).
pub fn store_inode_at(
    ial: &InodeAllocator,
    h: &Handle,
    b: &Arc<Buf>,
    off: usize,
    ino: u64,
    d: &mut DiskInode,
    keep_dtime: bool,
) {
    let geo = ial.geo();
    debug_assert_eq!(
        ial.inode_loc(ino).ok().map(|l| (l.blk, l.off)),
        Some((b.blk, off))
    );
    // A record of another size would overwrite the next inode of the table block (or
    // leave part of this one stale).
    assert_eq!(
        d.raw.len(),
        geo.inode_size as usize,
        "inode {ino}: bytes of another inode size"
    );
    {
        let mut w = b.write_records();
        if keep_dtime {
            d.set_dtime(crate::disk::le32(&w, off + crate::disk::inode::I_DTIME));
        }
        if geo.csum {
            d.update_checksum(geo.seed, ino as u32);
        }
        w[off..off + d.raw.len()].copy_from_slice(&d.raw);
        b.set_record_checked(off / d.raw.len());
    }
    h.dirty(b);
}

/// Store inode `i` (bytes `d`) in handle `h`'s transaction: the bytes go to its stage,
/// and its table block joins the transaction at the first store of the transaction; the
/// commit copies them in with their checksum. With `keep_dtime`, the `dtime` on disk is
/// kept (an orphan's list link). A released inode is written through instead (its number
/// may be reused, by a new inode, in the same transaction).
pub fn stage_inode(
    ial: &InodeAllocator,
    bufs: &BufCache,
    h: &Handle,
    i: &Inode,
    d: &mut DiskInode,
    keep_dtime: bool,
    freed: bool,
) -> Result<()> {
    if freed {
        if let Some(stage) = i.stage.get() {
            stage.cancel();
        }
        return store_inode(ial, bufs, h, i.ino, d, keep_dtime);
    }
    let geo = ial.geo();
    let stage = i
        .stage
        .get_or_init(|| Arc::new(InodeStage::new(i.ino, geo.csum.then_some(geo.seed))));
    // Only a store changes the stage, under the inode's write lock (the caller's `d`);
    // the commit formats it while no handle is open. So what is read here holds until
    // the store below, and the table block is read without the stage's lock held.
    let tid = h.tid();
    let first = stage.data.lock().tid != tid;
    let fresh = if first {
        let loc = ial.inode_loc(i.ino)?;
        let b = bufs.get(loc.blk)?;
        h.dirty(&b);
        Some((b, loc.off))
    } else {
        None
    };
    let mut s = stage.data.lock();
    if let Some((b, off)) = fresh {
        // A stage of an older transaction is left only by a commit that failed (the
        // journal is aborted and nothing more commits): it is replaced.
        s.buf = Some(b);
        s.off = off;
        s.tid = tid;
        h.log_item(stage);
    }
    if s.d.raw.len() == d.raw.len() {
        s.d.raw.copy_from_slice(&d.raw);
    } else {
        s.d.raw.clone_from(&d.raw);
    }
    s.keep_dtime = keep_dtime;
    Ok(())
}

/// Load the block map of an inode: its extent tree, or its direct and indirect blocks
/// (an inode without the extents flag), into an extent map.
pub fn load_extents(
    al: &Allocator,
    rt: Option<&crate::rtalloc::RtAlloc>,
    bufs: &BufCache,
    ino: u64,
    st: &mut InodeState,
) -> Result<()> {
    if st.ext.is_some() {
        return Ok(());
    }
    let mut out = Vec::new();
    let mut tree = Vec::new();
    if st.d.flags() & FL_EXTENTS == 0 {
        let mut read = |b: u64| -> Result<Vec<u8>> { Ok(bufs.get(b)?.read().to_vec()) };
        let geo = &al.geo;
        let (runs, nodes) = blockmap::decode(
            st.d.iblock(),
            geo.bs as usize,
            u64::from(geo.first_data_block),
            geo.blocks,
            ino,
            &mut read,
        )?;
        out = split_long_runs(runs);
        st.ind = nodes;
    } else {
        let seed = st.d.csum_seed(al.geo.seed, ino as u32);
        let root = extent::decode_node(st.d.iblock(), ino)?;
        // A realtime file's data extents are data-device blocks; its tree is in the image.
        let data_end = match rt {
            Some(rt) if crate::disk::rtdev::is_rt_file(st.d.mode(), st.d.flags()) => {
                rt.geometry().rextents * u64::from(rt.geometry().rextsize)
            }
            _ => al.geo.blocks,
        };
        walk(al, bufs, seed, root, ino, data_end, &mut out, &mut tree, 0)?;
        for w in out.windows(2) {
            if w[0].lend() > u64::from(w[1].lblk) {
                return Err(Error::corrupt("extent tree", ino, "overlapping extents"));
            }
        }
    }
    // Directory code walks blocks 0..size/bs and appends at size/bs: both must match the
    // map, or a corrupt size makes it allocate huge block lists or map a block twice.
    if crate::types::FileType::from_mode(st.d.mode()) == Some(crate::types::FileType::Directory) {
        let (end, bs) = (out.last().map_or(0, |e| e.lend()), u64::from(al.geo.bs));
        if !st.d.size().is_multiple_of(bs) || st.d.size() / bs != end {
            let msg = format!(
                "directory size {} does not match its {end} mapped blocks",
                st.d.size()
            );
            return Err(Error::corrupt("inode", ino, msg));
        }
        // A directory is at most 2 GiB without large_dir (e2fsck's limit, which lanefs
        // does not support), and no two of its blocks are one device block: a map naming
        // a few blocks many times would make readdir list gigabytes of entries.
        if st.d.size() > 1 << 31 {
            return Err(Error::corrupt("inode", ino, "directory larger than 2 GiB"));
        }
        let mut phys: Vec<(u64, u32)> = out.iter().map(|e| (e.pblk, e.len)).collect();
        phys.sort_unstable();
        if phys.windows(2).any(|w| w[0].0 + u64::from(w[0].1) > w[1].0) {
            return Err(Error::corrupt(
                "inode",
                ino,
                "directory blocks mapped twice",
            ));
        }
    }
    st.ext = Some(ExtentMap::from_extents(out));
    st.tree_blocks = tree;
    st.leaf_keys.clear();
    Ok(())
}

/// Runs of a block map cut to the longest extent the map in memory holds.
fn split_long_runs(runs: Vec<Extent>) -> Vec<Extent> {
    let mut out = Vec::with_capacity(runs.len());
    for mut e in runs {
        while e.len > extent::MAX_INIT_LEN {
            out.push(Extent {
                len: extent::MAX_INIT_LEN,
                ..e
            });
            e.lblk += extent::MAX_INIT_LEN;
            e.pblk += u64::from(extent::MAX_INIT_LEN);
            e.len -= extent::MAX_INIT_LEN;
        }
        out.push(e);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn walk(
    al: &Allocator,
    bufs: &BufCache,
    seed: u32,
    node: Node,
    ino: u64,
    data_end: u64,
    out: &mut Vec<Extent>,
    tree: &mut Vec<u64>,
    level: u16,
) -> Result<()> {
    if level > extent::MAX_DEPTH || tree.len() > 1 << 24 {
        return Err(Error::corrupt("extent tree", ino, "too deep"));
    }
    match node {
        Node::Leaf(v) => {
            // Extents come in logical order across the whole walk (ext4_valid_extent_entries
            // and the index keys say so): checked here, before they are kept, an index
            // naming one leaf many times (a fan-out that would list billions of extents
            // from a few blocks) fails at its second visit.
            let mut prev = out.last().map_or(0, Extent::lend);
            for e in &v {
                if e.pblk + u64::from(e.len) > data_end || e.pblk == 0 {
                    return Err(Error::corrupt(
                        "extent",
                        ino,
                        format!("{e:?} outside the file system"),
                    ));
                }
                if u64::from(e.lblk) < prev || e.lend() > 1 << 32 {
                    return Err(Error::corrupt("extent tree", ino, "overlapping extents"));
                }
                prev = e.lend();
            }
            out.extend(v);
        }
        Node::Index(depth, v) => {
            for ix in v {
                if ix.child >= al.geo.blocks || ix.child == 0 {
                    return Err(Error::corrupt(
                        "extent index",
                        ino,
                        format!("child {} out of range", ix.child),
                    ));
                }
                let b = bufs.get(ix.child)?;
                let data = b.read();
                // Verified once after a read: a block changed since carries its seal,
                // and its checksum is stamped when a commit logs it.
                if al.geo.csum && !b.is_verified() {
                    extent::verify_block_csum(seed, &data, ix.child)?;
                    b.set_verified();
                }
                let child = extent::decode_node(&data[..data.len() - 4], ix.child)?;
                let child_depth = match &child {
                    Node::Leaf(_) => 0,
                    Node::Index(d, _) => *d,
                };
                if child_depth + 1 != depth {
                    return Err(Error::corrupt("extent block", ix.child, "depth mismatch"));
                }
                drop(data);
                tree.push(ix.child);
                walk(al, bufs, seed, child, ino, data_end, out, tree, level + 1)?;
            }
        }
    }
    Ok(())
}

/// Rewrite the on-disk extent tree from the extent map, reusing tree blocks.
/// Adjusts i_blocks for tree blocks gained or freed.
pub fn store_tree(
    al: &Allocator,
    bufs: &BufCache,
    h: &Handle,
    ino: u64,
    st: &mut InodeState,
) -> Result<()> {
    let Some(map) = st.ext.as_ref() else {
        return Ok(());
    };
    if st.d.flags() & FL_EXTENTS == 0 {
        let exts: Vec<Extent> = map.extents().copied().collect();
        return store_block_map(al, bufs, h, st, &exts);
    }
    let cap = extent::block_capacity(al.geo.bs as usize);
    let n = map.len();
    // Level sizes bottom-up: leaves hold extents; each upper level holds child pointers.
    let mut levels: Vec<usize> = Vec::new();
    let mut m = n;
    while m > 4 {
        m = m.div_ceil(cap);
        levels.push(m);
    }
    // No deeper than the format (and readers: `walk`) allows.
    debug_assert!(
        levels.len() <= usize::from(extent::MAX_DEPTH),
        "inode {ino}: a tree of {levels:?} nodes for {n} extents"
    );
    let need: usize = levels.iter().sum();
    let goal = map.extents().next().map_or(0, |e| e.pblk);
    // Leaves are packed full from the first extent, so the extents before the first
    // change are where the last store wrote them, in the same blocks (blocks are only
    // added or dropped at the end): the leaves before it are kept, the leaf it falls in
    // is rewritten from it on in place, the later leaves whole. An append rewrites the
    // entries it adds, not the file's tree. (Not in that layout, as loaded: all of it.)
    let dirty_from = map.dirty_from();
    let first = if st.leaf_keys.is_empty() {
        0
    } else {
        n - map.range_from(dirty_from).count()
    };
    let blocks = resize_tree_blocks(al, h, st, need, goal)?;
    let Some(map) = st.ext.as_ref() else {
        return Ok(());
    };
    let seed = st.d.csum_seed(al.geo.seed, ino as u32);
    let root = if levels.is_empty() {
        Node::Leaf(map.extents().copied().collect())
    } else {
        let leaves = levels[0];
        let (keep, off) = (first / cap, first % cap);
        debug_assert!(keep <= st.leaf_keys.len() && keep <= leaves);
        // Children of the current level: (first logical block, block number).
        let mut children: Vec<(u32, u64)> =
            (0..keep).map(|i| (st.leaf_keys[i], blocks[i])).collect();
        let mut rest = map
            .range_from(if first == 0 { 0 } else { dirty_from })
            .copied();
        let mut chunk = Vec::with_capacity(cap);
        for (j, &blk) in blocks.iter().enumerate().take(leaves).skip(keep) {
            chunk.clear();
            if j == keep && off > 0 {
                chunk.extend(rest.by_ref().take(cap - off));
                children.push((st.leaf_keys[j], blk));
                let b = bufs.get(blk)?;
                let mut data = b.write();
                // Read back since the last store (the cache dropped it): checked first.
                if al.geo.csum && !b.is_verified() {
                    extent::verify_block_csum(seed, &data, blk)?;
                }
                extent::rewrite_leaf_tail(&mut data, off, &chunk, blk)?;
                if al.geo.csum {
                    b.set_seal(Seal::ExtentBlock(seed));
                }
                drop(data);
                h.dirty(&b);
                continue;
            }
            chunk.extend(rest.by_ref().take(cap));
            debug_assert!(!chunk.is_empty(), "inode {ino}: a leaf without extents");
            children.push((chunk[0].lblk, blk));
            let leaf = Node::Leaf(std::mem::take(&mut chunk));
            write_tree_block(bufs, h, blk, &leaf, seed, al.geo.csum);
        }
        debug_assert!(
            rest.next().is_none(),
            "inode {ino}: extents left past the leaves"
        );
        st.leaf_keys.clear();
        st.leaf_keys.extend(children.iter().map(|c| c.0));
        // Leaves in logical order, each starting at its first extent: what the index
        // keys say and a lookup's binary search needs.
        debug_assert!(
            st.leaf_keys.windows(2).all(|w| w[0] < w[1]),
            "inode {ino}: leaf keys out of order"
        );
        let mut next = leaves;
        for (depth, &count) in levels.iter().enumerate().skip(1) {
            let mut nodes = Vec::with_capacity(count);
            for i in 0..count {
                let blk = blocks[next];
                next += 1;
                let chunk = &children[i * cap..((i + 1) * cap).min(children.len())];
                nodes.push((chunk[0].0, blk));
                let idx = chunk
                    .iter()
                    .map(|&(l, c)| extent::Index { lblk: l, child: c })
                    .collect();
                write_tree_block(
                    bufs,
                    h,
                    blk,
                    &Node::Index(depth as u16, idx),
                    seed,
                    al.geo.csum,
                );
            }
            children = nodes;
        }
        let idx = children
            .iter()
            .map(|&(l, c)| extent::Index { lblk: l, child: c })
            .collect();
        Node::Index(levels.len() as u16, idx)
    };
    if levels.is_empty() {
        st.leaf_keys.clear();
    }
    extent::encode_node(st.d.iblock_mut(), &root);
    if let Some(map) = st.ext.as_mut() {
        map.mark_stored();
    }
    st.ext_dirty = false;
    Ok(())
}

/// Rewrite a block-mapped inode's `i_block` and indirect blocks from its extent map:
/// indirect blocks no longer needed are freed, missing ones allocated near the data they
/// map, and only blocks whose bytes change are dirtied. Adjusts i_blocks.
fn store_block_map(
    al: &Allocator,
    bufs: &BufCache,
    h: &Handle,
    st: &mut InodeState,
    runs: &[Extent],
) -> Result<()> {
    let bs = al.geo.bs as usize;
    if !blockmap::fits(runs, bs) {
        return Err(Error::FileTooBig);
    }
    let spb = u64::from(al.geo.bs / 512);
    let need = blockmap::needed(runs, bs);
    let keep: std::collections::HashSet<_> = need.iter().copied().collect();
    let gone: Vec<_> = st
        .ind
        .keys()
        .filter(|k| !keep.contains(k))
        .copied()
        .collect();
    for k in gone {
        if let Some(p) = st.ind.remove(&k) {
            al.free_blocks_range(h, p, 1, true)?;
            let cur = st.d.blocks_512(al.geo.bs);
            st.d.set_blocks_512(cur.saturating_sub(spb), al.geo.bs);
        }
    }
    for k in need {
        if st.ind.contains_key(&k) {
            continue;
        }
        let i = runs.partition_point(|e| e.lend() <= k.base);
        let goal = runs
            .get(i)
            .map_or(0, |e| e.pblk + k.base.saturating_sub(u64::from(e.lblk)));
        let (p, _) = al.alloc_blocks(h, goal, 1)?;
        st.ind.insert(k, p);
        let cur = st.d.blocks_512(al.geo.bs);
        st.d.set_blocks_512(cur + spb, al.geo.bs);
    }
    let (iblock, blocks) = blockmap::encode(runs, &st.ind, bs);
    for (blk, fresh) in blocks {
        let b = bufs.get_new_keep(blk);
        let mut data = b.write();
        if data[..] != fresh[..] {
            data.copy_from_slice(&fresh);
            drop(data);
            h.dirty(&b);
        }
    }
    st.d.iblock_mut().copy_from_slice(&iblock);
    st.ext_dirty = false;
    Ok(())
}

fn write_tree_block(bufs: &BufCache, h: &Handle, blk: u64, node: &Node, seed: u32, csum: bool) {
    let b = bufs.get_new_keep(blk);
    let mut data = b.write();
    // Its checksum is stamped when a commit logs it (`Seal::ExtentBlock`): the tail in
    // memory may be stale, so it is left out of the comparison.
    if csum {
        b.set_seal(Seal::ExtentBlock(seed));
    }
    let mut fresh = vec![0u8; data.len()];
    extent::encode_block(&mut fresh, node);
    let body = extent::tail_offset(data.len());
    if data[..body] != fresh[..body] {
        data[..body].copy_from_slice(&fresh[..body]);
        drop(data);
        h.dirty(&b);
    }
}

/// Grow or shrink the set of tree blocks to `need`, adjusting i_blocks.
fn resize_tree_blocks(
    al: &Allocator,
    h: &Handle,
    st: &mut InodeState,
    need: usize,
    goal: u64,
) -> Result<Vec<u64>> {
    let spb = u64::from(al.geo.bs / 512);
    while st.tree_blocks.len() > need {
        if let Some(b) = st.tree_blocks.pop() {
            al.free_blocks_range(h, b, 1, true)?;
            let cur = st.d.blocks_512(al.geo.bs);
            st.d.set_blocks_512(cur.saturating_sub(spb), al.geo.bs);
        }
    }
    while st.tree_blocks.len() < need {
        let (b, _) = al.alloc_blocks(h, goal, 1)?;
        st.tree_blocks.push(b);
        let cur = st.d.blocks_512(al.geo.bs);
        st.d.set_blocks_512(cur + spb, al.geo.bs);
    }
    Ok(st.tree_blocks.clone())
}
