//! Crashes: a shift cut at every write replays to the file before it or after it.

use super::*;

/// (if any), a shift, an fsync and a sync.
pub(super) struct Scenario {
    pub(super) name: &'static str,
    /// The file: this many one-block extents with holes between and three blocks after
    /// them (0: one extent of 32 blocks).
    pub(super) comb: u64,
    pub(super) collapse: bool,
    /// The shift's offset and length in blocks.
    pub(super) at: u64,
    pub(super) len: u64,
    /// A block overwritten (not synced) before the shift: either version may be on disk.
    pub(super) overwrite: Option<u64>,
}

pub(super) const BS: u64 = 4096;

#[rustfmt::skip]
pub(super) const SCENARIOS: [Scenario; 5] = [
    Scenario { name: "collapse inside one extent (the cut stored first)",
        comb: 0, collapse: true, at: 8, len: 4, overwrite: None },
    Scenario { name: "collapse freeing most extents (depth 1 to 0)",
        comb: 60, collapse: true, at: 2, len: 110, overwrite: None },
    Scenario { name: "insert cutting the fourth extent (depth 0 to 1)",
        comb: 3, collapse: false, at: 7, len: 2, overwrite: None },
    Scenario { name: "insert into a hole of a depth-1 tree",
        comb: 30, collapse: false, at: 11, len: 5, overwrite: None },
    Scenario { name: "unsynced overwrite, then collapse (written back first)",
        comb: 10, collapse: true, at: 4, len: 6, overwrite: Some(20) },
];

/// The overwrite's bytes.
pub(super) fn overwrite_data() -> Vec<u8> {
    pattern(77, 0, BS as usize)
}

/// The scenario's change on `fs`; the new file it should give from `old`.
pub(super) fn change(s: &Scenario, fs: &Fs, f: Ino, old: &[u8]) -> lanefs::Result<Vec<u8>> {
    let mut mid = old.to_vec();
    if let Some(b) = s.overwrite {
        fs.write(f, b * BS, &overwrite_data())?;
        mid[(b * BS) as usize..((b + 1) * BS) as usize].copy_from_slice(&overwrite_data());
    }
    let (off, len) = (s.at * BS, s.len * BS);
    if s.collapse {
        fs.collapse_range(f, off, len)?;
        Ok(model_collapse(&mid, BS, off, len).unwrap())
    } else {
        fs.insert_range(f, off, len)?;
        Ok(model_insert(&mid, BS, off, len).unwrap())
    }
}

/// The base image with the scenario's file, and the file's bytes.
pub(super) fn crash_base(s: &Scenario) -> (Vec<u8>, Ino, Vec<u8>) {
    let dev = Arc::new(CrashDevice::new(32 << 20));
    format(&*dev, &mkfs_opts(4096, "")).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let f = new_file(&fs, "f");
    if s.comb == 0 {
        fs.write(f, 0, &pattern(1, 0, 32 * BS as usize)).unwrap();
    }
    for k in 0..s.comb {
        fs.write(f, 2 * k * BS, &pattern(k, 2 * k * BS, BS as usize))
            .unwrap();
    }
    if s.comb > 0 {
        // Blocks after the last hole, so a collapse has room before the end.
        fs.write(f, 2 * s.comb * BS, &pattern(99, 0, 3 * BS as usize))
            .unwrap();
    }
    fs.release(f).unwrap();
    let old = read_all(&fs, f);
    fs.unmount().unwrap();
    (dev.snapshot(), f, old)
}

/// Whether `got` is the new file, or the old one with the overwritten block old or new.
pub(super) fn old_or_new(got: &[u8], old: &[u8], new: &[u8], overwrite: Option<u64>) -> bool {
    if got == new {
        return true;
    }
    got.len() == old.len()
        && got.chunks(BS as usize).enumerate().all(|(k, b)| {
            let r = k * BS as usize..(k * BS as usize + b.len());
            b == &old[r] || (overwrite == Some(k as u64) && b == overwrite_data())
        })
}

/// Cut the power at every write of each scenario's shift, its fsync (the commit) and a
/// sync (the checkpoint that writes the tree home); every state the
/// unflushed writes can leave (all lost, all kept, a random subset, a subset with its
/// last write torn inside a block) replays to the old file or the new one and is clean.
#[test]
fn crash_during_shift_replays_old_or_new() {
    let mut rng = StdRng::seed_from_u64(0x5417);
    let mut states = 0;
    for s in &SCENARIOS {
        let (base, f, old) = crash_base(s);
        let dry = Arc::new(CrashDevice::from_vec(base.clone()));
        let fs = Fs::mount(dry.clone(), opts()).unwrap();
        let w0 = dry.writes();
        let new = change(s, &fs, f, &old).unwrap();
        fs.fsync(f, false).unwrap();
        fs.sync().unwrap();
        let total = dry.writes() - w0;
        same(&read_all(&fs, f), &new, s.name);
        drop(fs);
        for k in 0..=total {
            let dev = Arc::new(CrashDevice::from_vec(base.clone()));
            let fs = Fs::mount(dev.clone(), opts()).unwrap();
            dev.cut_after_writes(dev.writes() + k);
            // Errors from the cut are expected; what reached the device is judged below.
            if change(s, &fs, f, &old).is_ok() && fs.fsync(f, false).is_ok() {
                let _ = fs.sync();
            }
            dev.power_cut();
            drop(fs);
            let n = dev.pending_len();
            let all: Vec<usize> = (0..n).collect();
            let subset: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
            let mut images = vec![
                ("all lost", dev.durable()),
                ("all kept", dev.with_writes(&all)),
                ("a subset", dev.with_writes(&subset)),
            ];
            if n > 0 {
                let keep: Vec<usize> = (0..rng.gen_range(1..=n)).collect();
                let blocks = dev.pending()[keep.len() - 1].len / 4096;
                let sectors = rng.gen_range(0..blocks.max(1)) * 8;
                images.push(("the last kept write torn", dev.torn(&keep, sectors)));
            }
            for (what, img) in images {
                let ctx = format!("{}: cut after write {k} of {total}, {what}", s.name);
                let dev = Arc::new(CrashDevice::from_vec(img));
                let fs = Fs::mount(dev.clone(), opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let got = read_all(&fs, f);
                assert!(
                    old_or_new(&got, &old, &new, s.overwrite),
                    "{ctx}: the file is neither old ({} bytes) nor new ({} bytes): {} bytes",
                    old.len(),
                    new.len(),
                    got.len()
                );
                fs.unmount().unwrap();
                let r = check(&*dev, &FsckOptions::default()).unwrap();
                assert!(r.is_clean(), "{ctx}: lanefs fsck: {}", r.summary());
                if states % 16 == 0 {
                    assert_clean(&*dev, &ctx);
                }
                states += 1;
            }
        }
    }
    println!("{states} crash states checked");
}
