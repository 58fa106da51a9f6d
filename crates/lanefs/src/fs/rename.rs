//! rename: the one operation that locks two directories.
//!
//! Same-directory renames lock the directory, then the children by inode number.
//! Cross-directory renames first take the `rename` lock (as Linux's s_vfs_rename_mutex),
//! which freezes the shape of the directory tree, then lock the two directories ancestor
//! first: every other operation locks a parent before its child, so this order cannot
//! deadlock with them.

use super::Fs;
use crate::error::{Error, Result};
use crate::icache::IRef;
use crate::inode::{Inode, InodeState};
use crate::journal::Handle;
use crate::sync::RwLockWriteGuard;
use crate::types::*;

type Guard<'a> = RwLockWriteGuard<'a, InodeState>;

impl Fs {
    /// Rename `dir/name` to `newdir/newname`, replacing an existing target if it is
    /// compatible (a file over a file, a directory over an empty directory), in one
    /// transaction: after a crash, the name is in one place or the other.
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// let o = Owner::default();
    /// let d = fs.mkdir(ROOT_INO, b"d", 0o755, o)?;
    /// let f = fs.create(ROOT_INO, b"draft", 0o644, o)?;
    /// fs.release(f.ino)?;
    /// fs.rename(ROOT_INO, b"draft", d.ino, b"final")?;
    /// assert_eq!(fs.lookup(d.ino, b"final")?.ino, f.ino);
    /// assert_eq!(fs.lookup(ROOT_INO, b"draft"), Err(lanefs::Error::NotFound));
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn rename(&self, dir: Ino, name: &[u8], newdir: Ino, newname: &[u8]) -> Result<()> {
        self.rename_with(dir, name, newdir, newname, RenameMode::Replace)
    }

    /// Rename as renameat2(2) with `mode`: replace the target, refuse an existing one
    /// (`NoReplace`), or swap the two names (`Exchange`).
    ///
    /// ```
    /// # use lanefs::{mkfs, Fs, MemDevice, MountOptions, Owner, ROOT_INO};
    /// # let dev = std::sync::Arc::new(MemDevice::new(32 << 20));
    /// # mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// # let fs = Fs::mount(dev, MountOptions::default())?;
    /// use lanefs::{Error, RenameMode};
    /// let o = Owner::default();
    /// let a = fs.mkdir(ROOT_INO, b"a", 0o755, o)?;
    /// let b = fs.mkdir(ROOT_INO, b"b", 0o755, o)?;
    /// let r = fs.rename_with(ROOT_INO, b"a", ROOT_INO, b"b", RenameMode::NoReplace);
    /// assert_eq!(r, Err(Error::Exists));
    /// fs.rename_with(ROOT_INO, b"a", ROOT_INO, b"b", RenameMode::Exchange)?;
    /// assert_eq!(fs.lookup(ROOT_INO, b"b")?.ino, a.ino);
    /// assert_eq!(fs.lookup(ROOT_INO, b"a")?.ino, b.ino);
    /// # fs.unmount()?;
    /// # Ok::<(), lanefs::Error>(())
    /// ```
    pub fn rename_with(
        &self,
        dir: Ino,
        name: &[u8],
        newdir: Ino,
        newname: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        self.retry_nospace(|| self.rename_once(dir, name, newdir, newname, mode))
    }

    fn rename_once(
        &self,
        dir: Ino,
        name: &[u8],
        newdir: Ino,
        newname: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        self.check_rw()?;
        for n in [name, newname] {
            if n == b"." || n == b".." || n.is_empty() {
                return Err(Error::Invalid("rename of . or ..".into()));
            }
            if n.contains(&b'/') || n.contains(&0) {
                return Err(Error::Invalid("bad file name".into()));
            }
            if n.len() > 255 {
                return Err(Error::NameTooLong);
            }
        }
        let _cross = (dir != newdir).then(|| self.rename_lock.lock());
        // Under the rename lock no directory changes parent, so the ".." chains read here,
        // before any directory is locked, stay true while the directories are locked.
        let chains = if dir == newdir {
            None
        } else {
            Some((self.ancestors(dir)?, self.ancestors(newdir)?))
        };
        let od = self.iget(dir)?;
        let nd = self.iget(newdir)?;
        let (mut ost, mut nst) = match &chains {
            None => (self.lock_dir(&od)?, None),
            Some((up_old, _)) if up_old.contains(&newdir) => {
                let n = self.lock_dir(&nd)?;
                (self.lock_dir(&od)?, Some(n))
            }
            Some(_) => {
                let o = self.lock_dir(&od)?;
                (o, Some(self.lock_dir(&nd)?))
            }
        };
        self.rename_locked(
            &od,
            &mut ost,
            name,
            &nd,
            nst.as_mut(),
            newname,
            chains.as_ref(),
            mode,
        )
    }

    fn lock_dir<'a>(&self, d: &'a IRef) -> Result<Guard<'a>> {
        let mut st = d.state.write();
        self.load(d, &mut st)?;
        self.dir_guard(&st)?;
        Ok(st)
    }

    /// Directory `ino` and its ancestors up to the root (walking ".."; the caller holds the
    /// rename lock, which keeps the tree's shape still, and no inode lock).
    fn ancestors(&self, ino: Ino) -> Result<Vec<Ino>> {
        let mut out = vec![ino];
        let mut cur = ino;
        for _ in 0..65536 {
            if cur == ROOT_INO {
                return Ok(out);
            }
            let i = self.iget(cur)?;
            let st = self.read_loaded(&i)?;
            self.dir_guard(&st)?;
            cur = self.ctx().dotdot(cur, &st)?;
            out.push(cur);
        }
        Err(Error::corrupt("directory", ino, "loop in .. chain"))
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
        &self,
        od: &Inode,
        ost: &mut Guard<'_>,
        name: &[u8],
        nd: &Inode,
        mut nst: Option<&mut Guard<'_>>,
        newname: &[u8],
        chains: Option<&(Vec<Ino>, Vec<Ino>)>,
        mode: RenameMode,
    ) -> Result<()> {
        let (dir, newdir) = (od.ino, nd.ino);
        // Two directories: both locked, and their ".." chains read under the rename lock.
        debug_assert_eq!(
            nst.is_some(),
            dir != newdir,
            "second guard iff two directories"
        );
        debug_assert_eq!(
            chains.is_some(),
            dir != newdir,
            "chains iff two directories"
        );
        debug_assert!(chains.is_none_or(|(o, n)| o[0] == dir && n[0] == newdir));
        let ctx = self.ctx();
        let (sino, _) = ctx.lookup(dir, ost, name)?.ok_or(Error::NotFound)?;
        let target = {
            let tdir: &InodeState = nst.as_deref().map_or(&**ost, |g| &**g);
            ctx.lookup(newdir, tdir, newname)?.map(|t| t.0)
        };
        rename_refused(mode, sino, target, chains)?;
        if target == Some(sino) {
            return Ok(());
        }
        if mode == RenameMode::Exchange {
            let t = target.ok_or(Error::NotFound)?;
            return self.exchange_locked(od, ost, name, sino, nd, nst, newname, t);
        }
        let src = self.iget(sino)?;
        let tgt = target.map(|t| self.iget(t)).transpose()?;
        let (mut sst, mut tst) = lock_children(&src, tgt.as_ref());
        self.load(&src, &mut sst)?;
        let src_dir = FileType::from_mode(sst.d.mode()) == Some(FileType::Directory);
        {
            let ndst: &InodeState = nst.as_deref().map_or(&**ost, |g| &**g);
            flags_refuse(ost, ndst, &sst, tst.as_deref())?;
        }
        if let (Some(t), Some(ts)) = (&tgt, tst.as_mut()) {
            self.load(t, ts)?;
            self.check_replace(t.ino, ts, src_dir)?;
        } else if src_dir && dir != newdir {
            // A directory moving in gives the new parent one more link.
            if let Some(g) = nst.as_deref() {
                if self.dir_links_full(g) {
                    return Err(Error::TooManyLinks);
                }
            }
        }
        let h = self.journal.start();
        let ft = FileType::from_mode(sst.d.mode())
            .unwrap_or(FileType::Regular)
            .dirent_code();
        let t = self.now();
        let moved = Move {
            sino,
            ft,
            replace: target.is_some(),
            mode,
            t,
        };
        let new_st = nst.as_deref_mut().map(|g| &mut **g);
        self.move_name(&h, od, ost, name, newdir, new_st, newname, &moved)?;
        if src_dir {
            let new_st = nst.as_deref_mut().map(|g| &mut **g);
            self.move_dir_links(&h, &moved, &mut sst, ost, newdir, new_st)?;
        }
        self.store_parents(&h, t, od, ost, nd, nst)?;
        sst.d.set_ctime(t);
        self.store(&h, &src, &mut sst)?;
        let mut gone = false;
        if let (Some(ti), Some(ts)) = (&tgt, tst.as_mut()) {
            gone = self.unlink_replaced(&h, ti, ts, t)?;
        }
        drop(h);
        if let (true, Some(ti)) = (gone, &tgt) {
            self.icache.remove(ti.ino, ti);
        }
        Ok(())
    }

    /// Give inode `m.sino` (entry type `m.ft`) the name `newname` in directory `newdir`
    /// (state `nst`; `None`: the old directory), replacing the target's entry there when
    /// `m.replace`, and take away its old name, `name` in `od`: replaced by a whiteout
    /// (`RenameMode::Whiteout`) or removed. The whiteout is made first, so that running
    /// out of inodes changes nothing; a new name that cannot be linked takes it back.
    #[allow(clippy::too_many_arguments)]
    fn move_name(
        &self,
        h: &Handle,
        od: &Inode,
        ost: &mut InodeState,
        name: &[u8],
        newdir: Ino,
        nst: Option<&mut InodeState>,
        newname: &[u8],
        m: &Move,
    ) -> Result<()> {
        let (ctx, dir) = (self.ctx(), od.ino);
        let whiteout = match m.mode {
            RenameMode::Whiteout { owner, .. } => {
                let mode = FileType::CharDevice.mode_bits();
                Some(self.new_inode(h, od, ost, name, mode, 0, owner, None, m.t)?)
            }
            _ => None,
        };
        {
            let ndst: &mut InodeState = match nst {
                Some(g) => g,
                None => &mut *ost,
            };
            let linked = if m.replace {
                ctx.replace(h, newdir, ndst, newname, m.sino, m.ft)
                    .map(drop)
            } else {
                ctx.add(h, newdir, ndst, newname, m.sino, m.ft)
            };
            if let Err(e) = linked {
                if let Some((wino, mut wst, _)) = whiteout {
                    self.undo_new(h, wino, &mut wst, FileType::CharDevice);
                }
                return Err(e);
            }
        }
        match whiteout {
            Some((wino, mut wst, claim)) => {
                let code = FileType::CharDevice.dirent_code();
                ctx.replace(h, dir, ost, name, wino, code)?;
                self.store_new(h, wino, &mut wst)?;
                claim.finish(crate::inode::inode_from_state(wino, wst));
            }
            None => {
                ctx.remove(h, dir, ost, name)?;
            }
        }
        Ok(())
    }

    /// The parents' links after directory `m.sino` (state `sst`) got its new name. Moved
    /// to another parent (`nst`, as `newdir`): its ".." names the new parent, the old
    /// parent loses a link and the new one gains one, unless the directory replaced one
    /// there. Replacing a directory in the same parent: one subdirectory fewer.
    fn move_dir_links(
        &self,
        h: &Handle,
        m: &Move,
        sst: &mut InodeState,
        ost: &mut InodeState,
        newdir: Ino,
        nst: Option<&mut InodeState>,
    ) -> Result<()> {
        // Only a directory's ".." and its parents' link counts move with it.
        debug_assert_eq!(
            FileType::from_mode(sst.d.mode()),
            Some(FileType::Directory),
            "inode {}: links moved for a non-directory",
            m.sino
        );
        match nst {
            Some(g) => {
                self.ctx().set_dotdot(h, m.sino, sst, newdir)?;
                super::ops::links::dec(&mut ost.d);
                if !m.replace {
                    super::ops::links::inc(&mut g.d);
                }
            }
            None if m.replace => super::ops::links::dec(&mut ost.d),
            None => {}
        }
        Ok(())
    }

    /// The target a rename replaced (`ti`, state `ts`) loses its name at `t`: its last
    /// one for a directory, one of its links otherwise. Returns whether it was freed (the
    /// caller drops it from the cache once the handle is closed).
    fn unlink_replaced(
        &self,
        h: &Handle,
        ti: &Inode,
        ts: &mut InodeState,
        t: Timespec,
    ) -> Result<bool> {
        let l = if FileType::from_mode(ts.d.mode()) == Some(FileType::Directory) {
            0
        } else {
            ts.d.links().saturating_sub(1)
        };
        ts.d.set_links(l);
        ts.d.set_ctime(t);
        self.drop_link(h, ti, ts)
    }

    /// RENAME_EXCHANGE: `name` in `dir` (inode `sino`) and `newname` in `newdir` (inode
    /// `tino`) swap. Directories moving between parents get a new `..`, and each parent's
    /// link count follows the subdirectories it gains or loses (ext4_cross_rename).
    #[allow(clippy::too_many_arguments)]
    fn exchange_locked(
        &self,
        od: &Inode,
        ost: &mut Guard<'_>,
        name: &[u8],
        sino: Ino,
        nd: &Inode,
        mut nst: Option<&mut Guard<'_>>,
        newname: &[u8],
        tino: Ino,
    ) -> Result<()> {
        let (dir, newdir) = (od.ino, nd.ino);
        use super::ops::flags::pinned;
        let ctx = self.ctx();
        let src = self.iget(sino)?;
        let tgt = self.iget(tino)?;
        let (mut sst, mut tst) = if tino < sino {
            let tg = tgt.state.write();
            (src.state.write(), tg)
        } else {
            let sg = src.state.write();
            (sg, tgt.state.write())
        };
        self.load(&src, &mut sst)?;
        self.load(&tgt, &mut tst)?;
        let is_dir =
            |st: &InodeState| FileType::from_mode(st.d.mode()) == Some(FileType::Directory);
        let (s_dir, t_dir) = (is_dir(&sst), is_dir(&tst));
        {
            let ndst: &InodeState = nst.as_deref().map_or(&**ost, |g| &**g);
            if pinned(ost) || pinned(ndst) || pinned(&sst) || pinned(&tst) {
                return Err(Error::NotPermitted);
            }
        }
        let cross = dir != newdir;
        if cross && s_dir != t_dir {
            // The parent that receives the directory gains a link.
            let gains: &InodeState = if s_dir {
                nst.as_deref().map_or(&**ost, |g| &**g)
            } else {
                ost
            };
            if self.dir_links_full(gains) {
                return Err(Error::TooManyLinks);
            }
        }
        let code = |st: &InodeState| {
            FileType::from_mode(st.d.mode())
                .unwrap_or(FileType::Regular)
                .dirent_code()
        };
        let h = self.journal.start();
        {
            let ndst: &mut InodeState = match nst.as_deref_mut() {
                Some(g) => g,
                None => ost,
            };
            ctx.replace(&h, newdir, ndst, newname, sino, code(&sst))?;
        }
        ctx.replace(&h, dir, ost, name, tino, code(&tst))?;
        if cross {
            if s_dir {
                ctx.set_dotdot(&h, sino, &mut sst, newdir)?;
            }
            if t_dir {
                ctx.set_dotdot(&h, tino, &mut tst, dir)?;
            }
            if let Some(g) = nst.as_deref_mut() {
                match (s_dir, t_dir) {
                    (true, false) => {
                        super::ops::links::dec(&mut ost.d);
                        super::ops::links::inc(&mut g.d);
                    }
                    (false, true) => {
                        super::ops::links::inc(&mut ost.d);
                        super::ops::links::dec(&mut g.d);
                    }
                    _ => {}
                }
            }
        }
        let t = self.now();
        self.store_parents(&h, t, od, ost, nd, nst)?;
        sst.d.set_ctime(t);
        tst.d.set_ctime(t);
        self.store(&h, &src, &mut sst)?;
        self.store(&h, &tgt, &mut tst)
    }

    /// Both parents of a rename changed at `t`: mtime and ctime, then stored.
    fn store_parents(
        &self,
        h: &Handle,
        t: Timespec,
        od: &Inode,
        ost: &mut InodeState,
        nd: &Inode,
        nst: Option<&mut Guard<'_>>,
    ) -> Result<()> {
        ost.d.set_mtime(t);
        ost.d.set_ctime(t);
        self.store(h, od, ost)?;
        if let Some(n) = nst {
            n.d.set_mtime(t);
            n.d.set_ctime(t);
            self.store(h, nd, n)?;
        }
        Ok(())
    }

    fn check_replace(&self, tino: Ino, ts: &InodeState, src_dir: bool) -> Result<()> {
        let tgt_dir = FileType::from_mode(ts.d.mode()) == Some(FileType::Directory);
        match (src_dir, tgt_dir) {
            (true, false) => Err(Error::NotDir),
            (false, true) => Err(Error::IsDir),
            (true, true) if !self.ctx().is_empty(tino, ts)? => Err(Error::NotEmpty),
            _ => Ok(()),
        }
    }
}

/// What a rename moves: inode `sino` under entry type `ft`, over a target's entry when
/// `replace`, in `mode`, at time `t`.
struct Move {
    sino: Ino,
    ft: u8,
    replace: bool,
    mode: RenameMode,
    t: Timespec,
}

/// Whether `mode` refuses the rename of `sino` onto `target` (the inode the new name
/// holds, if any): an existing target under `NoReplace` (or a whiteout's `noreplace`), a
/// missing one under `Exchange`. With two directories (`chains`: the old and the new
/// parent's ".." chains), as Linux: the source must not be the new parent or above it
/// (EINVAL), the target not the old parent or above it (ENOTEMPTY; EINVAL for an
/// exchange, which would move it below itself). Checked before the children are locked:
/// the source may be the locked new parent itself.
fn rename_refused(
    mode: RenameMode,
    sino: Ino,
    target: Option<Ino>,
    chains: Option<&(Vec<Ino>, Vec<Ino>)>,
) -> Result<()> {
    match (mode, target) {
        (RenameMode::NoReplace, Some(_)) => return Err(Error::Exists),
        (
            RenameMode::Whiteout {
                noreplace: true, ..
            },
            Some(_),
        ) => return Err(Error::Exists),
        (RenameMode::Exchange, None) => return Err(Error::NotFound),
        _ => {}
    }
    if let Some((up_old, up_new)) = chains {
        if up_new.contains(&sino) {
            return Err(Error::Invalid("cannot move a directory into itself".into()));
        }
        if target.is_some_and(|t| up_old.contains(&t)) {
            return Err(match mode {
                RenameMode::Exchange => {
                    Error::Invalid("cannot move a directory into itself".into())
                }
                _ => Error::NotEmpty,
            });
        }
    }
    Ok(())
}

/// Lock the source `src` and the target `tgt` (another inode), in inode-number order.
fn lock_children<'a>(src: &'a IRef, tgt: Option<&'a IRef>) -> (Guard<'a>, Option<Guard<'a>>) {
    // One inode locked twice would deadlock: the caller returns first when the target
    // is the source.
    debug_assert!(
        tgt.is_none_or(|t| t.ino != src.ino),
        "inode {} is both source and target",
        src.ino
    );
    match tgt {
        Some(t) if t.ino < src.ino => {
            let tg = t.state.write();
            (src.state.write(), Some(tg))
        }
        Some(t) => {
            let sg = src.state.write();
            (sg, Some(t.state.write()))
        }
        None => (src.state.write(), None),
    }
}

/// As Linux's may_delete (the source `sst`, a replaced target `tst`) and may_create (a
/// new name in `ndst`), before the type checks: chattr +i / +a flags refuse the rename
/// (`ost`: the old parent).
fn flags_refuse(
    ost: &InodeState,
    ndst: &InodeState,
    sst: &InodeState,
    tst: Option<&InodeState>,
) -> Result<()> {
    use super::ops::flags::{immutable, pinned};
    let refused = pinned(ost)
        || pinned(sst)
        || match tst {
            Some(ts) => pinned(ndst) || pinned(ts),
            None => immutable(ndst),
        };
    if refused {
        return Err(Error::NotPermitted);
    }
    Ok(())
}
