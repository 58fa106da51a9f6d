//! Tests of the rtfrag workload: the generator stays in its ranges, the shape validates.

use super::callgrind::{instructions_in, COUNTED_FN};
use super::*;

/// The generator is the same everywhere and stays in its ranges.
#[test]
fn rng_is_seeded_and_in_range() {
    let mut a = Rng::new(3, 0);
    let mut b = Rng::new(3, 0);
    let mut c = Rng::new(3, 1);
    let x: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
    let y: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
    let z: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
    assert_eq!(x, y);
    assert_ne!(x, z);
    for _ in 0..10_000 {
        let v = a.one_to(16);
        assert!((1..=16).contains(&v));
        assert!(a.below(3) < 3);
    }
}

/// The name callgrind is told to collect in is the function's.
#[test]
fn counted_fn_is_the_functions_name() {
    assert_eq!(std::any::type_name_of_val(&counted_phase), COUNTED_FN);
}

/// A callgrind dump's total is read from its summary or totals line.
#[test]
fn dump_totals_parse() {
    let dump = "version: 1\nevents: Ir\nfn=(1) main\n0 5\nsummary: 123456\n";
    assert_eq!(instructions_in(dump), Some(123_456));
    assert_eq!(instructions_in("events: Ir\ntotals: 42 7\n"), Some(42));
    assert_eq!(instructions_in("events: Ir\n"), None);
}

/// The default is the issue's shape: at least 1 TiB of rt space, about 200,000 holes.
#[test]
fn default_is_the_issues_shape() {
    let p = Params::default();
    p.validate().expect("valid");
    assert!(p.rt_bytes >= 1 << 40);
    assert_eq!(p.fill_files * p.holes_per_file, 200_000);
    assert_eq!(p.image_bytes(4096), 256 << 20);
    assert_eq!(fmt_bytes(p.rt_bytes), "1 TiB");
    let bad = Params {
        hint: 3,
        rextsize: 2,
        ..Params::default()
    };
    assert!(bad.validate().is_err());
}
