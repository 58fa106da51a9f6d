//! What a failed copy in leaves: every error it met, reported (the first few in full,
//! then a count), and no file that claims to be complete. A file whose data, xattrs or
//! attributes were not all written (a full image, a read error, a new file whose copy
//! was stopped by an earlier error while it waited for a worker) is removed again, with
//! every hard link this copy made to it: a name in the image is either a whole copy or
//! absent. An existing file the copy was to overwrite and had not emptied yet is left
//! with its old data.

use super::*;

/// Errors printed in full; the rest are counted.
const SHOWN: usize = 8;

/// A name the copy made (or emptied a file under to refill it): its inode, directory,
/// name, and how it is shown.
pub(super) struct Name {
    pub ino: Ino,
    pub dir: Ino,
    pub name: Vec<u8>,
    pub shown: String,
}

impl Name {
    /// The job's file.
    pub fn of(job: &Job) -> Name {
        Name {
            ino: job.ino,
            dir: job.dir,
            name: job.name.clone(),
            shown: job.shown.clone(),
        }
    }
}

/// Every error of a copy and the files it left unfinished, shared by the walk and the
/// workers.
#[derive(Default)]
pub(super) struct Outcome {
    pub errors: Vec<Failure>,
    /// The files whose copy did not finish.
    pub unfinished: Vec<Name>,
}

impl Outcome {
    /// Whether an error has stopped the copy.
    pub fn stopped(m: &Mutex<Outcome>) -> bool {
        m.lock().map_or(true, |o| !o.errors.is_empty())
    }

    /// Record `job`'s file as unfinished, and why (`None`: stopped by an earlier error).
    pub fn fail(m: &Mutex<Outcome>, job: &Job, why: Option<Failure>) {
        let mut o = m.lock().unwrap_or_else(|e| e.into_inner());
        o.errors.extend(why);
        o.unfinished.push(Name::of(job));
    }

    /// Record an error (if any) that left no file unfinished.
    pub fn error(m: &Mutex<Outcome>, why: Option<Failure>) {
        let mut o = m.lock().unwrap_or_else(|e| e.into_inner());
        o.errors.extend(why);
    }

    /// Remove every unfinished file (`links`: the other names this copy gave an inode),
    /// then the result: `Ok` with no error, else
    /// every error printed but the last, which is returned (the first few in full, then
    /// a count, and how many files were removed).
    pub fn settle(mut self, fs: &Fs, links: &[Name], progress: &Progress) -> CmdResult<i32> {
        let mut removed = 0usize;
        let gone: HashSet<Ino> = self.unfinished.iter().map(|u| u.ino).collect();
        let extra = links.iter().filter(|l| gone.contains(&l.ino));
        let mut errors = std::mem::take(&mut self.errors);
        for n in self.unfinished.iter().chain(extra) {
            // Only the name this copy made, if it still names that file.
            match fs.lookup(n.dir, &n.name) {
                Ok(a) if a.ino == n.ino => match fs.unlink(n.dir, &n.name) {
                    Ok(()) => removed += 1,
                    Err(e) => errors.push(Failure::new(
                        &n.shown,
                        Error::msg(format!("removing the unfinished copy: {e}")),
                    )),
                },
                _ => {}
            }
        }
        let Some(last) = errors.pop() else {
            return Ok(0);
        };
        let total = errors.len() + 1;
        for e in errors.iter().take(SHOWN) {
            progress.warn(&e.line("cp"));
        }
        if total == 1 && removed == 0 {
            return Err(last);
        }
        if total <= SHOWN {
            progress.warn(&last.line("cp"));
        }
        let more = if total > SHOWN {
            format!(" ({} not shown)", total - SHOWN)
        } else {
            String::new()
        };
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let msg = format!(
            "stopped after {}{more}; {} not copied whole removed from the image",
            plural(total, "error", "errors"),
            plural(removed, "file", "files"),
        );
        Err(Failure::new("", Error::msg(msg)))
    }
}
