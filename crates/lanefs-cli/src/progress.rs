//! A progress bar for long copies, shown only when standard error is a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Bytes copied so far, against a total known in advance.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Whether a bar would be shown; when not, the total need not be computed.
    pub fn wanted() -> bool {
        std::io::stderr().is_terminal()
    }

    /// No bar at all.
    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    /// A bar for `total` bytes, if standard error is a terminal.
    pub fn new(total: u64) -> Progress {
        if !Self::wanted() {
            return Self::hidden();
        }
        let bar = ProgressBar::new(total);
        let template = "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}";
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        Progress { bar: Some(bar) }
    }

    /// Count `bytes` more as copied.
    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// Print a line above the bar (or plainly when there is none).
    pub fn warn(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `lanefs bench`'s progress bar: one step per timed run, naming the workload, variant,
/// thread count and repetition running now, with the time left at the pace so far.
pub struct BenchBar {
    bar: ProgressBar,
}

impl BenchBar {
    /// A bar on standard error, if it is a terminal.
    pub fn new() -> Option<BenchBar> {
        if !Progress::wanted() {
            return None;
        }
        let bar = ProgressBar::new(0);
        let template = "{bar:30} {pos}/{len} runs, {elapsed} gone, ~{eta} left: {msg}";
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        Some(BenchBar { bar })
    }

    /// A writer for the run's text that lifts the bar while a line is printed.
    pub fn writer<'a, W: std::io::Write>(&'a self, inner: W) -> BarWriter<'a, W> {
        BarWriter {
            bar: &self.bar,
            inner,
        }
    }

    /// Remove the bar after a whole run (the plan and the runs made must agree).
    pub fn finish(&self) {
        debug_assert_eq!(Some(self.bar.position()), self.bar.length(), "runs planned");
        self.bar.finish_and_clear();
    }
}

impl Drop for BenchBar {
    /// Clear the bar also when the run ends early (an error, a panic).
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

impl lanefs_bench::Observer for &BenchBar {
    fn plan(&mut self, total: usize) {
        self.bar.set_length(total as u64);
    }

    fn start(&mut self, step: &lanefs_bench::Step<'_>) {
        let threads = if step.threads == 1 {
            "thread"
        } else {
            "threads"
        };
        self.bar.set_message(format!(
            "{} [{}] {} {threads}, rep {}/{}",
            step.workload, step.variant, step.threads, step.rep, step.reps
        ));
    }

    fn finish(&mut self) {
        self.bar.inc(1);
    }
}

/// Standard output with the bar lifted around every write (see [`BenchBar::writer`]).
pub struct BarWriter<'a, W> {
    bar: &'a ProgressBar,
    inner: W,
}

impl<W: std::io::Write> std::io::Write for BarWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let inner = &mut self.inner;
        self.bar.suspend(|| inner.write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let inner = &mut self.inner;
        self.bar.suspend(|| inner.flush())
    }
}
