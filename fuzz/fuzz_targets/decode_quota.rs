//! A quota file (the kernel's quota tree, v2r1): the input's first byte picks the type,
//! the rest is the file, so index fan-out, shared and cyclic references and references
//! past the file all occur.
#![no_main]

use lanefs::internals::disk::quota;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&t, file)) = data.split_first() else {
        return;
    };
    let _ = quota::decode(file, usize::from(t % 3));
});
