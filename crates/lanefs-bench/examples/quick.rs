//! Short bench run for development: `cargo run --release -p lanefs-bench --example quick`.
fn main() {
    let cfg = lanefs_bench::BenchConfig {
        reps: 1,
        seconds: 1.0,
        lockstat: true,
        ..Default::default()
    };
    if let Err(e) = lanefs_bench::run(&cfg, &mut std::io::stdout()) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}
