//! An inline-data inode (the flag set, its i_block and `system.data` from the input):
//! its bytes, its directory, the room it has.
#![no_main]

use lanefs::internals::disk::{inline, inode::DiskInode, inode::FL_INLINE_DATA};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut raw = data.to_vec();
    raw.resize(256, 0);
    let mut d = DiskInode::from_bytes(&raw);
    d.set_flags(d.flags() | FL_INLINE_DATA);
    let ino = 12;
    let _ = inline::is_inline(&d);
    let _ = inline::value(&d, ino);
    let _ = inline::max_value(&d, ino);
    let _ = inline::file_data(&d, ino);
    if let Ok(dir) = inline::Dir::load(&d, ino) {
        let _ = dir.entries(ino);
        let mut out = d.clone();
        let _ = dir.store(&mut out, ino);
    }
});
