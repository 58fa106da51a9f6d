//! Multi-mount protection (the mmp feature): ext4's protocol that keeps two hosts sharing
//! one block device from mounting it read-write at once (fs/ext4/mmp.c).
//!
//! Mounting read-write reads the MMP block. CLEAN means nobody holds it; FSCK means e2fsck
//! does (refused); any other sequence may be a live holder, so the mount waits a check
//! interval and reads again: a sequence that moved is a live holder (refused). Then it
//! writes a fresh random sequence with this host's name, waits the interval once more,
//! and refuses if another host overwrote it meanwhile. While mounted, a thread writes the
//! next sequence every update interval and, if it finds a sequence it did not write, turns
//! the mount read-only (the file system is mounted elsewhere). Unmount writes CLEAN.
//! Read-only mounts take no part, as in the kernel.

use crate::dev::{BlockDevice, ErrorLatch};
use crate::disk::mmp::{self as dm, Mmp, SeqState};
use crate::disk::superblock::Superblock;
use crate::error::{Error, Result};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Where the MMP block is and how to write it.
#[derive(Clone)]
struct Place {
    dev: Arc<dyn BlockDevice>,
    off: u64,
    bs: usize,
    seed: Option<u32>,
    what: String,
}

impl Place {
    fn read(&self) -> Result<Mmp> {
        debug_assert!(self.bs >= dm::SIZE, "MMP block of {} bytes", self.bs);
        let mut b = vec![0u8; self.bs];
        self.dev.read_at(self.off, &mut b)?;
        if let Some(seed) = self.seed {
            if !dm::checksum_ok(seed, &b) {
                return Err(Error::corrupt("MMP block", self.off, "checksum mismatch"));
            }
        }
        Mmp::decode(&b).map_err(|d| Error::corrupt("MMP block", self.off / self.bs as u64, d))
    }

    fn write(&self, m: &Mmp) -> Result<()> {
        debug_assert!(
            self.off.is_multiple_of(self.bs as u64),
            "MMP block at byte {} is not a block",
            self.off
        );
        let mut b = vec![0u8; self.bs];
        m.encode(&mut b, self.seed);
        self.dev.write_at(self.off, &b)?;
        self.dev.flush()
    }

    /// "busy: ... in use by node N (device D) per its MMP block: why".
    fn busy(&self, m: &Mmp, why: &str) -> Error {
        Error::Busy(format!(
            "{}: {why}: the MMP block names node {:?}, device {:?}",
            self.what,
            m.nodename_str(),
            m.bdevname_str()
        ))
    }
}

/// A held MMP claim: the updater thread and what unmount writes.
pub struct MmpGuard {
    place: Place,
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// Another host took the block over: unmount must not write CLEAN over its claim.
    lost: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn hostname() -> Vec<u8> {
    std::fs::read("/proc/sys/kernel/hostname")
        .map(|mut v| {
            while v.last().is_some_and(|c| c.is_ascii_whitespace()) {
                v.pop();
            }
            v
        })
        .unwrap_or_else(|_| b"lanefs".to_vec())
}

/// A fresh sequence number below SEQ_MAX (mmp_new_seq).
fn new_seq() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = u64::from(t.subsec_nanos()) ^ (t.as_secs() << 20) ^ u64::from(std::process::id());
    let x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x >> 32) as u32) % dm::SEQ_MAX
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Claim the file system for a read-write mount, as ext4_multi_mount_protect does.
/// `what` names the image in errors; `latch` is tripped if another host takes it later.
pub fn protect(
    dev: &Arc<dyn BlockDevice>,
    sb: &Superblock,
    what: &str,
    latch: &Arc<ErrorLatch>,
) -> Result<MmpGuard> {
    let bs = sb.block_size() as usize;
    let blk = sb.mmp_block();
    if blk < u64::from(sb.first_data_block()) + 1 || blk >= sb.blocks_count() {
        return Err(Error::corrupt(
            "superblock",
            0,
            format!("MMP block {blk} outside the file system"),
        ));
    }
    let place = Place {
        dev: dev.clone(),
        off: blk * bs as u64,
        bs,
        seed: sb.metadata_csum().then(|| sb.csum_seed()),
        what: what.to_string(),
    };
    let mut m = place.read()?;
    let wait = mmp_wait(sb.mmp_update_interval(), m.check_interval);
    match dm::seq_state(m.seq) {
        SeqState::Clean => {}
        SeqState::Fsck => return Err(place.busy(&m, "e2fsck is checking it")),
        SeqState::Invalid(s) => {
            return Err(Error::corrupt(
                "MMP block",
                blk,
                format!("sequence {s:#x} invalid"),
            ))
        }
        SeqState::InUse(seq) => {
            std::thread::sleep(wait);
            m = place.read()?;
            if m.seq != seq {
                return Err(place.busy(&m, "it is active on another node"));
            }
        }
    }
    let seq = new_seq();
    m.seq = seq;
    m.time = now_secs();
    m.nodename = pad(&hostname());
    m.bdevname = pad(what.rsplit('/').next().unwrap_or(what).as_bytes());
    place.write(&m)?;
    std::thread::sleep(wait);
    let back = place.read()?;
    if back.seq != seq {
        return Err(place.busy(&back, "it is active on another node"));
    }
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thread = {
        let (place, stop, latch) = (place.clone(), stop.clone(), latch.clone());
        let lost = lost.clone();
        let every = Duration::from_secs(u64::from(
            sb.mmp_update_interval().max(dm::MIN_CHECK_INTERVAL),
        ));
        std::thread::Builder::new()
            .name("lanefs-mmp".into())
            .spawn(move || update_loop(place, m, every, stop, latch, lost))
            .map_err(|e| Error::io("starting the MMP thread", e))?
    };
    Ok(MmpGuard {
        place,
        stop,
        lost,
        thread: Some(thread),
    })
}

/// kmmpd: a new sequence every `every`; a sequence this host did not write means another
/// host mounted the file system, which makes this mount read-only.
fn update_loop(
    place: Place,
    mut m: Mmp,
    every: Duration,
    stop: Arc<(Mutex<bool>, Condvar)>,
    latch: Arc<ErrorLatch>,
    lost: Arc<std::sync::atomic::AtomicBool>,
) {
    loop {
        {
            let (lock, cv) = &*stop;
            let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
            let (guard, _) = cv
                .wait_timeout_while(guard, every, |stopped| !*stopped)
                .unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
        }
        match place.read() {
            Ok(cur) if cur.seq == m.seq && cur.nodename == m.nodename => {}
            Ok(cur) => {
                lost.store(true, std::sync::atomic::Ordering::Release);
                latch.trip(format!(
                    "the MMP block of {} was written by node {:?}: the file system seems to be mounted elsewhere; mounted read-only",
                    place.what,
                    cur.nodename_str()
                ));
                return;
            }
            Err(_) => continue,
        }
        m.seq = if m.seq >= dm::SEQ_MAX - 1 {
            1
        } else {
            m.seq + 1
        };
        m.time = now_secs();
        if place.write(&m).is_err() {
            continue;
        }
    }
}

fn pad<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s[..n]);
    out
}

impl MmpGuard {
    /// Stop the updater and leave the block as it is (a shutdown: kmmpd stops, and the
    /// next mount waits for the block as after a crash); `release` then writes nothing.
    /// Whether the updater was still running.
    pub fn abandon(&mut self) -> bool {
        let Some(t) = self.thread.take() else {
            return false;
        };
        {
            let (lock, cv) = &*self.stop;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        }
        let _ = t.join();
        true
    }

    /// Stop the updater and mark the block CLEAN (unmount).
    pub fn release(&mut self) -> Result<()> {
        if !self.abandon() {
            return Ok(());
        }
        if self.lost.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let mut m = self.place.read()?;
        m.seq = dm::SEQ_CLEAN;
        m.time = now_secs();
        self.place.write(&m)
    }
}

impl Drop for MmpGuard {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// How long a mount waits to see whether another node updates the MMP block: the larger
/// of the superblock's update interval and the block's check interval, each at least the
/// minimum and at most the largest e2fsprogs accepts (both are u16 fields of the image:
/// unbounded, a crafted image would make a mount sleep 18 hours, twice), then as
/// ext4_multi_mount_protect waits: twice the interval and a second, at most a minute more.
fn mmp_wait(update_interval: u16, check_interval: u16) -> Duration {
    let interval = update_interval
        .max(dm::MIN_CHECK_INTERVAL)
        .max(check_interval)
        .min(dm::MAX_UPDATE_INTERVAL);
    let interval = u64::from(interval);
    Duration::from_secs((2 * interval + 1).min(interval + 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_bounded_whatever_the_image_says() {
        assert_eq!(mmp_wait(5, 5), Duration::from_secs(11));
        assert_eq!(mmp_wait(0, 0), Duration::from_secs(11));
        assert_eq!(mmp_wait(100, 5), Duration::from_secs(160));
        assert_eq!(mmp_wait(u16::MAX, u16::MAX), Duration::from_secs(360));
    }
}
