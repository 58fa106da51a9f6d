//! Running a workload with a crash and building crash states: where the power is cut (at a
//! write, after a flush or instead of one), one run on a crash-recording device, and the
//! states made from the writes not yet flushed (all lost, all kept, a prefix, random and
//! reordered subsets, a torn last write).

use super::*;

// ---------------------------------------------------------------------------------------
// Running a workload with a crash, building states, checking them.

#[derive(Debug, Clone, Copy)]
pub(super) enum Cut {
    /// No crash: run to the end and unmount.
    None,
    /// The power goes at write K (K writes in all succeed).
    Write(u64),
    /// The power goes right after flush N.
    AfterFlush(u64),
    /// The power goes instead of flush N.
    AtFlush(u64),
}

impl Cut {
    /// The `LANEFS_CRASH_CUT` spelling: `write:K`, `after_flush:N`, `at_flush:N`.
    pub(super) fn env(self) -> String {
        match self {
            Cut::None => "none".into(),
            Cut::Write(k) => format!("write:{k}"),
            Cut::AfterFlush(n) => format!("after_flush:{n}"),
            Cut::AtFlush(n) => format!("at_flush:{n}"),
        }
    }

    pub(super) fn parse(v: &str) -> Cut {
        fn bad(v: &str) -> ! {
            panic!("LANEFS_CRASH_CUT={v}: write:K, after_flush:N or at_flush:N")
        }
        let Some((kind, n)) = v.split_once(':') else {
            bad(v)
        };
        let Ok(n) = n.parse::<u64>() else { bad(v) };
        match kind {
            "write" => Cut::Write(n),
            "after_flush" => Cut::AfterFlush(n),
            "at_flush" => Cut::AtFlush(n),
            _ => bad(v),
        }
    }
}

pub(super) struct Run {
    pub(super) dev: Arc<CrashDevice>,
    pub(super) model: Model,
    pub(super) sync_flushes: Vec<u64>,
    pub(super) ops: u64,
    pub(super) trace: Vec<String>,
    /// The journal's counters at the end of a run without a crash.
    pub(super) journal: String,
}

pub(super) fn lost_found_ino(base: &[u8]) -> Ino {
    let fs = Fs::mount(Arc::new(CrashDevice::from_vec(base.to_vec())), opts()).expect("mount base");
    let ino = fs.lookup(ROOT_INO, b"lost+found").expect("lost+found").ino;
    drop(fs);
    ino
}

pub(super) fn run_workload(w: &Workload, base: &[u8], wseed: u64, cut: Cut, ctx: &str) -> Run {
    static LF: std::sync::Mutex<Vec<(usize, Ino)>> = std::sync::Mutex::new(Vec::new());
    let key = base.as_ptr() as usize;
    let known = LF
        .lock()
        .expect("lf")
        .iter()
        .find(|k| k.0 == key)
        .map(|k| k.1);
    let lf = known.unwrap_or_else(|| {
        let lf = lost_found_ino(base);
        LF.lock().expect("lf").push((key, lf));
        lf
    });
    let mut buf = take_buf();
    buf.clear();
    buf.extend_from_slice(base);
    let dev = Arc::new(CrashDevice::from_vec(buf));
    match cut {
        Cut::None => {}
        Cut::Write(k) => dev.cut_after_writes(k),
        Cut::AfterFlush(n) => dev.cut_after_flushes(n),
        Cut::AtFlush(n) => dev.cut_at_flush(n),
    }
    let mut model = Model::new(lf);
    let fs = match Fs::mount(dev.clone(), opts()) {
        Ok(fs) => fs,
        Err(e) => {
            assert!(dev.is_cut(), "{ctx}: mount failed with the power on: {e}");
            return Run {
                dev,
                model,
                sync_flushes: Vec::new(),
                ops: 0,
                trace: vec![format!("mount failed: {e}")],
                journal: String::new(),
            };
        }
    };
    let mut d = Driver {
        fs: &fs,
        dev: &dev,
        m: model,
        sync_flushes: Vec::new(),
        trace: VecDeque::new(),
        ops: 0,
        ctx: ctx.to_string(),
    };
    let mut rng = StdRng::seed_from_u64(wseed);
    let done = (w.run)(&mut d, &mut rng).is_ok();
    let Driver {
        m,
        sync_flushes,
        ops,
        trace,
        ..
    } = d;
    model = m;
    let mut journal = String::new();
    if let Cut::None = cut {
        assert!(done, "{ctx}: the workload stopped without a crash");
        journal = format!("{:?}", fs.diagnostics().journal_stats());
        fs.unmount()
            .unwrap_or_else(|e| panic!("{ctx}: unmount: {e}"));
        model.ack_all();
    } else {
        dev.power_cut();
        drop(fs);
    }
    Run {
        dev,
        model,
        sync_flushes,
        ops,
        trace: trace.into(),
        journal,
    }
}

/// Which pending writes a crash state keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Keep {
    /// These, in this order.
    Writes(Vec<usize>),
    /// These, in this order, the last one torn after this many sectors.
    Torn(Vec<usize>, usize),
}

/// Build a crash state into a reused buffer.
pub(super) fn build_state(dev: &CrashDevice, keep: &Keep) -> Vec<u8> {
    let mut b = take_buf();
    match keep {
        Keep::Writes(w) => dev.with_writes_into(w, &mut b),
        Keep::Torn(w, sectors) => dev.torn_into(w, *sectors, &mut b),
    }
    b
}

/// Crash states from the writes since the last flush: (description, what to keep).
pub(super) fn crash_states(dev: &CrashDevice, rng: &mut StdRng) -> Vec<(String, Keep)> {
    let pending = dev.pending();
    let n = pending.len();
    if n == 0 {
        return vec![("nothing pending".into(), Keep::Writes(Vec::new()))];
    }
    fn list(v: &[usize]) -> String {
        if v.len() <= 12 {
            format!("{v:?}")
        } else {
            format!("{:?}.. ({} writes)", &v[..12], v.len())
        }
    }
    let all: Vec<usize> = (0..n).collect();
    let mut out = vec![
        (
            format!("all {n} pending writes lost"),
            Keep::Writes(Vec::new()),
        ),
        (
            format!("all {n} pending writes kept"),
            Keep::Writes(all.clone()),
        ),
    ];
    if n >= 2 {
        let j = rng.gen_range(1..n);
        out.push((
            format!("first {j} of {n} pending writes kept"),
            Keep::Writes(all[..j].to_vec()),
        ));
    }
    let subset: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
    out.push((
        format!("pending writes {} of {n} kept", list(&subset)),
        Keep::Writes(subset),
    ));
    let mut shuffled: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.6)).collect();
    if shuffled.len() >= 2 {
        shuffled.shuffle(rng);
        out.push((
            format!(
                "pending writes {} of {n} kept, in that order",
                list(&shuffled)
            ),
            Keep::Writes(shuffled),
        ));
    }
    let mut torn: Vec<usize> = all.iter().copied().filter(|_| rng.gen_bool(0.5)).collect();
    if torn.is_empty() {
        torn.push(rng.gen_range(0..n));
    }
    let last = pending[*torn.last().expect("torn")];
    let unit = tear_unit();
    let units = last.len.div_ceil(unit);
    if units >= 2 {
        let keep = rng.gen_range(1..units) * (unit / 512);
        out.push((
            format!(
                "pending writes {} of {n} kept, the last ({} bytes at {}) torn after {keep} sectors",
                list(&torn),
                last.len,
                last.off
            ),
            Keep::Torn(torn, keep),
        ));
    }
    // The same writes chosen twice make the same image: check it once.
    let mut seen = Vec::new();
    out.retain(|(_, k)| {
        let new = !seen.contains(k);
        seen.push(k.clone());
        new
    });
    out
}
