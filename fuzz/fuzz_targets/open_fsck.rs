//! An image (a base shape with its metadata edited, checksums resealed) is checked by
//! `fsck::check`, then mounted read-only and walked: nothing may panic, hang or allocate
//! without bound, whatever the image says.
#![no_main]

use lanefs::{fsck, Fs, MemDevice};
use lanefs_fuzz::{image, opts, walk};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let Some(img) = image(data) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_vec(img));
    let _ = fsck::check(&*dev, &fsck::FsckOptions::default());
    if let Ok(fs) = Fs::mount(dev, opts(true)) {
        walk(&fs);
        let _ = fs.statfs();
    }
});
