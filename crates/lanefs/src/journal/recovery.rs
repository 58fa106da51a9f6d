//! Journal recovery, in jbd2's three passes: scan the log from its start for complete
//! transactions (a descriptor, revoke or commit block with a bad checksum, a wrong
//! sequence or a missing magic ends it: a torn tail is simply not replayed), collect the
//! revoke records, then compute the newest logged copy of every home block that no
//! later-or-equal revoke cancels. The caller writes the result home (or, on a read-only
//! mount, keeps it in memory).

use super::log::LogArea;
use crate::dev::BlockDevice;
use crate::disk::jbd2::{self, JournalSuper, Tag};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};

/// A complete transaction found in the log.
struct Found {
    tid: u32,
    /// (home block, log position, tag).
    blocks: Vec<(u64, u32, Tag)>,
}

/// What recovery found and what must be written home.
pub struct Replay {
    /// Home block -> contents, newest committed copy.
    pub blocks: BTreeMap<u64, Vec<u8>>,
    /// Complete transactions found.
    pub transactions: u32,
    /// The first transaction id not in the log (the next expected).
    pub end_tid: u32,
    /// Revoke records seen.
    pub revokes: usize,
}

/// Scan, revoke and build the replay set of the log described by `area`.
pub fn recover(area: &LogArea, dev: &dyn BlockDevice, fs_blocks: u64) -> Result<Replay> {
    let js = &area.js;
    check_replayable(js)?;
    let scan = scan(area, dev, fs_blocks)?;
    let blocks = replay_set(area, dev, fs_blocks, &scan)?;
    Ok(Replay {
        blocks,
        transactions: scan.found.len() as u32,
        end_tid: scan.next,
        revokes: scan.revoked.len(),
    })
}

/// Refuse a log that needs recovery in a form lanefs does not replay: fast commits, or
/// incompat features it does not know.
fn check_replayable(js: &JournalSuper) -> Result<()> {
    if js.incompat() & !jbd2::INCOMPAT_KNOWN != 0 {
        let f = js.incompat() & !jbd2::INCOMPAT_KNOWN;
        let what = if f & jbd2::INCOMPAT_FAST_COMMIT != 0 {
            "fast commits".to_string()
        } else {
            format!("unknown incompat features {f:#x}")
        };
        return Err(Error::Unsupported(format!(
            "the journal needs recovery and uses {what}: replay it with e2fsck first"
        )));
    }
    Ok(())
}

/// What the scan pass found: the complete transactions in log order, the newest
/// transaction revoking each block, and the first transaction id not in the log.
struct Scan {
    found: Vec<Found>,
    revoked: HashMap<u64, u32>,
    next: u32,
}

/// Passes one and two: walk the log from its start while blocks carry the expected
/// sequence and good checksums, keeping each transaction that reaches its commit block
/// and its revoke records (only blocks of the file system, `fs_blocks`). A transaction
/// without its commit block (a torn tail) is dropped with its revokes.
fn scan(area: &LogArea, dev: &dyn BlockDevice, fs_blocks: u64) -> Result<Scan> {
    let js = &area.js;
    let seed = js.csum_seed();
    let csum = js.csum();
    let mut next = js.sequence();
    let mut pos = js.start();
    let mut found: Vec<Found> = Vec::new();
    let mut revoked: HashMap<u64, u32> = HashMap::new();
    let mut cur = Found {
        tid: next,
        blocks: Vec::new(),
    };
    // A transaction's revoked blocks, each once and only blocks of the file system: an
    // uncommitted tail of revoke blocks (1,020 records a block) kept as a list grew to
    // gigabytes; as a set it is bounded by the file system's size.
    let mut cur_revokes: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let mut scanned = 0u32;
    if pos != 0 {
        'scan: while scanned < area.len() {
            let b = area.read(dev, pos)?;
            let Some((kind, seq)) = jbd2::header(&b) else {
                break;
            };
            if seq != next {
                break;
            }
            match kind {
                jbd2::DESCRIPTOR => {
                    if csum && !jbd2::tail_csum_ok(seed, &b) {
                        break;
                    }
                    for t in jbd2::tags(js, &b) {
                        pos = area.next(pos);
                        scanned += 1;
                        if scanned >= area.len() {
                            break 'scan;
                        }
                        cur.blocks.push((t.blocknr, pos, t));
                    }
                }
                jbd2::REVOKE => {
                    if csum && !jbd2::tail_csum_ok(seed, &b) {
                        break;
                    }
                    let Some(recs) = jbd2::revoke_records(js, &b) else {
                        break;
                    };
                    cur_revokes.extend(recs.into_iter().filter(|&r| r < fs_blocks));
                }
                jbd2::COMMIT => {
                    if !jbd2::commit_csum_ok(js, &b) {
                        break;
                    }
                    for r in cur_revokes.drain() {
                        let e = revoked.entry(r).or_insert(next);
                        if tid_gt(next, *e) {
                            *e = next;
                        }
                    }
                    let done = std::mem::replace(
                        &mut cur,
                        Found {
                            tid: next.wrapping_add(1),
                            blocks: Vec::new(),
                        },
                    );
                    found.push(done);
                    next = next.wrapping_add(1);
                }
                _ => break,
            }
            pos = area.next(pos);
            scanned += 1;
        }
    }
    // The transactions found are consecutive, ending just before `next`.
    debug_assert!(
        found
            .iter()
            .rev()
            .zip(1u32..)
            .all(|(t, back)| t.tid == next.wrapping_sub(back)),
        "transactions found out of sequence"
    );
    Ok(Scan {
        found,
        revoked,
        next,
    })
}

/// Pass three: the newest logged copy of every home block that no later-or-equal revoke
/// cancels, read from the log, checked against its tag's checksum (checksum v3) and
/// unescaped. A copy of a block past the file system's end, or one whose checksum does
/// not match in a committed transaction, is corruption.
fn replay_set(
    area: &LogArea,
    dev: &dyn BlockDevice,
    fs_blocks: u64,
    scan: &Scan,
) -> Result<BTreeMap<u64, Vec<u8>>> {
    let seed = area.js.csum_seed();
    let v3 = area.js.incompat() & jbd2::INCOMPAT_CSUM_V3 != 0;
    let mut blocks = BTreeMap::new();
    for t in &scan.found {
        for &(home, lpos, tag) in &t.blocks {
            if scan.revoked.get(&home).is_some_and(|&r| !tid_gt(t.tid, r)) {
                continue;
            }
            if home >= fs_blocks {
                return Err(Error::corrupt(
                    "journal",
                    u64::from(lpos),
                    format!(
                        "transaction {} logs block {home} beyond the file system end",
                        t.tid
                    ),
                ));
            }
            let mut data = area.read(dev, lpos)?;
            if v3 && jbd2::block_csum(seed, t.tid, &data) != tag.csum {
                return Err(Error::corrupt(
                    "journal",
                    u64::from(lpos),
                    format!(
                        "checksum of the logged copy of block {home} in committed transaction {} does not match",
                        t.tid
                    ),
                ));
            }
            if tag.flags & jbd2::FLAG_ESCAPE != 0 {
                jbd2::unescape(&mut data);
            }
            blocks.insert(home, data);
        }
    }
    Ok(blocks)
}

/// jbd2's wrapping comparison: whether `a` is after `b`.
fn tid_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
