//! Passes 3 and 4: connectivity from the root and reference counts.

use super::*;

impl Checker<'_> {
    pub(super) fn pass_connectivity(&mut self) {
        if self.kind[ROOT_INO as usize] != FT_DIR {
            return;
        }
        if let Some(&dd) = self.dotdot.get(&ROOT_INO) {
            if dd != ROOT_INO {
                self.out.add(
                    "DIR_BAD_DOTDOT",
                    format!("root directory: '..' is {dd}, should be 2"),
                );
            }
        }
        // 0 unknown, 1 on the current path, 2 connected to the root, 3 disconnected.
        let mut color: HashMap<u32, u8> = HashMap::from([(ROOT_INO, 2)]);
        let dirs: Vec<u32> = self.dirs.iter().map(|d| d.ino).collect();
        for &d in &dirs {
            self.resolve_dir(d, &mut color);
        }
        debug_assert!(
            dirs.iter().all(|d| matches!(color.get(d), Some(2 | 3))),
            "a directory left unresolved"
        );
        for &d in &dirs {
            let (Some(&p), Some(&dd)) = (self.parent.get(&d), self.dotdot.get(&d)) else {
                continue;
            };
            if d != ROOT_INO && p != dd {
                self.out.add(
                    "DIR_BAD_DOTDOT",
                    format!("directory inode {d}: '..' is {dd}, but it is linked from {p}"),
                );
            }
        }
    }

    /// Follow parents from `d` until a directory of known state; each directory is walked
    /// once overall, so the pass is linear and loops are found.
    pub(super) fn resolve_dir(&mut self, d: u32, color: &mut HashMap<u32, u8>) {
        let mut path = Vec::new();
        let mut cur = d;
        let verdict = loop {
            match color.get(&cur).copied().unwrap_or(0) {
                2 => break 2,
                3 => break 3,
                1 => {
                    self.out.add("DIR_LOOP", format!("directory inode {cur} is part of a directory loop unreachable from the root"));
                    break 3;
                }
                _ => {}
            }
            color.insert(cur, 1);
            path.push(cur);
            // Each directory joins the path once (colour 1 stops a second visit).
            debug_assert!(path.len() <= self.dirs.len() + 1, "parent walk unbounded");
            match self.parent.get(&cur) {
                Some(&p) => cur = p,
                None => {
                    self.out.add(
                        "UNATTACHED_INODE",
                        format!("directory inode {cur} is not reachable from the root"),
                    );
                    break 3;
                }
            }
        };
        for p in path {
            color.insert(p, verdict);
        }
    }

    pub(super) fn pass_links(&mut self) {
        let dir_nlink = self.sb.has_ro_compat(ro_compat::DIR_NLINK);
        let indexed: HashSet<u32> = self
            .dirs
            .iter()
            .filter(|d| d.indexed)
            .map(|d| d.ino)
            .collect();
        debug_assert!(
            self.links.len() == self.kind.len() && self.refs.len() == self.kind.len(),
            "per-inode tables of different sizes"
        );
        for ino in 1..self.kind.len() {
            let kind = self.kind[ino];
            if !(FT_REG..=FT_LNK).contains(&kind)
                || (ino < self.geo.first_ino as usize && ino != ROOT_INO as usize)
            {
                continue;
            }
            let (links, mut counted) = (u32::from(self.links[ino]), u32::from(self.refs[ino]));
            if let Some(&(stored, legacy)) = self.ea_inodes.get(&(ino as u32)) {
                // A value inode referenced from xattr entries counts as linked once
                // (e2fsck's check_ea_inode); its reference count must match them, unless
                // it is an old Lustre-style one, which keeps none.
                if let Some(&actual) = self.ea_counts.get(&(ino as u32)) {
                    counted = 1;
                    if stored != actual && !legacy {
                        let msg = format!(
                            "xattr value inode {ino}: reference count {stored}, referenced {actual} times"
                        );
                        self.out.add("XATTR_EA_INODE_REFCOUNT", msg);
                    }
                }
            }
            if counted == 0 {
                if kind != FT_DIR {
                    self.out.add(
                        "UNATTACHED_INODE",
                        format!(
                            "inode {ino} ({}, links {links}) is not in any directory",
                            ft_name(kind)
                        ),
                    );
                }
                continue;
            }
            if kind == FT_DIR && counted > LINK_MAX && dir_nlink {
                counted = 1;
            }
            // An indexed directory that went past the limit and came back keeps count 1:
            // Linux never raises it again, and e2fsck lets it be ("previously exceeded").
            let was_many =
                kind == FT_DIR && links == 1 && counted > 1 && indexed.contains(&(ino as u32));
            if counted != links && !was_many {
                self.out.add(
                    "LINK_COUNT",
                    format!(
                        "inode {ino} ({}): i_links_count is {links}, counted {counted}",
                        ft_name(kind)
                    ),
                );
            }
        }
    }
}
