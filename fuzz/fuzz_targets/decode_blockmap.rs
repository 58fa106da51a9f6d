//! An ext2/ext3 block map: i_block from the input and every indirect block it names read
//! from the rest of the input, so pointer cycles, shared blocks and out-of-range pointers
//! all occur.
#![no_main]

use lanefs::internals::disk::blockmap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 61 {
        return;
    }
    let bs = 1024usize << (data[0] & 3).min(2);
    let iblock = &data[1..61];
    let blocks = data[61..].len().div_ceil(bs) as u64 + 8;
    let rest = &data[61..];
    let mut read = |b: u64| {
        let mut v = vec![0u8; bs];
        let at = (b as usize).wrapping_mul(bs) % rest.len().max(1);
        let n = (rest.len() - at.min(rest.len())).min(bs);
        v[..n].copy_from_slice(&rest[at..at + n]);
        Ok(v)
    };
    if let Ok((runs, _)) = blockmap::decode(iblock, bs, 1, blocks, 12, &mut read) {
        let _ = blockmap::fits(&runs, bs);
        let _ = blockmap::needed(&runs, bs);
    }
});
