//! The control loop: arithmetic that touches no shared memory, timed like a workload at the
//! same thread counts. Its scaling efficiency is the ceiling of the machine in that run.

use crate::timing::{timed_loop, PhaseResult, Timed};
use std::hint::black_box;
use std::time::Duration;

/// Workload name of the control loop in records.
pub const NAME: &str = "control";
/// Phase name of the control loop in records.
pub const PHASE: &str = "loop";
/// xorshift steps per counted operation: a few microseconds, like one file-system call.
const STEPS: u32 = 4096;

/// Run the control loop on `threads` threads.
pub fn run(threads: usize, warmup: Duration, duration: Duration) -> Result<PhaseResult, String> {
    let t = Timed {
        threads,
        warmup,
        duration,
        probe: None,
    };
    timed_loop(
        PHASE,
        t,
        // Distinct odd seeds per thread; xorshift never reaches zero from a non-zero seed.
        |i| Ok(0x9E37_79B9_7F4A_7C15u64 ^ ((i as u64) << 1 | 1)),
        |x: &mut u64| {
            let mut v = *x;
            for _ in 0..STEPS {
                v ^= v << 13;
                v ^= v >> 7;
                v ^= v << 17;
            }
            *x = black_box(v);
            Ok(())
        },
        |_| Ok(()),
    )
}
