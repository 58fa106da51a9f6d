//! In-memory inodes: reading and storing them in their table, and their block maps.
//!
//! An `Inode` holds the on-disk bytes (so unknown fields and in-inode xattrs survive),
//! the extent map once loaded, and its page cache mapping (`page::Mapping`). Its state lock (class `inode`)
//! orders before journal handles. The cache that holds them is `icache`; inode numbers
//! come from `ialloc`.
//!
//! The code, by concern: this file holds the in-memory inode and its state;
//! `inode/table.rs` reading and writing inodes in their table, `inode/stage.rs` the bytes
//! staged for a transaction's commit, `inode/load.rs` and `inode/store.rs` loading and
//! storing the block map.

use crate::disk::blockmap;
use crate::disk::extent::{self, Extent, Node};
use crate::disk::inode::{DiskInode, FL_EXTENTS};
use crate::error::Result;
use crate::extmap::ExtentMap;
use crate::leafdigest::LeafDigests;
use crate::page::Mapping;
use crate::sync::{RwLock, INODE};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

#[path = "inode/load.rs"]
mod load;
#[path = "inode/stage.rs"]
mod stage;
#[path = "inode/store.rs"]
mod store;
#[path = "inode/table.rs"]
mod table;
pub use load::load_extents;
pub use stage::{stage_inode, InodeStage};
pub use store::store_tree;
pub use table::{
    peek_disk_inode, read_disk_inode, read_disk_inode_in, store_inode, store_inode_at,
};

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
    // `gone` starts clear, mirroring a live state; and number 0 names no inode.
    debug_assert!(
        ino != 0 && !st.freed,
        "inode {ino}: cached released or unnumbered"
    );
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
