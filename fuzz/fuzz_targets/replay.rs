//! A journal to replay: a base shape mounted, changed, and its device taken while the
//! changes are committed but not yet written home (a crash); then the journal's blocks
//! edited by the input, and the image mounted (replay) and checked.
#![no_main]

use lanefs::{fsck, Fs, MemDevice};
use lanefs_fuzz::{crash_image, mutate, opts, walk, Base};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

/// A crash image and its journal's blocks.
type Crashed = (Base, Vec<u64>);

/// Crash images with transactions in their logs, one per journalled shape.
fn crashed(i: usize) -> Option<&'static Crashed> {
    static CRASHED: OnceLock<Vec<Option<Crashed>>> = OnceLock::new();
    let all = CRASHED.get_or_init(|| {
        (0..lanefs_fuzz::shapes())
            .map(|s| {
                let b = crash_image(s)?;
                let (first, len) = b.journal?;
                Some((b, (first..first + len).collect()))
            })
            .collect()
    });
    all.iter()
        .cycle()
        .skip(i % all.len())
        .take(all.len())
        .flatten()
        .next()
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, script)) = data.split_first() else {
        return;
    };
    let Some((b, journal)) = crashed(usize::from(first)) else {
        return;
    };
    let mut img = b.bytes.clone();
    // Edit the log only: the first 64 journal blocks, where the transactions are.
    let log = &journal[..journal.len().min(64)];
    mutate(&mut img, b, log, script);
    let dev = Arc::new(MemDevice::from_vec(img));
    if let Ok(fs) = Fs::mount(dev.clone(), opts(false)) {
        walk(&fs);
        let _ = fs.unmount();
        let _ = fsck::check(&*dev, &fsck::FsckOptions::default());
    }
});
