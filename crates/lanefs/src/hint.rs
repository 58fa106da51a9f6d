//! Hints to the CPU: asking for a cache line before it is read, where the engine knows an
//! address a few dependent loads ahead of the code that reads it (the inode cache's sweep,
//! a directory leaf's entry found through its digest).

/// Ask for the cache line at address `a` (a hint, never a read: any address will do).
#[allow(unsafe_code)]
pub fn prefetch(a: usize) {
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has, and is a hint that
    // reads nothing the program can see: it never faults, whatever the address (a freed
    // or unmapped one included), so it has no memory-safety precondition.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(a as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = a;
}
