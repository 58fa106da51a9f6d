//! Attribute changes (SETATTR) and the set-user-ID and set-group-ID rules the daemon
//! applies under FUSE_HANDLE_KILLPRIV_V2: what a chown, a write, a truncate or an ACL
//! clears, for whom, as the VFS does for ext4.

use super::*;

impl LaneFuse {
    /// SETATTR's change `set` of `i` by the caller of `req`; `now` says whether the
    /// access and modification times given are "now" (utime(NULL), which an append-only
    /// file allows when nothing else changes). Under FUSE_HANDLE_KILLPRIV_V2 the kernel
    /// leaves the set-user-ID and set-group-ID bits to the daemon: a chown clears them
    /// as notify_change would have, and a truncate, or a SETATTR that says nothing else
    /// (the kernel's file_remove_privs before a copy_file_range or fallocate), clears
    /// them for a caller without CAP_FSETID as a write does.
    pub(super) fn set_attributes(
        &self,
        req: &Request,
        i: Ino,
        mut set: SetAttr,
        now: (bool, bool),
    ) -> lanefs::Result<Attr> {
        let only_times =
            set.perm.is_none() && set.uid.is_none() && set.gid.is_none() && set.size.is_none();
        let (atime, mtime) = (set.atime.is_some(), set.mtime.is_some());
        if only_times && (now.0 || now.1) && (!atime || now.0) && (!mtime || now.1) {
            return self.fs.set_times_now(i, atime, mtime);
        }
        if set.uid.is_some() || set.gid.is_some() {
            self.chown_kills(req, i, &mut set)?;
        } else if set == SetAttr::default() {
            self.kill_privs(req, i, false)?;
        } else if set.size.is_some() {
            // In the same change as the size, so a truncate that fails clears nothing.
            let a = self.fs.getattr(i)?;
            let perm = set.perm.unwrap_or(a.perm);
            if let Some(p) = self.privs_cleared(req, &a, perm, false) {
                set.perm = Some(p);
            }
        }
        if set == SetAttr::default() {
            return self.fs.getattr(i);
        }
        self.fs.setattr(i, &set)
    }

    /// After an access ACL is set: clear the set-group-ID bit unless the caller is in
    /// the file's group or is root (posix_acl_update_mode). The kernel asks this of the
    /// daemon with FUSE_SETXATTR_ACL_KILL_SGID, which needs FUSE_SETXATTR_EXT, a flag
    /// fuser cannot negotiate; so the daemon decides from the caller's groups.
    pub(super) fn acl_kill_sgid(&self, req: &Request, ino: Ino) -> lanefs::Result<()> {
        let a = self.fs.getattr(ino)?;
        if a.perm & 0o2000 == 0 || caller_uid(req) == 0 || in_group(req, a.gid) {
            return Ok(());
        }
        let set = SetAttr {
            perm: Some(a.perm & !0o2000),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set).map(|_| ())
    }

    /// The mode `a` (with permission bits `perm`) keeps after the caller of `req` changes
    /// its data (a write, truncate or fallocate), when that clears anything: set-user-ID,
    /// and set-group-ID where the file is group-executable or the caller is not in its
    /// group, as Linux's `file_remove_privs` does for ext4 (`setattr_should_drop_suidgid`),
    /// for a caller without CAP_FSETID. That is a caller other than root, or any caller
    /// when the kernel said so (`lacks_fsetid`: a WRITE flagged FUSE_WRITE_KILL_SUIDGID).
    pub(super) fn privs_cleared(
        &self,
        req: &Request,
        a: &Attr,
        perm: u16,
        lacks_fsetid: bool,
    ) -> Option<u16> {
        if a.kind != FileType::Regular || perm & 0o6000 == 0 {
            return None;
        }
        if !lacks_fsetid && caller_uid(req) == 0 {
            return None;
        }
        let mut kept = perm & !0o4000;
        if perm & 0o2010 == 0o2010 || (perm & 0o2000 != 0 && !in_group(req, a.gid)) {
            kept &= !0o2000;
        }
        (kept != perm).then_some(kept)
    }

    /// After a change of `ino`'s data (a write, fallocate, a bare SETATTR): clear what
    /// [`Self::privs_cleared`] says. Under FUSE_HANDLE_KILLPRIV_V2 the kernel leaves this
    /// to the daemon (and sends nothing for fallocate), so the daemon applies ext4's rule,
    /// from the caller's groups.
    pub(super) fn kill_privs(
        &self,
        req: &Request,
        ino: Ino,
        lacks_fsetid: bool,
    ) -> lanefs::Result<()> {
        let a = self.fs.getattr(ino)?;
        let Some(perm) = self.privs_cleared(req, &a, a.perm, lacks_fsetid) else {
            return Ok(());
        };
        let set = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.fs.setattr(ino, &set)?;
        // The kernel still holds the mode it had before the request.
        self.attributes_changed(ino);
        Ok(())
    }

    /// A chown (`set` has a uid or gid) of a non-directory clears set-user-ID, and
    /// set-group-ID where the file is group-executable or the caller is neither in the
    /// file's group nor root, as the VFS does for ext4 (chown_common's ATTR_KILL_SUID and
    /// setattr_should_drop_sgid); under FUSE_HANDLE_KILLPRIV_V2 that is the daemon's to
    /// do. Whatever mode `set` already carries is the one cleared.
    pub(super) fn chown_kills(
        &self,
        req: &Request,
        ino: Ino,
        set: &mut SetAttr,
    ) -> lanefs::Result<()> {
        let a = self.fs.getattr(ino)?;
        let perm = set.perm.unwrap_or(a.perm);
        if a.kind == FileType::Directory || perm & 0o6000 == 0 {
            return Ok(());
        }
        let mut kept = perm & !0o4000;
        let outside = caller_uid(req) != 0 && !in_group(req, a.gid);
        if perm & 0o2010 == 0o2010 || (perm & 0o2000 != 0 && outside) {
            kept &= !0o2000;
        }
        if kept != perm {
            set.perm = Some(kept);
        }
        Ok(())
    }
}
