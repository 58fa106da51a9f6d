//! `Fs`: the mounted file system and its operations.
//!
//! Lock order (see `sync`): rename (cross-directory only) -> directory inode(s), ancestor
//! first -> child inode(s) by number -> journal handle -> group -> page -> buffer. Every
//! operation starts one handle after taking its inode locks; nothing on the path of
//! create, write, fallocate or unlink takes a lock shared by the whole file system
//! besides the journal's short handle start.

use crate::alloc::{Allocator, Geometry};
use crate::buf::{Buf, BufCache};
use crate::dev::{BlockDevice, ErrorLatch, FileDevice};
use crate::dir::DirCtx;
use crate::disk::group::GroupDesc;
use crate::disk::inode::{DiskInode, FL_EXTENTS, FL_INLINE_DATA};
use crate::disk::jbd2;
use crate::disk::superblock::{self as sbm, compat, incompat, ro_compat, Superblock};
use crate::error::{Error, Result};
use crate::inode::{self, ICache, Inode, InodeState};
use crate::journal::{Handle, Journal};
use crate::sync::{Mutex, RwLockReadGuard, RENAME, SUPER};
use crate::types::*;
use std::path::Path;

mod data;
mod ops;
mod rename;
use std::sync::Arc;

/// Mount options: which mechanism or baseline each part runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Mount read-only.
    pub read_only: bool,
    /// Commit the running transaction at least this often (ext4's `commit=5`);
    /// `Duration::ZERO` commits only on fsync, sync, unmount and a full journal.
    pub commit_interval: std::time::Duration,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            read_only: false,
            commit_interval: std::time::Duration::from_secs(5),
        }
    }
}

/// A mounted ext4 file system, shared by any number of threads (`Arc<Fs>`).
pub struct Fs {
    dev: Arc<dyn BlockDevice>,
    latch: Arc<ErrorLatch>,
    bufs: Arc<BufCache>,
    journal: Journal,
    al: Allocator,
    icache: ICache,
    sb: Mutex<Superblock>,
    rename_lock: Mutex<()>,
    read_only: bool,
    seed: [u32; 4],
    unsigned: bool,
    def_hash: u8,
    dir_index: bool,
    bs: u32,
}

/// Largest file size: 2^32 - 1 blocks, ext4's s_maxbytes (the last logical block stays
/// unused so that an extent's end fits in 32 bits).
const MAX_FILE_BLOCKS: u64 = (1 << 32) - 1;
/// Dirty metadata blocks kept before a write-back is forced (256 MiB).
const DIRTY_LIMIT: usize = 65536;
/// Link count at which directories switch to "many" (dir_nlink).
const LINK_MAX: u16 = 65000;

fn now() -> Timespec {
    Timespec::now()
}

impl Fs {
    /// Open the image or device at `path` and mount it.
    pub fn mount_path(path: &Path, opts: MountOptions) -> Result<Arc<Fs>> {
        let dev = FileDevice::open(path, opts.read_only)?;
        Fs::mount(Arc::new(dev), opts)
    }

    /// Mount the file system on `dev`.
    pub fn mount(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Arc<Fs>> {
        let latch = Arc::new(ErrorLatch::new(dev));
        let dev: Arc<dyn BlockDevice> = latch.clone();
        let mut raw = vec![0u8; sbm::SB_SIZE];
        if dev.size() < sbm::SB_OFFSET + sbm::SB_SIZE as u64 {
            return Err(Error::corrupt(
                "superblock",
                0,
                "device too small to hold a superblock",
            ));
        }
        dev.read_at(sbm::SB_OFFSET, &mut raw)?;
        let sb = Superblock::decode(&raw, dev.size())?;
        let read_only = check_features(&sb)? || opts.read_only;
        let bs = sb.block_size();
        if bs != 4096 {
            return Err(Error::Unsupported(format!(
                "block size {bs} (lanefs supports 4096)"
            )));
        }
        let bufs = Arc::new(BufCache::new(dev.clone(), bs as usize));
        let geo = geometry(&sb);
        let (descs, gdt) = read_gdt(&geo, &bufs)?;
        let al = Allocator::new(geo, descs, gdt, bufs.clone());
        check_journal(&sb, &al, &bufs)?;
        let fs = Fs {
            journal: Journal::new(bufs.clone()),
            seed: sb.hash_seed(),
            unsigned: sb.flags() & sbm::FLAG_UNSIGNED_HASH != 0,
            def_hash: sb.def_hash_version(),
            dir_index: sb.has_compat(compat::DIR_INDEX),
            sb: Mutex::new(&SUPER, sb),
            rename_lock: Mutex::new(&RENAME, ()),
            icache: ICache::default(),
            dev,
            bufs,
            al,
            read_only,
            latch,
            bs,
        };
        let root = fs.iget(ROOT_INO).map_err(|e| match e {
            Error::NotFound => {
                Error::corrupt("inode", ROOT_INO, "root directory inode is not in use")
            }
            e => e,
        })?;
        if FileType::from_mode(root.state.read().d.mode()) != Some(FileType::Directory) {
            return Err(Error::corrupt("inode", ROOT_INO, "root is not a directory"));
        }
        if !read_only {
            fs.mark_mounted()?;
        }
        Ok(Arc::new(fs))
    }

    fn mark_mounted(&self) -> Result<()> {
        let mut sbg = self.sb.lock();
        let sb = &mut *sbg;
        sb.set_state(sb.state() & !1);
        sb.set_mnt_count(sb.mnt_count().wrapping_add(1));
        sb.set_mtime(now().sec as u32);
        sb.update_checksum();
        let raw = sb.raw.clone();
        drop(sbg);
        self.dev.write_at(sbm::SB_OFFSET, &raw[..])
    }

    fn ctx(&self) -> DirCtx<'_> {
        DirCtx {
            al: &self.al,
            bufs: &self.bufs,
            seed: self.seed,
            unsigned: self.unsigned,
            def_hash: self.def_hash,
            dir_index: self.dir_index,
        }
    }

    /// Refuse changes on a read-only mount, or after a device error turned it read-only.
    fn check_rw(&self) -> Result<()> {
        if self.read_only || self.latch.failed() {
            Err(Error::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Whether changes are refused (read-only mount or an earlier device error).
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.latch.failed()
    }

    /// The cached inode `ino`, loading it from disk on a miss.
    fn iget(&self, ino: Ino) -> Result<Arc<Inode>> {
        if let Some(i) = self.icache.peek(ino) {
            return Ok(i);
        }
        if ino < 1 || ino > u64::from(self.al.geo.ipg) * u64::from(self.al.geo.groups) {
            return Err(Error::NotFound);
        }
        let d = inode::read_disk_inode(&self.al, &self.bufs, ino)?;
        if d.links() == 0 || FileType::from_mode(d.mode()).is_none() {
            return Err(Error::NotFound);
        }
        if d.flags() & FL_INLINE_DATA != 0 {
            return Err(Error::Unsupported(format!("inode {ino} has inline data")));
        }
        Ok(self.icache.insert(inode::new_inode(ino, d)))
    }

    /// Read-lock an inode's state with its extent map loaded.
    fn read_loaded<'a>(&self, i: &'a Inode) -> Result<RwLockReadGuard<'a, InodeState>> {
        {
            let st = i.state.read();
            if st.freed {
                return Err(Error::NotFound);
            }
            if st.ext.is_some() || !needs_extents(&st.d) {
                return Ok(st);
            }
        }
        {
            let mut st = i.state.write();
            inode::load_extents(&self.al, &self.bufs, i.ino, &mut st)?;
        }
        self.read_loaded(i)
    }

    /// Load the extent map under a held write lock.
    fn load(&self, i: &Inode, st: &mut InodeState) -> Result<()> {
        if st.freed {
            return Err(Error::NotFound);
        }
        if needs_extents(&st.d) {
            inode::load_extents(&self.al, &self.bufs, i.ino, st)?;
        }
        Ok(())
    }

    /// Persist an inode: its extent tree if changed, then its bytes.
    fn store(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        if st.ext_dirty {
            inode::store_tree(&self.al, &self.bufs, h, ino, st)?;
        }
        inode::store_inode(&self.al, &self.bufs, h, ino, &mut st.d)
    }

    fn attr(&self, ino: Ino, d: &DiskInode) -> Attr {
        Attr {
            ino,
            kind: FileType::from_mode(d.mode()).unwrap_or(FileType::Regular),
            perm: d.mode() & 0o7777,
            nlink: u32::from(d.links()),
            uid: d.uid(),
            gid: d.gid(),
            size: d.size(),
            blocks: d.blocks_512(self.bs),
            atime: d.atime(),
            mtime: d.mtime(),
            ctime: d.ctime(),
            crtime: d.crtime(),
            rdev: if is_dev(d) { d.rdev() } else { 0 },
            generation: d.generation(),
        }
    }
}

fn needs_extents(d: &DiskInode) -> bool {
    match FileType::from_mode(d.mode()) {
        Some(FileType::Regular) | Some(FileType::Directory) => true,
        Some(FileType::Symlink) => d.flags() & FL_EXTENTS != 0,
        _ => false,
    }
}

fn is_dev(d: &DiskInode) -> bool {
    matches!(
        FileType::from_mode(d.mode()),
        Some(FileType::CharDevice) | Some(FileType::BlockDevice)
    )
}

/// Refuse unknown INCOMPAT features; returns whether unknown RO_COMPAT forces read-only.
fn check_features(sb: &Superblock) -> Result<bool> {
    let unknown = sb.feature_incompat() & !incompat::SUPPORTED;
    if unknown != 0 {
        let names = sbm::feature_names(unknown, incompat::NAMES);
        return Err(Error::Unsupported(format!(
            "unknown INCOMPAT feature(s): {names}"
        )));
    }
    if sb.has_incompat(incompat::RECOVER) {
        return Err(Error::Unsupported(
            "the journal needs recovery (needs_recovery is set): replay it with e2fsck or a kernel mount first".into(),
        ));
    }
    if !sb.has_incompat(incompat::FILETYPE) {
        return Err(Error::Unsupported(
            "directories without the filetype feature".into(),
        ));
    }
    Ok(sb.feature_ro_compat() & !ro_compat::SUPPORTED != 0)
}

fn geometry(sb: &Superblock) -> Geometry {
    let groups = sb.group_count();
    let desc_size = sb.desc_size();
    Geometry {
        bs: sb.block_size(),
        blocks: sb.blocks_count(),
        bpg: sb.blocks_per_group(),
        ipg: sb.inodes_per_group(),
        groups,
        first_data_block: sb.first_data_block(),
        inode_size: u32::from(sb.inode_size()),
        desc_size,
        csum: sb.metadata_csum(),
        seed: sb.csum_seed(),
        first_ino: sb.first_ino(),
        sparse: sb.has_ro_compat(ro_compat::SPARSE_SUPER),
        gdt_blocks: (u64::from(groups) * u64::from(desc_size)).div_ceil(u64::from(sb.block_size()))
            as u32,
        reserved_gdt: if sb.has_compat(compat::RESIZE_INODE) {
            u32::from(sb.reserved_gdt_blocks())
        } else {
            0
        },
    }
}

/// Refuse a journal that holds transactions not yet replayed (jbd2 `s_start != 0`).
fn check_journal(sb: &Superblock, al: &Allocator, bufs: &BufCache) -> Result<()> {
    if !sb.has_compat(compat::HAS_JOURNAL) {
        return Ok(());
    }
    let jino = u64::from(sb.journal_inum());
    if jino == 0 {
        return Err(Error::Unsupported("external journal device".into()));
    }
    if jino > u64::from(al.geo.ipg) * u64::from(al.geo.groups) {
        return Err(Error::corrupt(
            "superblock",
            0,
            format!("journal inode {jino} out of range"),
        ));
    }
    let d = inode::read_disk_inode(al, bufs, jino)?;
    let mut st = InodeState {
        d,
        ext: None,
        tree_blocks: Vec::new(),
        ext_dirty: false,
        freed: false,
    };
    inode::load_extents(al, bufs, jino, &mut st)?;
    let first = st.ext.as_ref().and_then(|e| e.find(0));
    let Some(first) = first else {
        return Err(Error::corrupt(
            "journal inode",
            jino,
            "journal has no first block",
        ));
    };
    let b = bufs.get(first.pblk)?;
    let data = b.read();
    match jbd2::needs_recovery(&data) {
        None => Err(Error::corrupt("journal superblock", first.pblk, "bad jbd2 magic")),
        Some(true) => Err(Error::Unsupported(
            "the journal needs recovery (it holds unreplayed transactions): replay it with e2fsck or a kernel mount first".into(),
        )),
        Some(false) => Ok(()),
    }
}

fn read_gdt(geo: &Geometry, bufs: &BufCache) -> Result<(Vec<GroupDesc>, Vec<Arc<Buf>>)> {
    let first = u64::from(geo.first_data_block) + 1;
    let mut gdt = Vec::new();
    for i in 0..u64::from(geo.gdt_blocks) {
        gdt.push(bufs.get(first + i)?);
    }
    let ds = geo.desc_size as usize;
    let per = geo.bs as usize / ds;
    let mut descs = Vec::with_capacity(geo.groups as usize);
    for g in 0..geo.groups {
        let b = gdt[g as usize / per].read();
        let off = (g as usize % per) * ds;
        let d = GroupDesc {
            raw: b[off..off + ds].to_vec(),
        };
        drop(b);
        validate_desc(geo, g, &d)?;
        descs.push(d);
    }
    Ok((descs, gdt))
}

fn validate_desc(geo: &Geometry, g: u32, d: &GroupDesc) -> Result<()> {
    let at = u64::from(g);
    if geo.csum && d.checksum() != d.compute_checksum(geo.seed, g) {
        return Err(Error::corrupt("group descriptor", at, "checksum mismatch"));
    }
    let itb = (u64::from(geo.ipg) * u64::from(geo.inode_size)).div_ceil(u64::from(geo.bs));
    let in_fs = |b: u64, n: u64| b > u64::from(geo.first_data_block) && b + n <= geo.blocks;
    if !in_fs(d.block_bitmap(), 1) || !in_fs(d.inode_bitmap(), 1) || !in_fs(d.inode_table(), itb) {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "bitmap or inode table outside the file system",
        ));
    }
    if d.free_blocks() > geo.bpg || d.free_inodes() > geo.ipg {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "free counts larger than the group",
        ));
    }
    // The allocator computes `ipg - itable_unused` and bumps used_dirs: keep both in range.
    if d.itable_unused() > geo.ipg || d.used_dirs() > geo.ipg {
        return Err(Error::corrupt(
            "group descriptor",
            at,
            "unused inode or directory count larger than the group",
        ));
    }
    Ok(())
}
