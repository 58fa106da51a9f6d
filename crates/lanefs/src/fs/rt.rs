//! The realtime data device at the file-system level (seed 003): formatting it onto an
//! image, checking it at mount, building the rt allocator from the bitmap and summary
//! inodes, and the per-file realtime flag and extent size hint (XFS's `realtime`,
//! `rtinherit` and `extsize`).
//!
//! A realtime file's blocks are rt-device blocks: its extents map to the data device, its
//! page-cache mapping reads and writes there, and `bmap` allocates and frees them through
//! [`RtAlloc`]. Everything else of it (inode, extent tree, directory entries) stays in the
//! image, journaled as usual; its data is ordered before the commits that map it, and the
//! journal flushes the data device with the log.

use super::{Fs, MountOptions};
use crate::alloc::Allocator;
use crate::bmap;
use crate::buf::BufCache;
use crate::dev::{BlockDevice, FileDevice};
use crate::disk::rtdev::{
    self, RtGeometry, RtHeader, RtSuper, RTDEV_INCOMPAT, RT_BITMAP_INO, RT_FL, RT_HEADER_SIZE,
    RT_SUMMARY_INO,
};
use crate::disk::superblock::{self as sbm, Superblock};
use crate::error::{Error, Result};
use crate::extmap::Mapping;
use crate::ialloc::InodeAllocator;
use crate::inode::{self, Inode, InodeState};
use crate::rtalloc::{RtAlloc, RtAllocPolicy};
use crate::types::*;
use crate::volume::Features;
use std::path::Path;
use std::sync::Arc;

/// Largest extent size hint, in blocks.
pub const MAX_EXTSIZE: u32 = 1 << 20;

/// Whether `d` is a realtime regular file (its data on the rt device).
pub(crate) fn is_rt_file(d: &crate::disk::inode::DiskInode) -> bool {
    rtdev::is_rt_file(d.mode(), d.flags())
}

/// Open the data device named by `opts.rtdev`, if any.
pub(super) fn open_rtdev(opts: &MountOptions) -> Result<Option<Arc<dyn BlockDevice>>> {
    let Some(p) = &opts.rtdev else {
        return Ok(None);
    };
    let d = FileDevice::open(p, opts.read_only)
        .map_err(|e| Error::Invalid(format!("realtime device {}: {e}", p.display())))?;
    Ok(Some(Arc::new(d)))
}

/// Check the data device against the image: the image names one exactly when a device is
/// given, and the device's header and size match the image's rt geometry.
pub(super) fn check_rtdev(
    sb: &Superblock,
    rtdev: Option<&dyn BlockDevice>,
) -> Result<Option<RtGeometry>> {
    let has = sb.has_incompat(RTDEV_INCOMPAT);
    let rs = RtSuper::decode(&sb.raw[..])?;
    let (s, d) = match (has, rs, rtdev) {
        (false, _, None) => return Ok(None),
        (false, _, Some(_)) => {
            return Err(Error::Invalid(
                "the image has no realtime device (not made with `lanefs mkfs --rtdev`); \
                 mount it without rtdev"
                    .into(),
            ))
        }
        (true, None, _) => {
            return Err(Error::corrupt(
                "superblock",
                0,
                "lanefs_rtdev is set but the realtime geometry is missing",
            ))
        }
        (true, Some(_), None) => {
            return Err(Error::Invalid(
                "the image keeps realtime file data on a second device: give it with \
                 --rtdev DATA (mount option rtdev=DATA)"
                    .into(),
            ))
        }
        (true, Some(s), Some(d)) => (s, d),
    };
    let geo = RtGeometry::new(sb.block_size(), &s);
    if d.size() < RT_HEADER_SIZE as u64 {
        return Err(Error::Invalid(format!(
            "the realtime device is {} bytes, too small for its header",
            d.size()
        )));
    }
    let mut b = vec![0u8; RT_HEADER_SIZE];
    d.read_at(0, &mut b)?;
    let hdr = RtHeader::decode(&b)?;
    if hdr.uuid != s.uuid || hdr.rextents != s.rextents || hdr.rextsize != s.rextsize {
        return Err(Error::Invalid(
            "the realtime device belongs to another image (its header does not match)".into(),
        ));
    }
    if d.size() < geo.device_bytes() {
        return Err(Error::Invalid(format!(
            "the realtime device is {} bytes; the image's realtime geometry needs {}",
            d.size(),
            geo.device_bytes()
        )));
    }
    Ok(Some(geo))
}

/// The realtime data device of a mount and its allocator (seed 003's `RtAlloc`): the
/// mount's, not the block allocator's; `bmap` is handed it.
pub(super) struct Rt {
    /// The data device (shut down with the image's).
    pub(super) dev: Arc<dyn BlockDevice>,
    /// Its allocator, built at mount from the bitmap and summary inodes.
    pub(super) alloc: Arc<RtAlloc>,
}

/// Build the rt allocator from the bitmap and summary inodes (at mount, before `Fs`).
pub(super) fn open_rt(
    geo: RtGeometry,
    al: &Allocator,
    ial: &InodeAllocator,
    bufs: &Arc<BufCache>,
    policy: RtAllocPolicy,
    ea_inode: bool,
) -> Result<Arc<RtAlloc>> {
    let blocks = |ino, n| rt_file_blocks(al, ial, bufs, ea_inode, ino, n);
    let bitmap = blocks(RT_BITMAP_INO, geo.bitmap_blocks())?;
    let summary = blocks(RT_SUMMARY_INO, geo.summary_blocks())?;
    Ok(Arc::new(RtAlloc::new(
        geo,
        bufs.clone(),
        bitmap,
        summary,
        policy,
    )?))
}

/// The image blocks of the first `n` blocks of reserved file `ino`.
fn rt_file_blocks(
    al: &Allocator,
    ial: &InodeAllocator,
    bufs: &BufCache,
    ea_inode: bool,
    ino: u32,
    n: u64,
) -> Result<Vec<u64>> {
    let ino = u64::from(ino);
    let unused = || Error::corrupt("inode", ino, "realtime metadata inode is not in use");
    if ino > al.geo.inodes() {
        return Err(unused());
    }
    let d = inode::read_disk_inode(ial, bufs, ino)?;
    if d.links() == 0 || FileType::from_mode(d.mode()).is_none() {
        return Err(unused());
    }
    let mut st = InodeState::from_disk(d);
    if super::inodes::needs_extents(&st.d, al.geo.bs, ea_inode) {
        inode::load_extents(al, None, bufs, ino, &mut st)?;
    }
    let ext = st
        .ext
        .as_ref()
        .ok_or_else(|| Error::corrupt("inode", ino, "realtime metadata inode has no extents"))?;
    (0..n)
        .map(|f| match u32::try_from(f).map(|b| ext.map(b)) {
            Ok(Mapping::Mapped(p, false, _)) => Ok(p),
            _ => Err(Error::corrupt(
                "inode",
                ino,
                format!("realtime metadata block {f} is not mapped"),
            )),
        })
        .collect()
}

impl Fs {
    /// The realtime allocator, on a mount with an rt device.
    pub(super) fn rt(&self) -> Option<&RtAlloc> {
        self.rt.as_ref().map(|r| &*r.alloc)
    }

    /// The realtime data device, on a mount that has one.
    pub(super) fn rtdev(&self) -> Option<&Arc<dyn BlockDevice>> {
        self.rt.as_ref().map(|r| &r.dev)
    }

    /// Whether some frees, of image or rt blocks, wait for their transaction to commit
    /// (an ENOSPC may then go away after a commit).
    pub(super) fn pending_frees(&self) -> bool {
        self.al.has_pending_frees() || self.rt().is_some_and(|rt| rt.has_busy())
    }

    /// Point a freshly cached inode's page-cache mapping at the device holding its data.
    pub(super) fn bind_device(&self, i: &Inode) {
        if let Some(d) = self.rtdev() {
            if is_rt_file(&i.state.read().d) {
                i.mapping.set_device(Some(d.clone()));
            }
        }
    }

    /// A new inode of directory `parent` inherits its realtime flag and extent size hint
    /// (XFS's `rtinherit`): regular files and directories, on an image with an rt device.
    pub(super) fn inherit_rt(&self, parent: &InodeState, kind: FileType, st: &mut InodeState) {
        if self.rt.is_none()
            || parent.d.flags() & RT_FL == 0
            || !matches!(kind, FileType::Regular | FileType::Directory)
        {
            return;
        }
        st.d.set_flags(st.d.flags() | RT_FL);
        st.d.set_extsize(parent.d.extsize());
    }

    fn rt_or_unsupported(&self) -> Result<&RtAlloc> {
        self.rt()
            .ok_or_else(|| Error::NotSupported("the image has no realtime device".into()))
    }

    /// Whether a file's blocks may change device: no block mapped, nothing inline.
    fn no_data_yet(st: &InodeState) -> bool {
        st.ext.as_ref().is_some_and(|e| e.is_empty())
            && st.d.flags() & crate::disk::inode::FL_INLINE_DATA == 0
    }

    /// Whether `what` (the realtime flag or the hint) may change on `st`: a directory
    /// always, a regular file while it has no data blocks (as XFS requires); its kind.
    fn rt_changeable(st: &InodeState, what: &str) -> Result<FileType> {
        match FileType::from_mode(st.d.mode()) {
            Some(FileType::Directory) => Ok(FileType::Directory),
            Some(FileType::Regular) if Self::no_data_yet(st) => Ok(FileType::Regular),
            Some(FileType::Regular) => Err(Error::Invalid(format!(
                "a file's {what} changes only while it has no data blocks"
            ))),
            _ => Err(Error::Invalid(format!(
                "only regular files and directories have a {what}"
            ))),
        }
    }

    //// Make `ino` realtime or not (XFS's `FS_XFLAG_REALTIME`, and on a directory
    /// `RTINHERIT`). A regular file must have no data blocks yet, as XFS requires.
    pub fn set_realtime(&self, ino: Ino, on: bool) -> Result<Attr> {
        self.check_rw()?;
        self.rt_or_unsupported()?;
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        let kind = Self::rt_changeable(&st, "realtime flag")?;
        let flags = if on {
            st.d.flags() | RT_FL
        } else {
            st.d.flags() & !RT_FL
        };
        if kind == FileType::Regular {
            let _change = i.mapping.change();
            i.mapping.drop_range(&self.pages, 0, 1 << 32);
            i.mapping
                .set_device(if on { self.rtdev().cloned() } else { None });
        }
        let h = self.journal.start();
        st.d.set_flags(flags);
        st.d.set_ctime(self.now());
        self.store(&h, &i, &mut st)?;
        Ok(self.attr(ino, &st.d))
    }

    /// Set the extent size hint of a realtime file or directory, in blocks (0: none; else
    /// a multiple of the rt extent size): allocations are widened to hint-aligned pieces,
    /// the extra blocks unwritten. A regular file must have no data blocks yet.
    pub fn set_extsize(&self, ino: Ino, blocks: u32) -> Result<Attr> {
        self.check_rw()?;
        let rext = self.rt_or_unsupported()?.geometry().rextsize;
        if blocks > MAX_EXTSIZE || !blocks.is_multiple_of(rext) {
            return Err(Error::Invalid(format!(
                "extent size hint {blocks} blocks: expected a multiple of the rt extent size \
                 ({rext} blocks) up to {MAX_EXTSIZE}"
            )));
        }
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        self.load(&i, &mut st)?;
        Self::rt_changeable(&st, "extent size hint")?;
        let h = self.journal.start();
        st.d.set_extsize(blocks);
        st.d.set_ctime(self.now());
        self.store(&h, &i, &mut st)?;
        Ok(self.attr(ino, &st.d))
    }

    /// Whether `ino` is realtime, and its extent size hint in blocks.
    pub fn realtime(&self, ino: Ino) -> Result<(bool, u32)> {
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        Ok((st.d.flags() & RT_FL != 0, st.d.extsize()))
    }

    /// statfs(2) as asked of `ino`: on a mount with an rt device, a realtime file or a
    /// directory whose new files are realtime reports the rt device's blocks and free
    /// blocks (as XFS's statfs does for `REALTIME` and `RTINHERIT` inodes, so `df` in
    /// such a directory shows the space its files use); anything else reports
    /// [`Fs::statfs`]. The inode counts stay the image's.
    pub fn statfs_at(&self, ino: Ino) -> Result<StatFs> {
        let mut s = self.statfs()?;
        let Some(rt) = self.rt() else {
            return Ok(s);
        };
        let i = self.iget(ino)?;
        let flags = {
            let st = i.state.read();
            if st.freed {
                return Err(Error::NotFound);
            }
            st.d.flags()
        };
        if flags & RT_FL != 0 {
            let rext = u64::from(rt.geometry().rextsize);
            s.blocks = rt.geometry().rextents * rext;
            s.free_blocks = rt.free_extents() * rext;
            s.avail_blocks = s.free_blocks;
        }
        Ok(s)
    }

    /// The rt device's geometry, when the image has one.
    pub fn rt_geometry(&self) -> Option<RtGeometry> {
        self.rt().map(|r| *r.geometry())
    }

    /// Make reserved inode `ino` a regular file of `n` blocks; returns their image blocks.
    fn make_rt_file(&self, ino: u32, n: u64) -> Result<Vec<u64>> {
        let ino = u64::from(ino);
        let owner = Owner {
            uid: 0,
            gid: 0,
            umask: 0,
        };
        let mut st = self.init_inode(
            ino,
            FileType::Regular.mode_bits() | 0o600,
            owner,
            0,
            FileType::Regular,
            false,
            self.now(),
        );
        let i = inode::new_inode(ino, st.d.clone());
        let h = self.journal.start();
        bmap::map_blocks(&self.al, self.rt(), &h, &i, &mut st, 0, n, false)?;
        self.al.discard_pa(&mut st.pa);
        st.d.set_size(n * u64::from(self.vol.bs()));
        self.store_new(&h, ino, &mut st)?;
        drop(h);
        let ext = st
            .ext
            .as_ref()
            .ok_or_else(|| Error::Invalid("no extents".into()))?;
        Ok((0..n)
            .filter_map(|f| match ext.map(f as u32) {
                Mapping::Mapped(p, _, _) => Some(p),
                Mapping::Hole(_) => None,
            })
            .collect())
    }
}

/// Give the image at `image` a realtime data device at `rtdev` (`lanefs mkfs
/// --rtdev`): the bitmap and summary inodes get their blocks (all extents free but
/// extent 0, which holds the device's header), the superblock records the geometry and
/// the `lanefs_rtdev` INCOMPAT bit, and the device gets its header. `rextsize` is the rt
/// extent in blocks; `group_bmblocks` the bitmap blocks per rt group (0: one group).
/// An offline tool, as [`mkfs::format`](crate::mkfs::format) is: the image must not be
/// mounted.
pub fn format_rt(
    image: &Path,
    rtdev: &Path,
    rextsize: u32,
    group_bmblocks: u32,
) -> Result<RtGeometry> {
    let rd = FileDevice::open(rtdev, false)
        .map_err(|e| Error::Invalid(format!("realtime device {}: {e}", rtdev.display())))?;
    let opts = MountOptions {
        commit_interval: std::time::Duration::ZERO,
        ..MountOptions::default()
    };
    let fs = Fs::mount_path(image, opts)?;
    if !fs.vol.has(Features::EXTENTS) {
        return Err(Error::Invalid(
            "a realtime device needs the extent feature (realtime files are extent-mapped)".into(),
        ));
    }
    let geo = rtdev::geometry_for(fs.vol.bs(), rd.size(), rextsize, group_bmblocks)?;
    let bitmap = fs.make_rt_file(RT_BITMAP_INO, geo.bitmap_blocks())?;
    let summary = fs.make_rt_file(RT_SUMMARY_INO, geo.summary_blocks())?;
    let uuid = {
        let mut u = fs.sb.lock().uuid();
        // A uuid of its own: the image's with its halves swapped and a marker.
        u.rotate_left(8);
        u[0] ^= 0x52;
        u
    };
    fs.unmount()?;
    let dev = FileDevice::open(image, false)?;
    let (bm, sm) = rtdev::build_files(&geo, &[(1, geo.rextents - 1)]);
    let bs = u64::from(geo.block_size);
    for (blocks, data) in [(&bitmap, &bm), (&summary, &sm)] {
        for (p, d) in blocks.iter().zip(data) {
            dev.write_at(p * bs, d)?;
        }
    }
    let mut raw = vec![0u8; sbm::SB_SIZE];
    dev.read_at(sbm::SB_OFFSET, &mut raw)?;
    let mut sb = Superblock::decode(&raw, dev.size())?;
    sb.set_feature_incompat(sb.feature_incompat() | RTDEV_INCOMPAT);
    RtSuper {
        rextsize: geo.rextsize,
        rextents: geo.rextents,
        group_bmblocks: geo.group_bmblocks,
        uuid,
    }
    .encode(&mut sb.raw[..]);
    sb.update_checksum();
    dev.write_at(sbm::SB_OFFSET, &sb.raw[..])?;
    dev.flush()?;
    let mut hdr = vec![0u8; geo.extent_bytes().min(1 << 20) as usize];
    RtHeader {
        uuid,
        rextents: geo.rextents,
        rextsize: geo.rextsize,
    }
    .encode(&mut hdr);
    rd.write_at(0, &hdr)?;
    rd.flush()?;
    Ok(geo)
}
