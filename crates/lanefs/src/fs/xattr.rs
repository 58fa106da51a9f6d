//! Extended attributes and POSIX ACLs: get, list, set, remove.
//!
//! As ext4 stores them: in the inode body after `i_extra_isize` when they fit there (tried
//! first, as `ext4_xattr_set_handle` does), else in one external block. A block shared by
//! several inodes (`h_refcount` > 1, as the kernel's mbcache makes them) is never edited in
//! place: the inode gets its own copy and the shared one's count drops. The decision is
//! taken under the shared block's buffer lock, so two sharers unsharing at once leave the
//! count exact. ACL values cross the API in the VFS's xattr form and are stored in ext4's.

use super::Fs;
use crate::disk::xattr::{self as dx, Entry};
use crate::error::{Error, Result};
use crate::inode::InodeState;
use crate::journal::Handle;
use crate::types::*;
use crate::volume::Features;

/// An inode's attributes as found: in the body, and in its block (with the block's number
/// and refcount).
struct Found {
    ibody: Vec<Entry>,
    block: Vec<Entry>,
    blk: u64,
    refcount: u32,
}

impl Found {
    fn get(&self, index: u8, name: &[u8]) -> Option<&Entry> {
        let same = |e: &&Entry| e.index == index && e.name == name;
        self.ibody
            .iter()
            .find(same)
            .or_else(|| self.block.iter().find(same))
    }
}

/// ACLs a new inode inherits, in ext4's form (`Fs::acls_for_new`).
#[derive(Default)]
pub(super) struct NewAcls {
    /// `system.posix_acl_access`, when the mode alone does not say it.
    access: Option<Vec<u8>>,
    /// `system.posix_acl_default`, for a new directory.
    default: Option<Vec<u8>>,
}

/// `system.*` names other than the ACLs have no handler in Linux (EOPNOTSUPP); the one
/// ext4 stores, `system.data`, holds inline data and is the file system's own.
fn refuse_system(index: u8) -> Result<()> {
    if index == dx::INDEX_SYSTEM {
        return Err(Error::NotSupported(
            "system.* attributes other than POSIX ACLs".into(),
        ));
    }
    Ok(())
}

impl Fs {
    /// Value of xattr `name` (full name with its prefix, e.g. `b"user.foo"`);
    /// `Error::NoData` when absent. ACLs come in the VFS's xattr form.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        // After a shutdown, as ext4_xattr_get: EIO.
        self.check_live()?;
        let (index, sub) = dx::split_name(name)?;
        refuse_system(index)?;
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        let found = self.read_xattrs(ino, &st)?;
        let e = found.get(index, &sub).ok_or(Error::NoData)?;
        if let Some(r) = e.ea_inode {
            drop(st);
            return self.read_ea_inode(ino, r);
        }
        if index == dx::INDEX_ACL_ACCESS || index == dx::INDEX_ACL_DEFAULT {
            let a = dx::acl_from_disk(&e.value, ino)?;
            return Ok(dx::acl_to_vfs(&a));
        }
        Ok(e.value.clone())
    }

    /// Store `value` of attribute `name` in a new EA inode for `owner` (ext4_xattr_inode_create
    /// and the reference ext4 takes on it): a regular file flagged EA_INODE with the
    /// owner's ids, one reference (i_ctime seconds high, i_version low), the value's crc32c
    /// in i_atime, its data written as any file's, its blocks charged to the owner's
    /// i_blocks as the kernel's quota does.
    fn create_ea_inode(
        &self,
        h: &Handle,
        owner: Ino,
        st: &mut InodeState,
        name: &[u8],
        value: &[u8],
    ) -> Result<dx::EaRef> {
        use crate::disk::inode::FL_EA_INODE;
        let geo = &self.al.geo;
        // Near its owner (ext4 passes the owner's number as the goal); the owner is not a
        // directory, so there is no hint of its own to keep.
        let no_hint = std::sync::atomic::AtomicU32::new(crate::ialloc::NO_GROUP);
        let want = crate::ialloc::Want {
            parent_ino: owner,
            parent_group: geo.group_of_inode(owner),
            last: &no_hint,
            is_dir: false,
            top: false,
            name,
        };
        let hash = crate::disk::crc32c_raw(geo.seed, value);
        let ids = Owner {
            uid: st.d.uid(),
            gid: st.d.gid(),
            umask: 0,
        };
        let t = self.now();
        let (inum, mut est, claim) =
            self.birth(h, want, 0o100600, ids, 0, FileType::Regular, false, t)?;
        // An EA inode's reference count is i_ctime's seconds (high) and i_version (low);
        // i_atime holds the value's hash. No generation: nothing opens it by handle.
        est.d.set_ctime(Timespec { sec: 0, nsec: 0 });
        est.d.set_atime(Timespec {
            sec: i64::from(hash),
            nsec: 0,
        });
        est.d.set_generation(0);
        est.d.set_version_lo(1);
        est.d.set_size(value.len() as u64);
        est.d.set_flags(est.d.flags() | FL_EA_INODE);
        crate::inode::init_empty_map(&mut est, self.vol.has(Features::EXTENTS));
        // Nothing refers to it until the owner's entry does: publish it now.
        let ea = claim.finish(crate::inode::inode_from_state(inum, est));
        let mut est = ea.state.write();
        self.fill_new_blocks(h, &ea, &mut est, value)?;
        self.store(h, &ea, &mut est)?;
        drop(est);
        let charged = st.d.blocks_512(self.vol.bs()) + self.ea_sectors(value.len() as u32);
        st.d.set_blocks_512(charged, self.vol.bs());
        Ok(dx::EaRef {
            inum: inum as u32,
            size: value.len() as u32,
            hash: dx::entry_hash(name, &hash.to_le_bytes()),
        })
    }

    /// Drop `owner`'s reference on an EA inode (ext4_xattr_inode_dec_ref): its blocks are
    /// no longer charged to the owner, and at no reference left it is freed.
    fn drop_ea_ref(&self, h: &Handle, owner: Ino, st: &mut InodeState, r: dx::EaRef) -> Result<()> {
        self.check_ea_ref(owner, r)?;
        self.uncharge_ea(st, r);
        let ea = self.iget(u64::from(r.inum))?;
        let mut est = ea.state.write();
        self.load(&ea, &mut est)?;
        if est.d.flags() & crate::disk::inode::FL_EA_INODE == 0 {
            return Err(Error::corrupt(
                "xattr",
                u64::from(r.inum),
                "EA inode lacks the EA_INODE flag",
            ));
        }
        let refs = est.d.ea_inode_refs();
        if refs > 1 {
            est.d.set_ea_inode_refs(refs - 1);
            return self.store(h, &ea, &mut est);
        }
        est.d.set_ea_inode_refs(0);
        self.free_inode(h, &ea, &mut est)?;
        drop(est);
        self.icache.remove(ea.ino, &ea);
        Ok(())
    }

    /// Refuse a reference no EA inode can answer (ext4_xattr_inode_iget and
    /// check_xattrs): to the owner itself (whose lock its caller holds: taking it again
    /// would deadlock), to a reserved inode or one past the last, or a value larger than
    /// the kernel allows (16 MiB, EXT4_XATTR_SIZE_MAX).
    fn check_ea_ref(&self, owner: Ino, r: dx::EaRef) -> Result<()> {
        let n = u64::from(r.inum);
        let why = if n == owner {
            "names its own owner"
        } else if n < u64::from(self.al.geo.first_ino) || n > self.al.geo.inodes() {
            "is not an inode an attribute may use"
        } else if r.size > 1 << 24 {
            "value larger than 16 MiB"
        } else {
            let (flags, mode) = self.ea_kind(owner, n)?;
            let ea_flag = flags & crate::disk::inode::FL_EA_INODE != 0;
            if ea_flag && FileType::from_mode(mode) == Some(FileType::Regular) {
                return Ok(());
            }
            "is not an EA inode (a regular file with the EA_INODE flag)"
        };
        Err(Error::corrupt(
            "xattr",
            owner,
            format!("EA inode {n} {why}"),
        ))
    }

    /// Inode `n`'s flags and mode, read without waiting on its lock for long: a corrupt
    /// reference may name an inode whose lock this thread holds (the directory an unlink
    /// is in), where waiting would never end. A cached inode is read under a try-lock,
    /// retried for up to a second (an EA inode's lock is held for microseconds); one not
    /// cached, from its table block.
    fn ea_kind(&self, owner: Ino, n: Ino) -> Result<(u32, u16)> {
        let Some(i) = self.icache.peek(n) else {
            let d = crate::inode::peek_disk_inode(&self.ial, &self.bufs, n)?;
            return Ok((d.flags(), d.mode()));
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            if let Some(st) = i.state.try_read() {
                return Ok((st.d.flags(), st.d.mode()));
            }
            if std::time::Instant::now() > deadline {
                let why = format!("EA inode {n} stays locked (a reference to an inode in use)");
                return Err(Error::corrupt("xattr", owner, why));
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// The owner no longer pays for EA inode `r`'s blocks.
    fn uncharge_ea(&self, st: &mut InodeState, r: dx::EaRef) {
        let cur = st.d.blocks_512(self.vol.bs());
        st.d.set_blocks_512(cur.saturating_sub(self.ea_sectors(r.size)), self.vol.bs());
    }

    /// The sectors a value of `size` bytes in an EA inode charges to its owner (whole
    /// blocks, as the kernel's quota charge).
    fn ea_sectors(&self, size: u32) -> u64 {
        let bs = u64::from(self.vol.bs());
        u64::from(size).div_ceil(bs) * bs / 512
    }

    /// One more xattr block names EA inode `r` (a copy of a shared block).
    fn add_ea_ref(&self, h: &Handle, r: dx::EaRef) -> Result<()> {
        let ea = self.iget(u64::from(r.inum))?;
        let mut est = ea.state.write();
        let refs = est.d.ea_inode_refs();
        est.d.set_ea_inode_refs(refs + 1);
        self.store(h, &ea, &mut est)
    }

    /// Before `st`'s inode is freed: drop its references on EA inodes, from its body and,
    /// when this inode is the block's last user, from its block.
    pub(super) fn release_ea_refs(
        &self,
        h: &Handle,
        owner: Ino,
        st: &mut InodeState,
    ) -> Result<()> {
        if !self.vol.has(Features::EA_INODE) {
            return Ok(());
        }
        // An EA inode's own attributes name no further EA inode (the kernel's rule): its
        // references are not followed, so no chain or cycle of them is walked.
        if st.d.flags() & crate::disk::inode::FL_EA_INODE != 0 {
            return Ok(());
        }
        let found = self.read_xattrs(0, st)?;
        let mut refs: Vec<dx::EaRef> = found.ibody.iter().filter_map(|e| e.ea_inode).collect();
        if found.refcount <= 1 {
            refs.extend(found.block.iter().filter_map(|e| e.ea_inode));
        }
        for r in refs {
            self.drop_ea_ref(h, owner, st, r)?;
        }
        Ok(())
    }

    /// The value an EA inode holds for an attribute of `owner` (the ea_inode feature).
    fn read_ea_inode(&self, owner: Ino, r: dx::EaRef) -> Result<Vec<u8>> {
        self.check_ea_ref(owner, r)?;
        let bad = |why: &str| Error::corrupt("xattr", owner, format!("EA inode {}: {why}", r.inum));
        let i = self
            .iget(u64::from(r.inum))
            .map_err(|_| bad("not in use"))?;
        {
            let st = i.state.read();
            if st.d.flags() & crate::disk::inode::FL_EA_INODE == 0 {
                return Err(bad("lacks the EA_INODE flag"));
            }
            if st.d.size() != u64::from(r.size) {
                return Err(bad("size differs from the entry's value size"));
            }
        }
        let mut v = vec![0u8; r.size as usize];
        let n = self.read(u64::from(r.inum), 0, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// Every xattr name of `ino` with its prefix: in-inode ones first, then the block's.
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let i = self.iget(ino)?;
        let st = i.state.read();
        if st.freed {
            return Err(Error::NotFound);
        }
        let found = self.read_xattrs(ino, &st)?;
        Ok(found
            .ibody
            .iter()
            .chain(&found.block)
            .filter(|e| e.index != dx::INDEX_SYSTEM)
            .filter_map(Entry::full_name)
            .collect())
    }

    /// Set xattr `name` to `value` (`flags` as setxattr(2)). Setting an access ACL also
    /// sets the mode's permission bits from it, and one the mode says whole is not stored.
    /// Names carry their namespace (`user.`, `trusted.`, `security.`,
    /// `system.posix_acl_access`, `system.posix_acl_default`).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::{Error, XattrFlags};
    /// let f = fs.create(ROOT_INO, b"f", 0o644, Owner::default())?;
    /// fs.setxattr(f.ino, b"user.origin", b"camera 2", XattrFlags::Any)?;
    /// assert_eq!(fs.getxattr(f.ino, b"user.origin")?, b"camera 2");
    /// assert_eq!(fs.listxattr(f.ino)?, vec![b"user.origin".to_vec()]);
    /// let again = fs.setxattr(f.ino, b"user.origin", b"x", XattrFlags::Create);
    /// assert_eq!(again, Err(Error::Exists));
    /// fs.removexattr(f.ino, b"user.origin")?;
    /// assert_eq!(fs.getxattr(f.ino, b"user.origin"), Err(Error::NoData));
    /// fs.release(f.ino)?;
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.retry_nospace(|| self.change_xattr(ino, name, Some(value), flags))
    }

    /// Remove xattr `name`; `Error::NoData` when absent.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.retry_nospace(|| self.change_xattr(ino, name, None, XattrFlags::Replace))
    }

    /// The attributes of `ino`: its body's and its block's.
    fn read_xattrs(&self, ino: Ino, st: &InodeState) -> Result<Found> {
        let ibody = match self.ibody_range(st) {
            Some((start, _)) => dx::decode_ibody(&st.d.raw[start..], ino)?,
            None => Vec::new(),
        };
        let blk = st.d.file_acl();
        if blk == 0 {
            return Ok(Found {
                ibody,
                block: Vec::new(),
                blk: 0,
                refcount: 0,
            });
        }
        let b = self.xattr_buf(blk)?;
        let d = b.read();
        let (h, block) = dx::decode_block(&d, blk, self.xattr_seed())?;
        Ok(Found {
            ibody,
            block,
            blk,
            refcount: h.refcount,
        })
    }

    /// The buffer of xattr block `blk`, refusing a number outside the file system.
    fn xattr_buf(&self, blk: u64) -> Result<std::sync::Arc<crate::buf::Buf>> {
        if blk >= self.al.geo.blocks {
            return Err(Error::corrupt(
                "xattr block",
                blk,
                "outside the file system",
            ));
        }
        self.bufs.get(blk)
    }

    fn ibody_range(&self, st: &InodeState) -> Option<(usize, usize)> {
        dx::ibody_range(st.d.raw.len(), usize::from(st.d.extra_isize()))
    }

    fn xattr_seed(&self) -> Option<u32> {
        self.al.geo.csum.then_some(self.al.geo.seed)
    }

    /// Set (`Some`) or remove (`None`) one attribute.
    fn change_xattr(
        &self,
        ino: Ino,
        name: &[u8],
        value: Option<&[u8]>,
        flags: XattrFlags,
    ) -> Result<()> {
        self.check_rw()?;
        if !self.vol.has(Features::EXT_ATTR) {
            return Err(Error::NotSupported(
                "extended attributes (the image lacks ext_attr)".into(),
            ));
        }
        let (index, sub) = dx::split_name(name)?;
        refuse_system(index)?;
        if sub.len() > dx::NAME_MAX {
            return Err(Error::Range);
        }
        if value.is_some_and(|v| v.len() > dx::VALUE_MAX) {
            return Err(Error::TooBig);
        }
        let is_acl = index == dx::INDEX_ACL_ACCESS || index == dx::INDEX_ACL_DEFAULT;
        let parsed = match value {
            Some(v) if is_acl => Some(dx::acl_from_vfs(v)?),
            _ => None,
        };
        let i = self.iget(ino)?;
        let mut st = i.state.write();
        if st.freed {
            return Err(Error::NotFound);
        }
        // xattr_permission: an immutable or append-only inode keeps its attributes.
        if super::ops::flags::pinned(&st) {
            return Err(Error::NotPermitted);
        }
        let kind = FileType::from_mode(st.d.mode());
        let is_dir = kind == Some(FileType::Directory);
        // As the VFS has it: user.* attributes only on regular files and directories.
        if index == dx::INDEX_USER && !is_dir && kind != Some(FileType::Regular) {
            return Err(Error::NotPermitted);
        }
        // What goes on disk: ACLs in ext4's form; an access ACL the mode says whole is
        // not stored (posix_acl_update_mode), a default ACL only on a directory.
        let mut new_mode = None;
        let stored: Option<Vec<u8>> = match (&parsed, value) {
            (Some(a), _) if index == dx::INDEX_ACL_ACCESS => {
                let (perm, equiv) = dx::acl_mode(a);
                new_mode = Some((st.d.mode() & !0o777) | perm);
                (!equiv).then(|| dx::acl_to_disk(a))
            }
            (Some(a), _) => {
                if !is_dir {
                    return Err(Error::AccessDenied);
                }
                Some(dx::acl_to_disk(a))
            }
            (None, v) => v.map(<[u8]>::to_vec),
        };
        let mut found = self.read_xattrs(ino, &st)?;
        let exists = found.get(index, &sub).is_some();
        match (flags, exists) {
            (XattrFlags::Create, true) => return Err(Error::Exists),
            (XattrFlags::Replace, false) => return Err(Error::NoData),
            _ => {}
        }
        let unchanged = match &stored {
            Some(v) => found
                .get(index, &sub)
                .is_some_and(|e| e.ea_inode.is_none() && &e.value == v),
            None => !exists,
        };
        let h = self.journal.start();
        if !unchanged {
            self.put_xattr(&h, ino, &mut st, &mut found, index, sub, stored)?;
        }
        if let Some(m) = new_mode {
            st.d.set_mode(m);
        }
        if !unchanged || new_mode.is_some() {
            st.d.set_ctime(self.now());
            self.store(&h, &i, &mut st)?;
        }
        Ok(())
    }

    /// The ACL of `index` stored for an inode (locked by the caller), decoded; `None` when
    /// it has none.
    fn stored_acl(
        &self,
        ino: Ino,
        st: &InodeState,
        index: u8,
    ) -> Result<Option<(Found, Vec<dx::AclEntry>)>> {
        if !self.vol.has(Features::EXT_ATTR) {
            return Ok(None);
        }
        let found = self.read_xattrs(ino, st)?;
        let Some(e) = found.get(index, b"") else {
            return Ok(None);
        };
        let v = match e.ea_inode {
            Some(r) => self.read_ea_inode(ino, r)?,
            None => e.value.clone(),
        };
        let acl = dx::acl_from_disk(&v, ino)?;
        Ok(Some((found, acl)))
    }

    /// The mode and ACLs of a new inode in directory `dir` (locked as `dst`), as
    /// posix_acl_create decides them: the directory's default ACL masks `mode` and becomes
    /// the new inode's access ACL (stored when it says more than the mode) and, for a
    /// directory, its default ACL too; without a default ACL the umask applies.
    pub(super) fn acls_for_new(
        &self,
        dir: Ino,
        dst: &InodeState,
        mode: &mut u16,
        umask: u16,
    ) -> Result<NewAcls> {
        let Some((_, default)) = self.stored_acl(dir, dst, dx::INDEX_ACL_DEFAULT)? else {
            *mode &= !(umask & 0o777);
            return Ok(NewAcls::default());
        };
        let (access, m, store) = dx::acl_create_masq(&default, *mode);
        *mode = m;
        let is_dir = FileType::from_mode(m) == Some(FileType::Directory);
        Ok(NewAcls {
            access: store.then(|| dx::acl_to_disk(&access)),
            default: is_dir.then(|| dx::acl_to_disk(&default)),
        })
    }

    /// Store a new inode's inherited ACLs (it has no attributes yet).
    pub(super) fn store_new_acls(
        &self,
        h: &Handle,
        ino: Ino,
        st: &mut InodeState,
        acls: NewAcls,
    ) -> Result<()> {
        for (index, v) in [
            (dx::INDEX_ACL_ACCESS, acls.access),
            (dx::INDEX_ACL_DEFAULT, acls.default),
        ] {
            if let Some(v) = v {
                let mut found = self.read_xattrs(ino, st)?;
                self.put_xattr(h, ino, st, &mut found, index, Vec::new(), Some(v))?;
            }
        }
        Ok(())
    }

    /// Bring an inode's access ACL in line with its new mode after chmod
    /// (posix_acl_chmod); nothing when it has none.
    pub(super) fn acl_chmod(&self, h: &Handle, ino: Ino, st: &mut InodeState) -> Result<()> {
        let Some((mut found, access)) = self.stored_acl(ino, st, dx::INDEX_ACL_ACCESS)? else {
            return Ok(());
        };
        let acl = dx::acl_chmod_masq(&access, st.d.mode());
        if acl != access {
            let v = dx::acl_to_disk(&acl);
            self.put_xattr(
                h,
                ino,
                st,
                &mut found,
                dx::INDEX_ACL_ACCESS,
                Vec::new(),
                Some(v),
            )?;
        }
        Ok(())
    }

    /// Make attribute (`index`, `sub`) hold `stored` (ext4's form; `None` removes it) in
    /// the inode body or its block, `found` being what the inode holds now: the body when
    /// it fits, the block otherwise, a shared block copied first, EA inodes referenced and
    /// released as ext4_xattr_set_handle does.
    #[allow(clippy::too_many_arguments)]
    fn put_xattr(
        &self,
        h: &Handle,
        ino: Ino,
        st: &mut InodeState,
        found: &mut Found,
        index: u8,
        sub: Vec<u8>,
        stored: Option<Vec<u8>>,
    ) -> Result<()> {
        let same = |e: &Entry| e.index == index && e.name == sub;
        let old_ea = found.get(index, &sub).and_then(|e| e.ea_inode);
        let mut ibody: Vec<Entry> = found.ibody.iter().filter(|e| !same(e)).cloned().collect();
        let mut block: Vec<Entry> = found.block.iter().filter(|e| !same(e)).cloned().collect();
        if let Some(v) = stored {
            // ea_inode: a value too large for any block goes in its own inode
            // (EXT4_XATTR_MIN_LARGE_EA_SIZE), as ext4_xattr_set_handle decides.
            let e = if self.vol.has(Features::EA_INODE)
                && (v.len() + 3) & !3 > self.vol.bs() as usize - 3 - 16 - 4
            {
                let r = self.create_ea_inode(h, ino, st, &sub, &v)?;
                Entry {
                    index,
                    name: sub,
                    value: Vec::new(),
                    ea_inode: Some(r),
                }
            } else {
                Entry {
                    index,
                    name: sub,
                    value: v,
                    ea_inode: None,
                }
            };
            let room = self.ibody_range(st).map_or(0, |r| r.1);
            ibody.push(e);
            if !dx::fits_ibody(&ibody, room) {
                let e = ibody.pop().ok_or(Error::NoSpace)?;
                block.push(e);
                dx::sort_for_block(&mut block);
                if !dx::fits_block(&block, self.vol.bs() as usize) {
                    return Err(Error::NoSpace);
                }
            }
        }
        if let Some((start, _)) = self.ibody_range(st) {
            if ibody != found.ibody {
                dx::encode_ibody(&mut st.d.raw[start..], &ibody);
            }
        }
        // Whether the old value's EA inode is named by a block other inodes share:
        // that block keeps its reference when this inode leaves it.
        let old_shared = old_ea.is_some()
            && found.refcount > 1
            && found.block.iter().any(|e| e.ea_inode == old_ea);
        let mut copied = false;
        if block != found.block {
            // EA inodes this inode's copy of a shared block will name too.
            let carried: Vec<dx::EaRef> = block
                .iter()
                .filter_map(|e| e.ea_inode)
                .filter(|r| found.block.iter().any(|o| o.ea_inode == Some(*r)))
                .collect();
            found.block = block;
            copied = self.write_xattr_block(h, ino, st, found)?;
            if copied {
                for r in carried {
                    self.check_ea_ref(ino, r)?;
                    self.add_ea_ref(h, r)?;
                }
            }
        }
        if let Some(r) = old_ea {
            if old_shared && copied {
                self.uncharge_ea(st, r);
            } else {
                self.drop_ea_ref(h, ino, st, r)?;
            }
        }
        Ok(())
    }

    /// Make the inode's block hold `found.block` (none: drop the block), never editing a
    /// block other inodes share.
    fn write_xattr_block(
        &self,
        h: &Handle,
        ino: Ino,
        st: &mut InodeState,
        found: &Found,
    ) -> Result<bool> {
        let spb = u64::from(self.vol.bs() / 512);
        let seed = self.xattr_seed();
        if found.block.is_empty() {
            if found.blk != 0 {
                self.release_xattr_block(h, st)?;
                let n = st.d.blocks_512(self.vol.bs()).saturating_sub(spb);
                st.d.set_blocks_512(n, self.vol.bs());
            }
            return Ok(false);
        }
        if found.blk != 0 && found.refcount == 1 && self.edit_if_sole(h, found)? {
            return Ok(false);
        }
        // A block of its own: new, or a copy of a shared one.
        let goal = self.al.geo.group_first(self.al.geo.group_of_inode(ino));
        let nb = self.al.alloc_content_block(h, goal)?;
        if found.blk != 0 {
            let old = self.bufs.get(found.blk)?;
            let mut d = old.write();
            let refs = dx::refcount(&d);
            if refs <= 1 {
                // The other sharers let go meanwhile: it is this inode's alone.
                dx::encode_block(&mut d, found.blk, 1, &found.block, seed);
                drop(d);
                h.dirty(&old);
                self.al.free_blocks_range(h, nb, 1, true)?;
                return Ok(false);
            }
            dx::set_refcount(&mut d, found.blk, refs - 1, seed);
            drop(d);
            h.dirty(&old);
        } else {
            let n = st.d.blocks_512(self.vol.bs()) + spb;
            st.d.set_blocks_512(n, self.vol.bs());
        }
        let copied = found.blk != 0;
        let b = self.bufs.get_new(nb);
        dx::encode_block(&mut b.write(), nb, 1, &found.block, seed);
        h.dirty(&b);
        st.d.set_file_acl(nb);
        Ok(copied)
    }

    /// Rewrite `found.blk` in place if this inode is still its only user (checked under
    /// the block's lock); false if another inode shares it now.
    fn edit_if_sole(&self, h: &Handle, found: &Found) -> Result<bool> {
        let b = self.bufs.get(found.blk)?;
        let mut d = b.write();
        if dx::refcount(&d) != 1 {
            return Ok(false);
        }
        dx::encode_block(&mut d, found.blk, 1, &found.block, self.xattr_seed());
        drop(d);
        h.dirty(&b);
        Ok(true)
    }

    /// Drop the inode's reference to its xattr block and clear `i_file_acl`; the block is
    /// freed when it was the last reference (the caller adjusts `i_blocks`).
    pub(super) fn release_xattr_block(&self, h: &Handle, st: &mut InodeState) -> Result<()> {
        let blk = st.d.file_acl();
        if blk == 0 {
            return Ok(());
        }
        st.d.set_file_acl(0);
        let b = self.xattr_buf(blk)?;
        let mut d = b.write();
        dx::decode_block(&d, blk, None)?;
        let refs = dx::refcount(&d);
        if refs > 1 {
            dx::set_refcount(&mut d, blk, refs - 1, self.xattr_seed());
            drop(d);
            h.dirty(&b);
            return Ok(());
        }
        drop(d);
        self.al.free_blocks_range(h, blk, 1, true)
    }
}
