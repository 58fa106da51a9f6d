//! Block ownership: every block claimed once, and a log to name both owners of a block claimed twice (e2fsck pass 1B).

use super::*;

/// Who claims a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    Super(u32),
    Gdt(u32),
    ReservedGdt(u32),
    BlockBitmap(u32),
    InodeBitmap(u32),
    InodeTable(u32),
    Mmp,
    Inode(u32),
    Xattr(u32),
}

impl Owner {
    pub(super) fn is_meta(self) -> bool {
        !matches!(self, Owner::Inode(_) | Owner::Xattr(_))
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Super(g) => write!(f, "superblock of group {g}"),
            Owner::Gdt(g) => write!(f, "group descriptors in group {g}"),
            Owner::ReservedGdt(g) => write!(f, "reserved GDT blocks of group {g}"),
            Owner::BlockBitmap(g) => write!(f, "block bitmap of group {g}"),
            Owner::InodeBitmap(g) => write!(f, "inode bitmap of group {g}"),
            Owner::InodeTable(g) => write!(f, "inode table of group {g}"),
            Owner::Mmp => write!(f, "MMP block"),
            Owner::Inode(i) => write!(f, "inode {i}"),
            Owner::Xattr(i) => write!(f, "xattr block of inode {i}"),
        }
    }
}

/// A bitmap of every block in the file system plus a log of who claimed what, so blocks
/// claimed twice can be traced back to both owners afterwards (like e2fsck pass 1B).
pub(super) struct Claims {
    pub(super) bits: Vec<u64>,
    pub(super) log: Vec<(u64, u64, Owner)>,
    pub(super) dups: Vec<usize>,
    pub(super) max_len: u64,
}

impl Claims {
    pub(super) fn new(blocks: u64) -> Claims {
        Claims {
            bits: vec![0; blocks.div_ceil(64) as usize],
            log: Vec::new(),
            dups: Vec::new(),
            max_len: 0,
        }
    }

    /// Mark `[start, start+len)` (inside the fs) used by `owner`; returns how many of those
    /// blocks were already claimed.
    pub(super) fn claim(&mut self, start: u64, len: u64, owner: Owner) -> u64 {
        let end = start.saturating_add(len);
        let mut b = start;
        let mut conflicts = 0u64;
        while b < end {
            let bit = b % 64;
            let n = (64 - bit).min(end - b);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(w) = self.bits.get_mut((b / 64) as usize) {
                conflicts += u64::from((*w & mask).count_ones());
                *w |= mask;
            }
            b += n;
        }
        debug_assert!(
            conflicts <= len,
            "{conflicts} conflicts in a claim of {len}"
        );
        self.max_len = self.max_len.max(len);
        if conflicts > 0 {
            self.dups.push(self.log.len());
        }
        self.log.push((start, len, owner));
        conflicts
    }

    pub(super) fn is_used(&self, b: u64) -> bool {
        self.bits
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    pub(super) fn count(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// For every owner whose claims hit already-claimed blocks: what it shares and with
    /// whom (like e2fsck pass 1B). Bounded in steps and in owners listed; the flag says
    /// whether the step budget ran out.
    pub(super) fn resolve(&self) -> (Vec<(Owner, Shared)>, bool) {
        let mut order: Vec<usize> = (0..self.log.len()).collect();
        order.sort_by_key(|&i| self.log[i].0);
        let starts: Vec<u64> = order.iter().map(|&i| self.log[i].0).collect();
        let mut by_owner: HashMap<Owner, Shared> = HashMap::new();
        let mut steps = 0u64;
        for &d in self.dups.iter().take(MAX_DUP_CLAIMS) {
            let (ds, dl, downer) = self.log[d];
            let de = ds + dl;
            let lo = starts.partition_point(|&s| s + self.max_len <= ds);
            for &i in order[lo..].iter().take_while(|&&i| self.log[i].0 < de) {
                steps += 1;
                if steps > MAX_RESOLVE_STEPS {
                    return (Self::sorted(by_owner), true);
                }
                let (s, l, owner) = self.log[i];
                let (a, b) = (s.max(ds), (s + l).min(de));
                if i >= d || a >= b {
                    continue;
                }
                by_owner
                    .entry(downer)
                    .or_insert_with(|| Shared::at(a))
                    .add(owner, a, b - a);
            }
        }
        (Self::sorted(by_owner), false)
    }

    pub(super) fn sorted(m: HashMap<Owner, Shared>) -> Vec<(Owner, Shared)> {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|(o, _)| *o);
        v
    }
}

/// Blocks one owner shares with earlier claimants.
pub(super) struct Shared {
    pub(super) first: u64,
    pub(super) blocks: u64,
    pub(super) others: Vec<Owner>,
    pub(super) more: u64,
}

impl Shared {
    pub(super) fn at(first: u64) -> Shared {
        Shared {
            first,
            blocks: 0,
            others: Vec::new(),
            more: 0,
        }
    }
    pub(super) fn add(&mut self, owner: Owner, first: u64, n: u64) {
        debug_assert!(n >= 1, "an empty overlap with {owner}");
        self.first = self.first.min(first);
        self.blocks += n;
        if !self.others.contains(&owner) {
            if self.others.len() < MAX_OWNERS_LISTED {
                self.others.push(owner);
            } else {
                self.more += 1;
            }
        }
    }
}
