//! An inode of any bytes (128 to 1024 bytes): every accessor, its checksum, the xattrs in
//! its body, its inline data and inline directory.
#![no_main]

use lanefs::internals::disk::{inline, inode::DiskInode, xattr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let size = 128usize << (sel % 4);
    if rest.len() < size {
        return;
    }
    let d = DiskInode::from_bytes(&rest[..size]);
    let ino = u64::from(sel) + 1;
    let _ = (
        d.mode(),
        d.size(),
        d.links(),
        d.flags(),
        d.file_acl(),
        d.generation(),
    );
    let _ = (
        d.blocks_512(1024),
        d.blocks_512(4096),
        d.extra_isize(),
        d.rdev(),
    );
    let _ = (
        d.atime(),
        d.mtime(),
        d.ctime(),
        d.crtime(),
        d.owns_no_block(),
    );
    let _ = d.compute_checksum(0x1234_5678, ino as u32);
    if let Some((start, len)) = xattr::ibody_range(size, usize::from(d.extra_isize())) {
        if let Some(area) = rest.get(start..start + len) {
            let _ = xattr::decode_ibody(area, ino);
        }
    }
    let _ = inline::value(&d, ino);
    let _ = inline::max_value(&d, ino);
    let _ = inline::file_data(&d, ino);
    if let Ok(dir) = inline::Dir::load(&d, ino) {
        let _ = dir.entries(ino);
    }
});
