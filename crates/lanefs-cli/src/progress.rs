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
