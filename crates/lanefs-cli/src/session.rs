//! Mounting an image for the length of one command, and small engine helpers.

use crate::error::{CmdResult, Context, Failure};
use lanefs::{DirEntry, Fs, Ino, MountOptions};
use std::path::{Path, PathBuf};

/// Entries `readdir` returns per call.
const READDIR_BATCH: usize = 256;

/// The realtime data device named by `--rtdev`, for every command of this process.
static RTDEV: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// Record `--rtdev` (once, before the command runs).
pub fn set_rtdev(p: Option<PathBuf>) {
    let _ = RTDEV.set(p);
}

/// The `--rtdev` given, if any.
pub fn rtdev() -> Option<PathBuf> {
    RTDEV.get().cloned().flatten()
}

/// Mount options for a command.
pub fn mount_options(read_only: bool) -> MountOptions {
    MountOptions {
        read_only,
        // A command that only reads reads beside a writer (with a note, `with_fs_opts`).
        snapshot: read_only,
        rtdev: rtdev(),
        ..MountOptions::default()
    }
}

/// Mount `image`, run `work`, and unmount (which writes everything back), whatever `work`
/// returned. An error of `work` wins over an error of the unmount.
pub fn with_fs<T>(
    image: &Path,
    read_only: bool,
    work: impl FnOnce(&Fs) -> CmdResult<T>,
) -> CmdResult<T> {
    with_fs_opts(image, mount_options(read_only), work)
}

/// [`with_fs`] with the engine's options given.
pub fn with_fs_opts<T>(
    image: &Path,
    opts: MountOptions,
    work: impl FnOnce(&Fs) -> CmdResult<T>,
) -> CmdResult<T> {
    let what = image.display();
    if let Err(e) = std::fs::metadata(image) {
        return Err(Failure::new(what, e));
    }
    let read_only = opts.read_only;
    let fs = match Fs::mount_path(image, opts) {
        Ok(fs) => fs,
        // Name who has it (the README promises the holder is named).
        Err(lanefs::Error::Busy(why)) => {
            let who = crate::holders::who_holds(image)
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            return Err(Failure::new(
                &what,
                lanefs::Error::Busy(format!("{why}{who}")),
            ));
        }
        Err(e) => return Err(Failure::new(&what, e)),
    };
    if read_only {
        crate::holders::note_if_shared(image);
    }
    run_then_unmount(fs, &what.to_string(), read_only, work)
}

/// [`with_fs_opts`] on a device the caller made (`what` names it in errors).
pub fn with_fs_on<T>(
    dev: std::sync::Arc<dyn lanefs::BlockDevice>,
    what: &str,
    opts: MountOptions,
    work: impl FnOnce(&Fs) -> CmdResult<T>,
) -> CmdResult<T> {
    let read_only = opts.read_only;
    let fs = Fs::mount(dev, opts).ctx(what)?;
    run_then_unmount(fs, what, read_only, work)
}

/// Run `work` on the mounted `fs`, then unmount it whatever `work` returned; an error of
/// `work` wins over an error of the unmount.
fn run_then_unmount<T>(
    fs: std::sync::Arc<Fs>,
    what: &str,
    read_only: bool,
    work: impl FnOnce(&Fs) -> CmdResult<T>,
) -> CmdResult<T> {
    // A command that writes says why it cannot, before it starts.
    let refused = (!read_only)
        .then(|| fs.read_only_reason())
        .flatten()
        .map(|why| Failure::new(what, lanefs::Error::NotSupported(why)));
    let result = match refused {
        Some(f) => Err(f),
        None => work(&fs),
    };
    let unmounted = fs.unmount().ctx(format!("{what}: unmount"));
    let value = result?;
    unmounted?;
    Ok(value)
}

/// Every entry of directory `dir` except `.` and `..`.
pub fn read_dir_all(fs: &Fs, dir: Ino) -> lanefs::Result<Vec<DirEntry>> {
    let mut all = Vec::new();
    let mut pos = 0;
    loop {
        let batch = fs.readdir(dir, pos, READDIR_BATCH)?;
        let Some(last) = batch.last() else { break };
        if last.next == pos {
            break;
        }
        pos = last.next;
        all.extend(
            batch
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    Ok(all)
}

/// `dir/name` for messages, with `dir` shown as given.
/// Control characters in `name` (a newline, an escape sequence from a crafted image) are
/// shown escaped, so a message stays one line and prints no terminal control.
pub fn join_display(dir: &str, name: &[u8]) -> String {
    let name: String = String::from_utf8_lossy(name)
        .chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            escaped
                .into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect();
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}
