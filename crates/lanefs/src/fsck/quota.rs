//! Quota usage, as e2fsck's `quota_compare_and_update`: with the `quota` feature, the
//! space and inodes pass 1 charges to each user, group and project, against what each
//! quota file records (`disk::quota`).
//!
//! An inode is charged as e2fsck charges it: the root and every inode from the first
//! non-reserved one, except value inodes (EA_INODE) and the project quota and orphan
//! files (special here); its counted blocks (data, tree and xattr blocks, and the blocks
//! its xattr value inodes hold) in bytes, and itself plus one per value inode it names.

use super::*;
use crate::disk::quota;

/// Quota files larger than this are reported, not read (64 MiB holds about 900,000 ids).
const MAX_QUOTA_FILE: u64 = 64 << 20;
/// Mismatched ids reported per quota type before the rest are only counted.
const MAX_REPORTED: usize = 16;
const TYPES: [&str; 3] = ["user", "group", "project"];

#[derive(Default)]
pub(super) struct QuotaFsck {
    /// Bytes and inodes counted per id, per type (user, group, project).
    counted: [HashMap<u32, (u64, u64)>; 3],
    /// Each quota file found in pass 1: its type, inode, size and block map.
    files: Vec<(usize, u32, u64, Vec<Run>)>,
    /// Value inode references charged so far (pass 1 reads the difference per inode).
    pub(super) ea_inodes: u64,
}

impl Checker<'_> {
    /// The quota file inode of each type the image tracks (0: not tracked).
    fn quota_inums(&self) -> [u32; 3] {
        if !self.sb.has_ro_compat(ro_compat::QUOTA) {
            return [0; 3];
        }
        [
            self.sb.usr_quota_inum(),
            self.sb.grp_quota_inum(),
            self.sb.prj_quota_inum(),
        ]
    }

    /// Charge an in-use inode's `blocks` (file system blocks) and `inodes` to its ids.
    pub(super) fn charge_quota(&mut self, ino: u32, inode: &DiskInode, blocks: u64, inodes: u64) {
        let inums = self.quota_inums();
        if inums == [0; 3]
            || (ino != ROOT_INO && ino < self.geo.first_ino)
            || inode.flags() & FL_EA_INODE != 0
        {
            return;
        }
        let space = blocks.saturating_mul(self.geo.block_bytes());
        let ids = [inode.uid(), inode.gid(), inode.projid()];
        for t in 0..3 {
            if inums[t] != 0 {
                let e = self.quota.counted[t].entry(ids[t]).or_insert((0, 0));
                e.0 = e.0.saturating_add(space);
                e.1 = e.1.saturating_add(inodes);
            }
        }
    }

    /// Whether special inode `ino` is a quota file; keeps its map for the comparison.
    pub(super) fn is_quota_file(&self, ino: u32) -> bool {
        self.quota_inums().contains(&ino)
    }

    pub(super) fn keep_quota_file(&mut self, ino: u32, inode: &DiskInode, runs: &[Run]) {
        let inums = self.quota_inums();
        for t in (0..3).filter(|&t| inums[t] == ino) {
            self.quota.files.push((t, ino, inode.size(), runs.to_vec()));
        }
    }

    /// Compare each quota file with the usage pass 1 counted.
    pub(super) fn pass_quota(&mut self) -> Result<()> {
        let files = std::mem::take(&mut self.quota.files);
        let inums = self.quota_inums();
        for (t, &ino) in inums.iter().enumerate() {
            if ino != 0 && !files.iter().any(|f| f.0 == t) {
                let msg = format!("{} quota file inode {ino} is not a quota file", TYPES[t]);
                self.out.add("QUOTA_FILE_BAD", msg);
            }
        }
        for (t, ino, size, runs) in files {
            let at = format!("{} quota file (inode {ino})", TYPES[t]);
            if size > MAX_QUOTA_FILE {
                let msg = format!("{at}: {size} bytes, more than lanefs reads");
                self.out.add("QUOTA_FILE_BAD", msg);
                continue;
            }
            let bytes = self.read_file(size, &runs)?;
            match quota::decode(&bytes, t) {
                Err(why) => self.out.add("QUOTA_FILE_BAD", format!("{at}: {why}")),
                Ok(recorded) => self.compare_quota(t, &at, &recorded),
            }
        }
        Ok(())
    }

    fn compare_quota(&mut self, t: usize, at: &str, recorded: &[quota::Usage]) {
        debug_assert!(t < TYPES.len(), "quota type {t}");
        let counted = std::mem::take(&mut self.quota.counted[t]);
        let mut seen = HashSet::new();
        let mut bad = Vec::new();
        for u in recorded {
            seen.insert(u.id);
            let (space, inodes) = counted.get(&u.id).copied().unwrap_or((0, 0));
            if (space, inodes) != (u.space, u.inodes) {
                bad.push(format!(
                    "id {}: counted {space} bytes and {inodes} inodes, the file records {} and {}",
                    u.id, u.space, u.inodes
                ));
            }
        }
        let mut missing: Vec<_> = counted.keys().filter(|id| !seen.contains(id)).collect();
        missing.sort();
        for id in missing {
            let (space, inodes) = counted[id];
            bad.push(format!(
                "id {id}: counted {space} bytes and {inodes} inodes, the file has no entry"
            ));
        }
        let n = bad.len();
        for msg in bad.into_iter().take(MAX_REPORTED) {
            self.out.add("QUOTA_USAGE", format!("{at}: {msg}"));
        }
        if n > MAX_REPORTED {
            let msg = format!("{at}: {} more ids differ", n - MAX_REPORTED);
            self.out.add("QUOTA_USAGE", msg);
        }
    }

    /// A small file's bytes (`size` at most MAX_QUOTA_FILE), holes as zeros.
    fn read_file(&self, size: u64, runs: &[Run]) -> Result<Vec<u8>> {
        // Bounded by pass_quota; the runs are the walk's, each range-checked.
        debug_assert!(size <= MAX_QUOTA_FILE, "quota file of {size} bytes");
        debug_assert!(
            runs.iter().all(|r| self.geo.in_fs(r.pblk, r.len)),
            "quota file runs outside the file system"
        );
        let bs = self.geo.block_bytes();
        let mut out = vec![0u8; size as usize];
        for r in runs {
            for i in 0..r.len {
                let off = (r.lblk + i).saturating_mul(bs);
                if off >= size {
                    break;
                }
                let b = self.read_block(r.pblk + i)?;
                let n = (size - off).min(bs) as usize;
                out[off as usize..off as usize + n].copy_from_slice(&b[..n]);
            }
        }
        Ok(out)
    }
}
