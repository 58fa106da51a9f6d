//! FALLOCATE: ext4's fallocate modes through FUSE (keep size, punch, zero range, and
//! collapse and insert range for a kernel that sends them), with the set-ID bits cleared
//! after, as a write clears them.

use super::*;

impl LaneFuse {
    /// fallocate(2) of `len` bytes at `offset` of `i` with `mode`, by the caller of `req`.
    pub(super) fn allocate_space(
        &self,
        req: &Request,
        i: Ino,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> lanefs::Result<()> {
        let unsupported = |why: &str| Err(Error::NotSupported(format!("fallocate: {why}")));
        // Collapse and insert range: modes of their own, with no other flag beside them
        // (vfs_fallocate: EOPNOTSUPP). Linux's fuse_file_fallocate (6.18 and before)
        // refuses both with EOPNOTSUPP without asking the daemon, so `xfs_io -c fcollapse`
        // on a mount fails in the kernel; a kernel or client that sends them gets ext4's
        // behaviour here. The data from `offset` on moved and the size changed: the
        // kernel's cached pages from there and its attributes are dropped (its dirty pages
        // must reach the daemon before the request, as fuse_file_fallocate writes a
        // punched range back first).
        let shift = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
        if mode & shift != 0 {
            match mode {
                libc::FALLOC_FL_COLLAPSE_RANGE => self.fs.collapse_range(i, offset, length)?,
                libc::FALLOC_FL_INSERT_RANGE => self.fs.insert_range(i, offset, length)?,
                _ => return unsupported("collapse or insert range with another flag"),
            }
            if let Some(n) = self.notifier.get() {
                // Below s_maxbytes, or the engine refused it.
                let from = i64::try_from(offset).unwrap_or(0);
                let _ = n.inval_inode(INodeNo(to_node(i)), from, 0);
            }
            return self.kill_privs(req, i, false);
        }
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 {
            return unsupported("unknown mode");
        }
        let m = FallocMode {
            keep_size: mode & libc::FALLOC_FL_KEEP_SIZE != 0,
            punch_hole: mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
            zero_range: mode & libc::FALLOC_FL_ZERO_RANGE != 0,
        };
        if m.punch_hole && !m.keep_size {
            // As fallocate(2): punching must keep the size.
            return unsupported("punch hole without keep size");
        }
        self.fs.fallocate(i, m, offset, length)?;
        self.kill_privs(req, i, false)
    }
}
