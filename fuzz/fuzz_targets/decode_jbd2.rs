//! A journal of any bytes: its superblock, then recovery's scan of descriptor, commit and
//! revoke blocks over a log that is the input itself (sequence numbers, tags, checksums,
//! wrap-around, escapes all come from it).
#![no_main]

use lanefs::internals::disk::extent::Extent;
use lanefs::internals::extmap::ExtentMap;
use lanefs::internals::journal::{recover, LogArea};
use lanefs::{BlockDevice, MemDevice};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let bs = 1024usize << (sel & 3).min(2);
    let nblocks = rest.len().div_ceil(bs).clamp(2, 256);
    let mut img = rest.to_vec();
    img.resize(nblocks * bs, 0);
    let dev = MemDevice::from_vec(img);
    let ext = ExtentMap::from_extents(vec![Extent {
        lblk: 0,
        len: nblocks as u32,
        pblk: 0,
        unwritten: false,
    }]);
    let read = |b: u64| {
        let mut v = vec![0u8; bs];
        dev.read_at(b * bs as u64, &mut v)?;
        Ok(v)
    };
    if let Ok(area) = LogArea::new(&ext, 8, nblocks as u64, read, bs) {
        let _ = recover(&area, &dev, nblocks as u64 * u64::from(sel >> 2 | 1));
    }
});
