//! A workload's runs on one shape: the dry run, the crash runs within the state budget,
//! checking every state of each, and the report that fails the test with reproduction
//! settings and the first failing image saved.

use super::*;

pub(super) struct Report {
    pub(super) states: u64,
    pub(super) runs: u64,
    pub(super) e2fsck: u64,
    pub(super) failures: Vec<String>,
    pub(super) failed_states: u64,
    saved: Option<PathBuf>,
}

impl Report {
    pub(super) fn new() -> Report {
        Report {
            states: 0,
            runs: 0,
            e2fsck: 0,
            failures: Vec::new(),
            failed_states: 0,
            saved: None,
        }
    }
}

/// Check every state of one crash run; false once enough failures are collected.
fn check_run(
    label: &str,
    run: &Run,
    states: Vec<(String, Keep)>,
    head: &str,
    rep: &mut Report,
) -> bool {
    let every = e2fsck_every();
    for (what, keep) in states {
        let k = STATES_SEEN.fetch_add(1, Ordering::Relaxed);
        let e2 = k.is_multiple_of(every);
        rep.e2fsck += u64::from(e2);
        rep.states += 1;
        if let Err(e) = check_state(build_state(&run.dev, &keep), &run.model, e2) {
            rep.failed_states += 1;
            if rep.saved.is_none() {
                let dir = std::env::temp_dir().join("lanefs-crash");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{label}-{:x}.img", base_seed()));
                let img = build_state(&run.dev, &keep);
                write_image(&path, &img);
                give_buf(img);
                rep.saved = Some(path);
            }
            let pending: Vec<String> = run
                .dev
                .pending()
                .iter()
                .take(16)
                .map(|p| format!("{}@{}", p.len, p.off))
                .collect();
            rep.failures.push(format!(
                "{head}; state: {what}\n  pending writes (bytes@offset): {}\n  {} ops done, \
                 last: {:?}\n{e}",
                pending.join(" "),
                run.ops,
                run.trace.iter().rev().take(4).rev().collect::<Vec<_>>()
            ));
            if rep.failures.len() >= max_failures() {
                return false;
            }
        }
    }
    true
}

pub(super) fn finish(test: &str, rep: &Report, start: Instant) {
    println!(
        "crash: {} states checked ({} runs, {} with e2fsck) for {test} in {:.1} s, {} failed",
        rep.states,
        rep.runs,
        rep.e2fsck,
        start.elapsed().as_secs_f64(),
        rep.failed_states
    );
    if !rep.failures.is_empty() {
        let saved = rep.saved.as_ref().map_or(String::new(), |p| {
            format!("\nfirst failing image saved at {}", p.display())
        });
        panic!(
            "{test}: {} of {} crash states failed (LANEFS_CRASH_SEED={:#x}){saved}\n\n{}",
            rep.failed_states,
            rep.states,
            base_seed(),
            rep.failures.join("\n\n")
        );
    }
}

/// The dry run: the workload without a crash must give a clean image equal to the model.
/// Returns it, with the counts of writes and flushes.
pub(super) fn dry_run(label: &str, w: &Workload, base: &[u8], wseed: u64) -> (Run, u64, u64) {
    let ctx = format!("{label} (LANEFS_CRASH_SEED={:#x}) dry run", base_seed());
    let run = run_workload(w, base, wseed, Cut::None, &ctx);
    let (writes, flushes) = (run.dev.writes(), run.dev.flushes());
    println!(
        "crash: {label} dry run: {} ops, {writes} writes, {flushes} flushes, {}",
        run.ops, run.journal
    );
    let mut img = take_buf();
    run.dev.snapshot_into(&mut img);
    if let Err(e) = check_state(img, &run.model, true) {
        panic!("{ctx}: the image after unmount without a crash is wrong:\n{e}");
    }
    (run, writes, flushes)
}

/// Crash runs of one workload on one shape, with `1/share` of a workload's state budget.
pub(super) fn crash_workload(w: &Workload, shape: &Shape, share: u64) {
    let test = format!("crash_{}{}", shape.name, w.name);
    set_shape(shape);
    let Some(base) = base_image(&test, shape) else {
        return;
    };
    // About 0.1 s a state here; a hang must still fail the run.
    let _dog = common::watchdog(&test, 900 + total_states() / WORKLOADS);
    let start = Instant::now();
    let wseed = mix(base_seed(), name_seed(w.name));
    let (dry, writes, flushes) = dry_run(&test, w, base, wseed);
    give_buf(device_bytes(dry.dev));
    let budget = (total_states() / WORKLOADS / share).max(1);
    let only = env_u64("LANEFS_CRASH_RUN");
    let forced = std::env::var("LANEFS_CRASH_CUT")
        .ok()
        .map(|v| Cut::parse(&v));
    // Every crash point once, in a seeded order, then again with other states.
    let mut points: Vec<Cut> = (0..=writes)
        .map(Cut::Write)
        .chain((1..=flushes).flat_map(|n| [Cut::AfterFlush(n), Cut::AtFlush(n)]))
        .collect();
    points.shuffle(&mut StdRng::seed_from_u64(wseed));
    let mut rep = Report::new();
    rep.states += 1;
    for i in 0.. {
        if rep.states >= budget && only.is_none() {
            break;
        }
        if only.is_some_and(|r| r != i) {
            if only.is_some_and(|r| r < i) {
                break;
            }
            continue;
        }
        let mut rng = StdRng::seed_from_u64(mix(wseed, i + 1));
        let cut = forced.unwrap_or(points[i as usize % points.len()]);
        let head = format!(
            "{} crash {cut:?} (of {writes} writes, {flushes} flushes); reproduce: \
             LANEFS_CRASH_SEED={:#x} LANEFS_CRASH_RUN={i} LANEFS_CRASH_CUT={} \
             cargo test -p lanefs --test crash -- {test} --exact",
            w.name,
            base_seed(),
            cut.env()
        );
        let run = run_workload(w, base, wseed, cut, &head);
        rep.runs += 1;
        let states = crash_states(&run.dev, &mut rng);
        let go_on = check_run(&test, &run, states, &head, &mut rep);
        give_buf(device_bytes(run.dev));
        if !go_on {
            break;
        }
    }
    finish(&test, &rep, start);
}
