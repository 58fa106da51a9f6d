//! Copying host files and trees into an image.
//!
//! The host tree is walked by descriptor ([`HostDir`]): a source path is followed as
//! the user gave it, and below it every name is opened relative to its directory's
//! descriptor with `O_NOFOLLOW`. A directory or file swapped for a symlink while the
//! copy runs is therefore never followed out of the tree: a file's data, xattrs and
//! attributes are read from the descriptor that was opened and checked (`fstat`), and a
//! directory that turns out to be something else is an error naming it. The walk keeps
//! its own stack (depth costs heap) and refuses a directory that contains itself (a bind
//! mount).

use super::{nonzero_pieces, read_full, show, timespec, CHUNK};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::hostdir::{self, HostDir, HostType, Listed};
use crate::hostsys::{rdev_to_ext4, seek_data_hole};
use crate::imgpath::{resolve_dest, Dest, ImageArg};
use crate::progress::Progress;
use crate::session::join_display;
use lanefs::{Attr, FileType, Fs, Ino, Owner, SetAttr, XattrFlags};
use rustix::fs::Stat;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Mutex;

mod archive;
mod fill;
mod measure;
mod outcome;
mod populate;
mod sources;
mod table;
use crate::devtable::Node;
pub use archive::{keep_source, measure_archive, populate_archive, Archive};
use fill::{changed, work};
pub use measure::{measure, Budget};
use outcome::Outcome;
pub use populate::populate;
use sources::{host_sources, host_total, place, Meta, Source};
use table::{merged, Item};
pub use table::{precheck, Overrides};

/// The page cache of a copy in: nothing written is read again, and each worker writes a
/// file back once it is filled, so a small cache lets its memory be reused at once
/// (measured by scripts/bench-mkfs-d.sh: 0.55 s against 0.62 s with the default of an
/// eighth of the machine's memory, the fresh memory's page faults and zeroing saved).
const COPY_PAGECACHE: u64 = 64 << 20;

/// Copy `srcs` from the host to `dst` inside an image.
pub fn copy_in(srcs: &[PathBuf], dst: &ImageArg, flags: super::Flags) -> CmdResult<i32> {
    let sources = host_sources(srcs, flags.recursive)?;
    let progress = if Progress::wanted() {
        Progress::new(sources.iter().map(host_total).sum())
    } else {
        Progress::hidden()
    };
    let opts = lanefs::MountOptions {
        pagecache_limit: COPY_PAGECACHE,
        ..crate::session::mount_options(false)
    };
    let result = crate::session::with_fs_opts(&dst.image, opts, |fs| {
        let dest = resolve_dest(fs, &dst.path).ctx(dst.display())?;
        let is_dir = matches!(&dest, Dest::Exists(f) if f.attr.kind == FileType::Directory);
        if srcs.len() > 1 && !is_dir {
            return Err(Failure::new(dst.display(), lanefs::Error::NotDir));
        }
        let ctx = Ctx {
            fs,
            progress: &progress,
            clamp: None,
            flags,
            over: &Overrides::default(),
            budget: None,
            lend: false,
        };
        walk(ctx, |copier| {
            let mut made = HashSet::new();
            for src in &sources {
                let (dir, name, shown) = place(&dest, &src.path, dst)?;
                if !made.insert((dir, name.clone())) {
                    let msg = format!("will not overwrite just-created {shown} with it");
                    return Err(Failure::new(src.path.display(), Error::msg(msg)));
                }
                copier.top(src, dir, &name, &shown)?;
            }
            Ok(())
        })
    });
    progress.finish();
    result
}

/// Run `walker` (which makes the names) while workers write the files' data it hands
/// them. The first error stops the walk; what the workers had in hand is written or,
/// once an error is in, left; every error is reported and every file not copied whole
/// removed (`outcome`).
fn walk(ctx: Ctx<'_>, walker: impl FnOnce(&Copier<'_>) -> CmdResult<()>) -> CmdResult<i32> {
    let failed: Mutex<Outcome> = Mutex::new(Outcome::default());
    // File data is written by workers while this thread walks the tree and makes the
    // names (a directory's own attributes are set after its last name).
    let block_size = u64::from(ctx.fs.statfs().ctx("statfs")?.block_size);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(256);
    let rx = Mutex::new(rx);
    let walked = std::thread::scope(|scope| {
        for _ in 0..workers() {
            scope.spawn(|| work(ctx, &rx, &failed));
        }
        let copier = Copier {
            ctx,
            links: RefCell::new(HashMap::new()),
            jobs: tx,
            failed: &failed,
            buf: RefCell::new(Vec::new()),
            block_size,
            made: RefCell::new(HashSet::new()),
            link_names: RefCell::new(Vec::new()),
            stopped: std::cell::Cell::new(false),
        };
        let walked = walker(&copier);
        (walked, copier.stopped.get(), copier.link_names.take())
    });
    let (walked, stopped, links) = walked;
    let mut outcome = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    match walked {
        // The walk stopped for the workers' error, which is in already.
        Err(_) if stopped => {}
        Err(e) => outcome.errors.push(e),
        Ok(()) => {}
    }
    outcome.settle(ctx.fs, &links, ctx.progress)
}

/// Threads writing file data: one per CPU, at most 8.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// What every thread of a copy shares.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    fs: &'a Fs,
    progress: &'a Progress,
    /// A reproducible build's latest time (`populate`): host times are clamped to it.
    clamp: Option<i64>,
    /// `cp -n` and `-v`.
    flags: super::Flags,
    /// What `mkfs` changes of the tree's owners and modes, and adds to it.
    over: &'a Overrides,
    /// What the tree was counted to need when the image was sized for it.
    budget: Option<&'a Budget>,
    /// Whether file data is lent to the device rather than copied (a sparse build:
    /// `crate::sparse::lend`).
    lend: bool,
}

impl Ctx<'_> {
    /// One more inode, for `shown`, out of the budget (if any).
    fn spend_inode(&self, shown: &str) -> CmdResult<()> {
        self.budget.map_or(Ok(()), |b| b.inode(&shown))
    }
}

/// One regular file whose name exists (open, as create leaves it): its data, xattrs and
/// attributes are still to be written from `file`, the host file opened and checked.
struct Job {
    file: File,
    path: PathBuf,
    meta: Meta,
    ino: Ino,
    /// Where the walk made (or found) its name.
    dir: Ino,
    name: Vec<u8>,
    truncate: bool,
    shown: String,
    /// Every byte of the host file's data segments is written, zeros too (its blocks were
    /// preallocated by the walk; a skipped zero run would split their extents).
    dense: bool,
    /// The walk already copied its xattrs.
    xattrs_done: bool,
}

/// Where a host entry's xattrs are read from.
enum XattrSource<'a> {
    /// A file or directory open as this descriptor.
    Fd(std::os::fd::BorrowedFd<'a>),
    /// A symlink or node: this name in this directory (not followed).
    At(&'a HostDir, &'a OsStr),
}

/// A host directory being copied: its descriptor, the image directory it fills, and the
/// names still to copy. Its path is rebuilt from the stack's names when needed (a path
/// per frame would cost depth times depth).
struct Frame<'t> {
    host: HostDir,
    /// Its name in its parent (empty for the tree's top).
    name: Vec<u8>,
    meta: Meta,
    ino: Ino,
    /// Its names, with what the device table lists there.
    names: std::vec::IntoIter<Item<'t>>,
}

/// What the walk knows of a host entry: its `lstat`, or the regular file it opened.
enum Found {
    Stat(Meta),
    Open(File),
}

/// The metadata of host file `file` (at `path`), opened as a regular file: an error if
/// it is not one now.
fn regular_meta(file: &File, path: &Path) -> CmdResult<Meta> {
    let now = Meta::from(
        rustix::fs::fstat(file)
            .map_err(std::io::Error::from)
            .ctx(path.display())?,
    );
    if now.kind != HostType::RegularFile {
        return Err(changed(path));
    }
    Ok(now)
}

/// The host path and the image path (for messages) of `name` in the directory on top of
/// `stack`, or of that directory itself, for a tree copied from `path` to `shown`.
fn located(
    stack: &[Frame<'_>],
    path: &Path,
    shown: &str,
    name: Option<&[u8]>,
) -> (PathBuf, String) {
    let names = stack.iter().skip(1).map(|f| f.name.as_slice()).chain(name);
    names.fold((path.to_path_buf(), shown.to_string()), |(p, s), n| {
        (p.join(OsStr::from_bytes(n)), join_display(&s, n))
    })
}

/// The walk of one copy into one mounted image.
struct Copier<'a> {
    ctx: Ctx<'a>,
    /// Host files with more than one name, by (device, inode), and the image inode their
    /// first name was copied to (with what it was given): later names become hard links
    /// to it, as `cp -a` does.
    links: RefCell<HashMap<(u64, u64), (Ino, Meta)>>,
    jobs: SyncSender<Job>,
    failed: &'a Mutex<Outcome>,
    /// The names `link` made: removed with their inode's first name if its copy does
    /// not finish.
    link_names: RefCell<Vec<outcome::Name>>,
    /// The walk stopped because a worker's error is in `failed`.
    stopped: std::cell::Cell<bool>,
    /// The walk's own data buffer, for files it writes itself (a reproducible build).
    buf: RefCell<Vec<u8>>,
    /// The image's block size (read once: `statfs` takes the superblock's lock).
    block_size: u64,
    /// Image directories this copy made: each gets the names of one host directory's
    /// listing, all different, so none is there before it is copied.
    made: RefCell<HashSet<Ino>>,
}

impl Copier<'_> {
    /// What `dir` already holds under `name`, if anything.
    fn existing(&self, dir: Ino, name: &[u8], shown: &str) -> CmdResult<Option<Attr>> {
        if self.made.borrow().contains(&dir) {
            return Ok(None);
        }
        match self.ctx.fs.lookup(dir, name) {
            Ok(attr) => Ok(Some(attr)),
            Err(lanefs::Error::NotFound) => Ok(None),
            Err(e) => Err(Failure::new(shown, e)),
        }
    }

    /// Copy source `src` to `dir/name`, shown as `shown`.
    fn top(&self, src: &Source, dir: Ino, name: &[u8], shown: &str) -> CmdResult<()> {
        match src.parent()? {
            Some((parent, host_name)) => {
                let meta = parent
                    .lstat(host_name)
                    .ctx(src.path.display())?
                    .ok_or_else(|| Failure::new(src.path.display(), lanefs::Error::NotFound))?;
                let meta = Meta::from(meta);
                let found = Found::Stat(meta);
                self.entry(&parent, host_name, &src.path, found, dir, name, shown, None)
            }
            None => {
                let host = HostDir::open_path_readable(&src.path).ctx(src.path.display())?;
                let meta = Meta::from(host.stat().ctx(src.path.display())?);
                if !meta.same(&src.meta) {
                    return Err(changed(&src.path));
                }
                self.tree(host, src.path.clone(), meta, dir, name, shown)
            }
        }
    }

    /// Copy host entry `host_name` of `parent` (at host path `path`, as `meta` says it
    /// was when listed; not followed if a symlink) to `dir/name`, shown as `shown`, with
    /// what the device table's `node` says of it.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &self,
        parent: &HostDir,
        host_name: &OsStr,
        path: &Path,
        found: Found,
        dir: Ino,
        name: &[u8],
        shown: &str,
        node: Option<&Node>,
    ) -> CmdResult<()> {
        let meta = match found {
            Found::Stat(meta) => meta,
            Found::Open(file) => {
                let meta = regular_meta(&file, path)?;
                let at = (dir, name, shown, node);
                return self.entry_as(parent, host_name, path, meta, Some(file), at);
            }
        };
        if meta.kind == HostType::Directory {
            let host = parent
                .open_dir(host_name)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOTDIR | libc::ELOOP) => changed(path),
                    _ => Failure::new(path.display(), e),
                })?;
            let meta = Meta::from(host.stat().ctx(path.display())?);
            return self.tree(host, path.to_path_buf(), meta, dir, name, shown);
        }
        // A regular file is opened now: what is copied is what this descriptor reads.
        let (meta, file) = if meta.kind == HostType::RegularFile {
            let file = parent
                .open_read(host_name)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP) => changed(path),
                    _ => Failure::new(path.display(), e),
                })?;
            (regular_meta(&file, path)?, Some(file))
        } else {
            (meta, None)
        };
        self.entry_as(
            parent,
            host_name,
            path,
            meta,
            file,
            (dir, name, shown, node),
        )
    }

    /// Copy host non-directory `host_name` of `parent`, as `meta` says it is (and open as
    /// `file` when regular), to `dir/name` (shown as `shown`), with what the device
    /// table's `node` says of it.
    fn entry_as(
        &self,
        parent: &HostDir,
        host_name: &OsStr,
        path: &Path,
        meta: Meta,
        file: Option<File>,
        (dir, name, shown, node): (Ino, &[u8], &str, Option<&Node>),
    ) -> CmdResult<()> {
        let meta = self.ctx.shaped(meta, node, shown)?;
        let existing = self.existing(dir, name, shown)?;
        if existing.is_some() && self.ctx.flags.no_clobber {
            return Ok(());
        }
        self.ctx.flags.said(&path.display().to_string(), shown);
        let linked = (meta.nlink > 1)
            .then(|| self.links.borrow().get(&(meta.dev, meta.ino)).copied())
            .flatten();
        if let Some((target, first)) = linked {
            self.link_fits(&first, node, shown)?;
            return self.link(target, dir, name, existing, shown);
        }
        self.ctx.spend_inode(shown)?;
        let mut reuse = None;
        if let Some(old) = existing {
            if old.kind == FileType::Directory {
                return Err(Failure::new(
                    shown,
                    Error::msg("cannot overwrite a directory with a non-directory"),
                ));
            }
            if file.is_some() && old.kind == FileType::Regular {
                reuse = Some(old.ino);
            } else {
                self.ctx.fs.unlink(dir, name).ctx(shown)?;
            }
        }
        let ino = if let Some(file) = file {
            self.file(file, path, meta, dir, name, reuse, shown)?
        } else if meta.kind == HostType::Symlink {
            let target = parent.read_link(host_name).ctx(path.display())?;
            self.ctx
                .fs
                .symlink(dir, name, &target, meta.owner())
                .ctx(shown)?
                .ino
        } else {
            let rdev = rdev_to_ext4(meta.rdev);
            self.ctx
                .fs
                .mknod(dir, name, meta.mode, rdev, meta.owner())
                .ctx(shown)?
                .ino
        };
        if meta.nlink > 1 {
            self.links
                .borrow_mut()
                .insert((meta.dev, meta.ino), (ino, meta));
        }
        if meta.kind == HostType::RegularFile {
            // Its worker sets its attributes once the data is in.
            return Ok(());
        }
        self.ctx.finish(
            Some(XattrSource::At(parent, host_name)),
            path,
            ino,
            &meta,
            shown,
        )
    }

    /// Make `dir/name` another name of image inode `target` (replacing what was there).
    fn link(
        &self,
        target: Ino,
        dir: Ino,
        name: &[u8],
        existing: Option<Attr>,
        shown: &str,
    ) -> CmdResult<()> {
        match existing {
            Some(old) if old.ino == target => return Ok(()),
            Some(old) if old.kind == FileType::Directory => {
                return Err(Failure::new(
                    shown,
                    Error::msg("cannot overwrite a directory with a non-directory"),
                ))
            }
            Some(_) => self.ctx.fs.unlink(dir, name).ctx(shown)?,
            None => {}
        }
        self.ctx.fs.link(target, dir, name).ctx(shown)?;
        let made = outcome::Name {
            ino: target,
            dir,
            name: name.to_vec(),
            shown: shown.to_string(),
        };
        self.link_names.borrow_mut().push(made);
        Ok(())
    }

    /// Make (or reuse) image directory `dir/name` for host directory `host`.
    fn make_dir(
        &self,
        from: &Path,
        meta: &Meta,
        dir: Ino,
        name: &[u8],
        shown: &str,
    ) -> CmdResult<Ino> {
        match self.existing(dir, name, shown)? {
            Some(old) if old.kind == FileType::Directory => {
                // Made by this copy from another source (`cp -r a a IMG:/`): it now gets
                // a second listing's names.
                self.made.borrow_mut().remove(&old.ino);
                Ok(old.ino)
            }
            Some(_) => Err(Failure::new(
                shown,
                Error::msg("cannot overwrite a non-directory with a directory"),
            )),
            None => {
                self.ctx.spend_inode(shown)?;
                let ino = self
                    .ctx
                    .fs
                    .mkdir(dir, name, meta.perm(), meta.owner())
                    .ctx(shown)?
                    .ino;
                self.ctx.flags.said(&from.display().to_string(), shown);
                self.made.borrow_mut().insert(ino);
                Ok(ino)
            }
        }
    }

    /// Copy host directory `host` (at `path`) and everything in it to `dir/name`, each
    /// directory's attributes after its last name.
    fn tree(
        &self,
        host: HostDir,
        path: PathBuf,
        meta: Meta,
        dir: Ino,
        name: &[u8],
        shown: &str,
    ) -> CmdResult<()> {
        let ino = self.make_dir(&path, &meta, dir, name, shown)?;
        self.tree_into(host, path, meta, ino, shown, None)
    }

    /// Copy what host directory `host` (at `path`) holds into image directory `ino`, then
    /// give `ino` the host directory's xattrs and attributes; `table` is the device
    /// table's node for it.
    fn tree_into(
        &self,
        host: HostDir,
        path: PathBuf,
        meta: Meta,
        ino: Ino,
        shown: &str,
        table: Option<&Node>,
    ) -> CmdResult<()> {
        let mut on_path = HashSet::from([(meta.dev, meta.ino)]);
        let names = host.listing().ctx(path.display())?;
        let mut stack = vec![Frame {
            host,
            name: Vec::new(),
            meta,
            ino,
            names: merged(names, table).into_iter(),
        }];
        while let Some(top) = stack.last_mut() {
            let Some(child) = top.names.next() else {
                self.finish_frame(&mut stack, &mut on_path, &path, shown)?;
                continue;
            };
            if let Some(frame) = self.tree_child(&stack, &mut on_path, &path, shown, child)? {
                stack.push(frame);
            }
        }
        Ok(())
    }

    /// The directory on top of the walk's `stack` has no names left: it leaves the stack
    /// (and `on_path`, the host directories being walked) and its image directory gets
    /// the host directory's xattrs and attributes, after its last name.
    fn finish_frame(
        &self,
        stack: &mut Vec<Frame<'_>>,
        on_path: &mut HashSet<(u64, u64)>,
        path: &Path,
        shown: &str,
    ) -> CmdResult<()> {
        let (here, here_shown) = located(stack, path, shown, None);
        let done = stack.pop().expect("a frame");
        on_path.remove(&(done.meta.dev, done.meta.ino));
        let fd = std::os::fd::AsFd::as_fd(&done.host);
        let src = XattrSource::Fd(fd);
        self.ctx
            .finish(Some(src), &here, done.ino, &done.meta, &here_shown)
    }

    /// Copy `child`, a name of the directory on top of the walk's `stack`: a name only
    /// the device table lists is made from the table; a host file is copied (one removed
    /// since it was listed is as if it never was); a host directory is made in the image
    /// and returned as the frame to walk next. A directory already on the walk's path
    /// (`on_path`: one that contains itself) is an error.
    fn tree_child<'t>(
        &self,
        stack: &[Frame<'t>],
        on_path: &mut HashSet<(u64, u64)>,
        path: &Path,
        shown: &str,
        child: Item<'t>,
    ) -> CmdResult<Option<Frame<'t>>> {
        let (
            Listed {
                name: child,
                regular,
            },
            node,
        ) = match child {
            Item::Host(listed, node) => (listed, node),
            Item::Table(name, node) => {
                let (_, child_shown) = located(stack, path, shown, Some(&name));
                let dir = stack.last().expect("a frame").ino;
                self.make_listed(dir, &name, node, &child_shown)?;
                return Ok(None);
            }
        };
        let (child_path, child_shown) = located(stack, path, shown, Some(&child));
        let top = stack.last().expect("a frame");
        let host_name = OsStr::from_bytes(&child);
        let (h, i) = (&top.host, top.ino);
        // Removed since it was listed: as if it never was (what the table lists there
        // is made from the table).
        let gone = |child: &[u8]| match node {
            Some(node) => self.make_listed(i, child, node, &child_shown),
            None => Ok(()),
        };
        if regular {
            // Listed as a regular file: opened at once, its fstat its metadata.
            match h.open_read(host_name) {
                Ok(file) => {
                    let found = Found::Open(file);
                    let (p, s) = (&child_path, &child_shown);
                    self.entry(h, host_name, p, found, i, &child, s, node)?;
                    return Ok(None);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    gone(&child)?;
                    return Ok(None);
                }
                // Replaced since (a symlink: ELOOP): looked at again below.
                Err(_) => {}
            }
        }
        let Some(meta) = h.lstat(host_name).ctx(child_path.display())? else {
            gone(&child)?;
            return Ok(None);
        };
        let meta = Meta::from(meta);
        if meta.kind != HostType::Directory {
            let found = Found::Stat(meta);
            let (p, s) = (&child_path, &child_shown);
            self.entry(h, host_name, p, found, i, &child, s, node)?;
            return Ok(None);
        }
        let host = top
            .host
            .open_dir(host_name)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR | libc::ELOOP) => changed(&child_path),
                _ => Failure::new(child_path.display(), e),
            })?;
        let meta = Meta::from(host.stat().ctx(child_path.display())?);
        if !on_path.insert((meta.dev, meta.ino)) {
            let msg = "a directory that contains itself (a bind mount?)";
            return Err(Failure::new(child_path.display(), Error::msg(msg)));
        }
        let meta = self.ctx.shaped(meta, node, &child_shown)?;
        let ino = self.make_dir(&child_path, &meta, top.ino, &child, &child_shown)?;
        let names = host.listing().ctx(child_path.display())?;
        Ok(Some(Frame {
            host,
            name: child,
            meta,
            ino,
            names: merged(names, node).into_iter(),
        }))
    }

    /// Make regular file `dir/name` (or reuse `reuse`) and hand its data to a worker.
    #[allow(clippy::too_many_arguments)]
    fn file(
        &self,
        file: File,
        path: &Path,
        meta: Meta,
        dir: Ino,
        name: &[u8],
        reuse: Option<Ino>,
        shown: &str,
    ) -> CmdResult<Ino> {
        if Outcome::stopped(self.failed) {
            self.stopped.set(true);
            return Err(Failure::new(
                shown,
                Error::msg("not copied: the copy stopped"),
            ));
        }
        let ino = match reuse {
            Some(ino) => {
                self.ctx.fs.open(ino).ctx(shown)?;
                ino
            }
            None => {
                self.ctx
                    .fs
                    .create(dir, name, meta.perm(), meta.owner())
                    .ctx(shown)?
                    .ino
            }
        };
        let mut job = Job {
            file,
            path: path.to_path_buf(),
            meta,
            ino,
            dir,
            name: name.to_vec(),
            truncate: reuse.is_some(),
            shown: shown.to_string(),
            dense: false,
            xattrs_done: false,
        };
        let by_worker = match self.ctx.clamp {
            Some(_) => self.allocate_in_order(&mut job),
            None => Ok(true),
        };
        // A new file is left unfinished by a failure here; one to overwrite was not
        // emptied yet (its worker empties it first) and keeps its old data.
        let unfinished = |job: &Job, e: Failure| {
            if !job.truncate {
                Outcome::fail(self.failed, job, None);
            }
            Err(e)
        };
        match by_worker {
            Ok(true) => {}
            Ok(false) => {
                // Written here: a small file, a block-mapped one, or one whose extents a
                // worker's writes could outgrow the inode's room for.
                let mut buf = self.buf.borrow_mut();
                buf.resize(CHUNK, 0);
                return match self.ctx.run(&mut buf, &job) {
                    Ok(()) => Ok(ino),
                    // Emptied first, then not filled: unfinished either way.
                    Err(e) => {
                        Outcome::fail(self.failed, &job, None);
                        Err(e)
                    }
                };
            }
            Err(e) => {
                let _ = self.ctx.fs.release(ino);
                return unfinished(&job, e);
            }
        }
        if let Err(std::sync::mpsc::SendError(job)) = self.jobs.send(job) {
            let _ = self.ctx.fs.release(ino);
            return unfinished(
                &job,
                Failure::new(shown, Error::msg("the copy's workers ended")),
            );
        }
        Ok(ino)
    }
}

impl Copier<'_> {
    /// A reproducible build's file (`populate` with a clamp): what allocates is done
    /// here, in walk order, so no block's place depends on which worker ran first. Its
    /// xattrs are set, and its data segments preallocated (as unwritten extents a worker
    /// then fills whole, so converting them allocates nothing). False when the walk must
    /// write the file itself: one block or less, a block-mapped file (no preallocation),
    /// or four extents or more (filling them could need a new extent block).
    fn allocate_in_order(&self, job: &mut Job) -> CmdResult<bool> {
        let (fs, ino, shown) = (self.ctx.fs, job.ino, job.shown.clone());
        let fd = std::os::fd::AsFd::as_fd(&job.file);
        self.ctx
            .xattrs(&XattrSource::Fd(fd), &job.path, ino, &shown)?;
        job.xattrs_done = true;
        if job.meta.size <= self.block_size {
            return Ok(false);
        }
        let keep = lanefs::FallocMode {
            keep_size: true,
            ..lanefs::FallocMode::default()
        };
        let mut pos = 0;
        let mut by_worker = true;
        while let Some(start) = seek_data_hole(&job.file, pos, false).ctx(job.path.display())? {
            let end = seek_data_hole(&job.file, start, true)
                .ctx(job.path.display())?
                .unwrap_or(job.meta.size)
                .max(start);
            if end == start {
                break;
            }
            match fs.fallocate(ino, keep, start, end - start) {
                Ok(()) => {}
                Err(lanefs::Error::NotSupported(_)) => {
                    by_worker = false;
                    break;
                }
                Err(e) => return Err(Failure::new(&shown, e)),
            }
            pos = end;
        }
        // The preallocation window past the file goes back now, before the next file
        // allocates (a worker's close would return it at no fixed time).
        fs.release(ino).ctx(&shown)?;
        fs.open(ino).ctx(&shown)?;
        if by_worker && fs.extents(ino).ctx(&shown)?.len() >= 4 {
            by_worker = false;
        }
        job.dense = by_worker;
        Ok(by_worker)
    }
}
