//! `mkfs` and `info`: whole-image commands (`fsck` is in its own module).

use crate::cli::{InfoArgs, MkfsArgs};
use crate::error::{CmdResult, Context, Error, Failure};
use crate::size::{human, parse_size, parse_size_arg, SizeArg, DEFAULT_SLACK};
use lanefs::info::report as info_report;
use lanefs::mkfs::{format, MkfsOptions};
use lanefs::{BlockDevice, FileDevice};
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// What is at the path `mkfs` is asked to format.
enum Existing {
    /// Nothing.
    Missing,
    /// A regular file of this many bytes.
    File(u64),
    /// A block device.
    Device,
}

/// Look at `path` before formatting it.
fn existing(path: &Path) -> CmdResult<Existing> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => Ok(Existing::Device),
        Ok(m) if m.is_file() => Ok(Existing::File(m.len())),
        Ok(_) => Err(Failure::new(
            path.display(),
            Error::msg("not a regular file or block device"),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Existing::Missing),
        Err(e) => Err(Failure::new(path.display(), e)),
    }
}

/// What `path` (an existing file or device) holds that mke2fs asks about before
/// overwriting it: "an ext4 file system", "a DOS partition table", ... (read before the
/// image is opened to write: a reader's shared claim).
fn holds_signature(path: &Path) -> CmdResult<Option<String>> {
    let dev = FileDevice::open(path, true).ctx(path.display())?;
    lanefs::mkfs::existing_signature(&dev).ctx(path.display())
}

/// Go on over what `path` holds (`what`) only when the user says so: asked on a
/// terminal as mke2fs asks ("Proceed anyway? (y,N)"), refused otherwise.
fn confirm_overwrite(path: &Path, what: &str) -> CmdResult<()> {
    use std::io::IsTerminal;
    let refuse = || {
        let msg = format!("already holds {what} (use --force to overwrite)");
        Err(Failure::new(path.display(), Error::msg(msg)))
    };
    if !std::io::stdin().is_terminal() {
        return refuse();
    }
    eprint!("{} holds {what}. Proceed anyway? (y,N) ", path.display());
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => refuse(),
    }
}

/// Empty the regular file `dev` formats whole (punched, reading as zeros after), as
/// mke2fs discards a file before formatting it: nothing of what it held before stays
/// in it, in free blocks either. False when the host file system cannot punch holes.
fn punch_whole(path: &Path, len: u64) -> bool {
    use rustix::fs::{fallocate, FallocateFlags};
    let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) else {
        return false;
    };
    fallocate(
        &f,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        0,
        len,
    )
    .is_ok()
}

/// A count or size option: digits with an optional K/M/G/T suffix, in one line on error.
fn number(flag: &str, text: &Option<String>) -> CmdResult<Option<u64>> {
    text.as_deref()
        .map(|t| parse_size(t).map_err(|e| Failure::new(flag, Error::Msg(e))))
        .transpose()
}

/// A number that must fit in 32 bits.
fn number32(flag: &str, text: &Option<String>) -> CmdResult<Option<u32>> {
    number(flag, text)?
        .map(|n| {
            u32::try_from(n)
                .map_err(|_| Failure::new(flag, Error::msg(format!("{n} is too large"))))
        })
        .transpose()
}

/// What `-E` asks for besides the engine's options.
#[derive(Default)]
struct Extended {
    /// `root_owner`: the owner of the root directory.
    root_owner: Option<(u32, u32)>,
    /// `android_sparse`: write an Android sparse image (`--sparse-output`).
    android_sparse: bool,
}

/// Engine options from the command line (what is not given is left to the mke2fs rules),
/// and what `-E` asks for besides.
fn mkfs_options(args: &MkfsArgs) -> CmdResult<(MkfsOptions, Extended)> {
    let mut ext = Extended::default();
    let mut opts = MkfsOptions::mke2fs();
    if let Some(label) = &args.label {
        opts.label = label.clone();
    }
    opts.fs_type = args.fs_type.clone();
    opts.usage_types = args.usage_types.clone();
    opts.features = args.features.join(",");
    opts.block_size = number32("-b", &args.block_size)?;
    opts.inode_size = number32("-I", &args.inode_size)?;
    opts.inodes = number("-N", &args.inodes)?;
    opts.inode_ratio = number("-i", &args.inode_ratio)?;
    opts.journal_blocks = args.journal_blocks;
    if let Some(pct) = args.reserved_percent {
        opts.reserved_percent = pct;
    }
    opts.device_name = args.image.display().to_string();
    if let Some(u) = &args.uuid {
        opts.uuid = match u.as_str() {
            "random" => None,
            "clear" => Some([0; 16]),
            text => Some(parse_uuid(text).map_err(|e| Failure::new("-U", Error::msg(e)))?),
        };
    }
    for opt in args.extended.iter().flat_map(|e| e.split(',')) {
        match opt.split_once('=') {
            Some(("hash_seed", v)) => {
                let seed =
                    parse_uuid(v).map_err(|e| Failure::new("-E hash_seed", Error::msg(e)))?;
                opts.hash_seed = Some(seed);
            }
            Some(("root_owner", v)) => ext.root_owner = Some(parse_owner(v)?),
            None if opt == "root_owner" => ext.root_owner = Some(running_user()),
            None if opt == "android_sparse" => ext.android_sparse = true,
            _ => {
                let msg = format!(
                    "unknown extended option '{opt}' (lanefs knows hash_seed=UUID, \
                     root_owner[=UID:GID], android_sparse)"
                );
                return Err(Failure::new("-E", Error::msg(msg)));
            }
        }
    }
    opts.time = source_date_epoch()?.map(|sec| lanefs::Timespec { sec, nsec: 0 });
    Ok((opts, ext))
}

/// `-E root_owner=UID:GID`, each number as mke2fs reads it (`strtoul` with base 0:
/// decimal, `0x` hexadecimal, a leading `0` octal), 32 bits each.
fn parse_owner(text: &str) -> CmdResult<(u32, u32)> {
    let number = |t: &str| -> Option<u32> {
        let (digits, radix) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None if t.len() > 1 && t.starts_with('0') => (&t[1..], 8),
            None => (t, 10),
        };
        let ok = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
        ok.then(|| u32::from_str_radix(digits, radix).ok())
            .flatten()
    };
    text.split_once(':')
        .and_then(|(u, g)| Some((number(u)?, number(g)?)))
        .ok_or_else(|| {
            let msg = format!("'{text}' is not UID:GID (two numbers of 32 bits)");
            Failure::new("-E root_owner", Error::msg(msg))
        })
}

/// The real user and group ids of this process, what `-E root_owner` with no value
/// gives the root directory (mke2fs calls getuid and getgid).
fn running_user() -> (u32, u32) {
    // SAFETY: getuid(2) and getgid(2) take nothing, touch no memory and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// A UUID in its text form, 8-4-4-4-12 hex digits.
fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let groups: Vec<&str> = text.split('-').collect();
    let hex: String = groups.concat();
    let shape = groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12];
    if !shape || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("'{text}' is not a UUID (8-4-4-4-12 hex digits)"));
    }
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    Ok(u)
}

/// `SOURCE_DATE_EPOCH` (reproducible-builds.org): seconds since 1970, or unset.
fn source_date_epoch() -> CmdResult<Option<i64>> {
    let Some(v) = std::env::var_os("SOURCE_DATE_EPOCH") else {
        return Ok(None);
    };
    let text = v.to_string_lossy();
    text.parse::<i64>()
        .ok()
        .filter(|&s| (0..=(1 << 34)).contains(&s))
        .map(Some)
        .ok_or_else(|| {
            let msg = format!("'{text}' is not a time in seconds since 1970");
            Failure::new("SOURCE_DATE_EPOCH", Error::msg(msg))
        })
}

/// The size the file system will have: `--size`, or what is there now (`None` when
/// nothing is, which `open_target` reports).
fn target_size(path: &Path, size: Option<u64>) -> CmdResult<Option<u64>> {
    if size.is_some() {
        return Ok(size);
    }
    Ok(match existing(path)? {
        Existing::File(len) => Some(len),
        Existing::Device => Some(FileDevice::open(path, true).ctx(path.display())?.size()),
        Existing::Missing => None,
    })
}

/// Open or create the device to format; the flags say whether the file was created, and
/// whether it reads as zeros (created, or truncated to nothing and extended).
fn open_target(
    args: &MkfsArgs,
    path: &Path,
    size: Option<u64>,
) -> CmdResult<(FileDevice, bool, bool)> {
    let what = path.display();
    let found = existing(path)?;
    let probe =
        matches!(found, Existing::File(len) if len > 0) || matches!(found, Existing::Device);
    if probe && !args.force {
        if let Some(what) = holds_signature(path)? {
            confirm_overwrite(path, &what)?;
        }
    }
    match (found, size) {
        (Existing::Device, Some(_)) => Err(Failure::new(
            what,
            Error::msg("is a block device: its own size is used, drop --size"),
        )),
        (Existing::Device, None) => {
            let dev = FileDevice::open(path, false).ctx(&what)?;
            lanefs::mkfs::clear_ends(&dev).ctx(what)?;
            Ok((dev, false, false))
        }
        (Existing::File(len), None) => {
            let dev = FileDevice::open(path, false).ctx(&what)?;
            if punch_whole(path, len) {
                return Ok((dev, false, true));
            }
            lanefs::mkfs::clear_ends(&dev).ctx(what)?;
            Ok((dev, false, false))
        }
        (Existing::Missing, None) => Err(Failure::new(
            what,
            Error::msg("does not exist: give --size to create it"),
        )),
        (found, Some(size)) => {
            let created = matches!(found, Existing::Missing);
            if created {
                // Name the directory that is missing rather than the I/O error.
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if let Some(dir) = parent.filter(|p| !p.is_dir()) {
                    let msg = format!("directory {} does not exist", dir.display());
                    return Err(Failure::new(what, Error::msg(msg)));
                }
            }
            Ok((FileDevice::create(path, size).ctx(what)?, created, true))
        }
    }
}

/// `lanefs mkfs`.
pub fn mkfs(args: &MkfsArgs) -> CmdResult<i32> {
    let size_arg = match &args.size {
        Some(s) => Some(parse_size_arg(s).map_err(|e| Failure::new("--size", Error::Msg(e)))?),
        None => None,
    };
    let (mut opts, ext) = mkfs_options(args)?;
    // The smallest size that holds the tree, asked for or (-d making a new image
    // without --size) the default: counted before anything is made.
    let slack = match size_arg {
        Some(SizeArg::Min(slack)) => Some(slack),
        None if args.root_dir.is_some() && matches!(existing(&args.image)?, Existing::Missing) => {
            Some(DEFAULT_SLACK)
        }
        _ => None,
    };
    // Before anything is formatted: a source that is neither a directory nor the start
    // of a tar archive changes nothing. An archive on standard input that is to be
    // counted first is kept in a scratch file, to be read twice.
    let source = Source::open(args.root_dir.as_deref(), slack.is_some())?;
    let over = crate::copy::Overrides {
        all_root: args.all_root,
        root_owner: ext.root_owner,
        table: match &args.device_table {
            Some(path) => Some(crate::devtable::Table::read(path)?),
            None => None,
        },
    };
    if let (Some(table), None) = (&over.table, &source.archive) {
        // A listed file the tree lacks, or a type it contradicts, fails here too (an
        // archive is checked as it is read).
        crate::copy::precheck(args.root_dir.as_deref(), table)?;
    }
    let (size, budget, sized) = match slack {
        Some(slack) => {
            let (fit, budget) = fit_tree(args, &source, &opts, &over, slack)?;
            opts = fit.opts;
            let line = format!("sized it to hold the tree: {}\n", human(fit.size));
            (Some(fit.size), budget, line)
        }
        None => match size_arg {
            Some(SizeArg::Bytes(n)) => (Some(n), None, String::new()),
            _ => (None, None, String::new()),
        },
    };
    let archive_path = source.archive_path();
    let fill = Fill {
        over: &over,
        archive: source.archive,
        budget: budget.as_ref(),
        lend: None,
    };
    // Every option and the geometry are checked before anything is cleared: a refused
    // mkfs leaves what was there as it was.
    if args.sparse_output || ext.android_sparse {
        let (size, blk) = sparse_checks(args, size, &opts)?;
        return mkfs_sparse(args, size, blk, &mut opts, fill, sized);
    }
    if let Some(n) = target_size(&args.image, size)? {
        lanefs::mkfs::validate(&opts, n).ctx(args.image.display())?;
    }
    let base = opts.clone();
    let line = build(args, &args.image, size, &mut opts, fill)
        .map_err(|f| with_size_hint(f, args, archive_path.as_deref(), &base, &over, size_arg))?;
    std::io::stdout()
        .write_all((sized + &line).as_bytes())
        .ctx("standard output")?;
    Ok(0)
}

/// The source `-d` names, opened: a directory (nothing to hold open), or a tar archive
/// (its path, unless it is standard input not kept, and its stream for the build).
struct Source {
    archive: Option<crate::copy::Archive>,
    /// Where the archive can be read again: its file, or the scratch copy of standard
    /// input (held open here).
    again: Option<(std::path::PathBuf, Option<std::fs::File>)>,
}

impl Source {
    /// Open `src`; `twice`: an archive will be read once to count it, then to build.
    fn open(src: Option<&Path>, twice: bool) -> CmdResult<Source> {
        let none = Source {
            archive: None,
            again: None,
        };
        let Some(src) = src else {
            return Ok(none);
        };
        let stdin = src.as_os_str() == "-";
        match std::fs::metadata(src) {
            Ok(m) if m.is_dir() && !stdin => return Ok(none),
            Err(e) if !stdin => return Err(Failure::new(src.display(), e)),
            _ => {}
        }
        // A pipe, FIFO or device cannot be read twice: kept, as standard input is.
        let regular = !stdin && std::fs::metadata(src).is_ok_and(|m| m.is_file());
        let again = match (regular, twice) {
            (true, _) => Some((src.to_path_buf(), None)),
            (false, true) => {
                let what = if stdin {
                    "standard input".to_string()
                } else {
                    src.display().to_string()
                };
                let kept = crate::copy::keep_source(src).ctx(&what)?;
                Some((kept.0, Some(kept.1)))
            }
            (false, false) => None,
        };
        let path = again.as_ref().map_or(src, |(p, _)| p.as_path());
        let mut archive = crate::copy::Archive::open(path)?;
        if !regular {
            archive.shown = match stdin {
                true => "standard input".into(),
                false => src.display().to_string(),
            };
        }
        Ok(Source {
            archive: Some(archive),
            again,
        })
    }

    /// The path the archive can be read from again, if it can.
    fn archive_path(&self) -> Option<std::path::PathBuf> {
        self.archive.as_ref()?;
        self.again.as_ref().map(|(p, _)| p.clone())
    }
}

/// What fills the new image: the overrides, the archive `-d` named (else its
/// directory, or nothing), and the budget of a tree the image was sized for.
struct Fill<'a> {
    over: &'a crate::copy::Overrides,
    archive: Option<crate::copy::Archive>,
    budget: Option<&'a crate::copy::Budget>,
    /// A sparse build's lending of file data (`crate::sparse::lend`).
    lend: Option<&'a crate::sparse::lend::Lending>,
}

/// A `-d` build into a size given in bytes that failed: when the tree does not fit that
/// size (counted again, after the failure), say what size it needs.
fn with_size_hint(
    f: Failure,
    args: &MkfsArgs,
    archive: Option<&Path>,
    opts: &MkfsOptions,
    over: &crate::copy::Overrides,
    size_arg: Option<SizeArg>,
) -> Failure {
    let (Some(SizeArg::Bytes(given)), Some(src)) = (size_arg, &args.root_dir) else {
        return f;
    };
    let needs = match archive {
        Some(path) => crate::copy::measure_archive(path, over),
        None if src.as_os_str() == "-" => return f,
        None => crate::copy::measure(Some(src), over),
    };
    let Ok(needs) = needs else {
        return f;
    };
    let Ok(fit) = lanefs::mkfs::min_size(opts, &needs, lanefs::mkfs::Slack::Bytes(0)) else {
        return f;
    };
    // Only a size the tree does not fit is named: any other failure is not about size.
    if fit.size <= given {
        return f;
    }
    let hint = format!(
        "{}; the tree needs at least {} (as --size min makes it)",
        f.error,
        human(fit.size)
    );
    Failure {
        error: Error::Msg(hint),
        ..f
    }
}

/// `--size min[+SLACK]`: the tree (`-d`, a directory or an archive, and the device
/// table's additions) counted, and the smallest size and inode count that hold it with
/// `slack` more; for a directory, the budget that holds the copy to what was counted
/// (an archive read again is the same archive).
fn fit_tree(
    args: &MkfsArgs,
    source: &Source,
    opts: &MkfsOptions,
    over: &crate::copy::Overrides,
    slack: lanefs::mkfs::Slack,
) -> CmdResult<(lanefs::mkfs::Fit, Option<crate::copy::Budget>)> {
    let (needs, budget) = match source.archive_path() {
        Some(path) => (crate::copy::measure_archive(&path, over)?, false),
        None => (crate::copy::measure(args.root_dir.as_deref(), over)?, true),
    };
    let fit = lanefs::mkfs::min_size(opts, &needs, slack).ctx("--size")?;
    Ok((fit, budget.then(|| crate::copy::Budget::of(&needs))))
}

/// Format `image` (the image, or the scratch file of a sparse one) and fill it as asked
/// (from `fill.archive` when `-d` named one); the lines to print (naming `args.image`).
/// A failure removes an image file it created.
fn build(
    args: &MkfsArgs,
    image: &Path,
    size: Option<u64>,
    opts: &mut MkfsOptions,
    fill: Fill<'_>,
) -> CmdResult<String> {
    let over = fill.over;
    let (dev, created, zeroed) = open_target(args, image, size)?;
    opts.prezeroed = zeroed;
    if let Err(e) = format(&dev, opts).and_then(|()| dev.flush()) {
        drop(dev);
        if created {
            let _ = std::fs::remove_file(image);
        }
        return Err(Failure::new(args.image.display(), e));
    }
    let mut line = format!(
        "formatted {} as {} ({})\n",
        args.image.display(),
        args.fs_type.as_deref().unwrap_or("ext4"),
        human(dev.size())
    );
    drop(dev);
    if let Some(rt) = crate::session::rtdev() {
        line += &attach_rt(args, &rt)?;
    }
    // Without -d, only -E root_owner and a device table change the image mkfs made
    // (--all-root: its root and lost+found are owned by 0:0 already).
    let dir = args.root_dir.as_deref();
    if dir.is_some() || over.root_owner.is_some() || over.table.is_some() {
        let clamp = opts.time.map(|t| t.sec);
        let filled = match fill.archive {
            Some(archive) => crate::copy::populate_archive(image, archive, clamp, over),
            None => crate::copy::populate(image, dir, clamp, over, fill.budget, fill.lend),
        };
        if let Err(e) = filled {
            if created {
                let _ = std::fs::remove_file(image);
            }
            return Err(e);
        }
    }
    if let Some(dir) = dir {
        let shown = match dir.as_os_str() == "-" {
            true => "standard input".to_string(),
            false => dir.display().to_string(),
        };
        line += &format!("copied {shown} into it\n");
    }
    if let Some(table) = &args.device_table {
        line += &format!("applied the device table {}\n", table.display());
    }
    Ok(line)
}

/// What `--sparse-output` needs, checked before anything is made: a size (the image is
/// built in a new scratch file), whole blocks of the sparse format, no realtime device,
/// a geometry `opts` can make, and an output path that is no block device and holds
/// nothing mke2fs would ask about (unless `--force`). The size and the sparse block size.
fn sparse_checks(args: &MkfsArgs, size: Option<u64>, opts: &MkfsOptions) -> CmdResult<(u64, u32)> {
    let what = args.image.display();
    let refuse = |msg: String| Err(Failure::new("--sparse-output", Error::msg(msg)));
    let Some(size) = size else {
        return refuse("needs --size (the image is built anew)".into());
    };
    if crate::session::rtdev().is_some() {
        return refuse("cannot write a realtime device (--rtdev)".into());
    }
    let Some(blk) = crate::sparse::block_size_for(size) else {
        return refuse(format!(
            "the size ({size} bytes) must be a multiple of 1024 bytes and at most 2^32 \
             sparse blocks"
        ));
    };
    lanefs::mkfs::validate(opts, size).ctx(&what)?;
    match existing(&args.image)? {
        Existing::Device => {
            let msg = "is a block device: --sparse-output writes a file (flash it with fastboot)";
            return Err(Failure::new(what, Error::msg(msg)));
        }
        Existing::File(len) if len > 0 && !args.force => {
            if let Some(held) = holds_signature(&args.image)? {
                confirm_overwrite(&args.image, &held)?;
            }
        }
        _ => {
            let parent = args.image.parent().filter(|p| !p.as_os_str().is_empty());
            if let Some(dir) = parent.filter(|p| !p.is_dir()) {
                let msg = format!("directory {} does not exist", dir.display());
                return Err(Failure::new(what, Error::msg(msg)));
            }
        }
    }
    Ok((size, blk))
}

/// `mkfs --sparse-output`: build the image in an unseen scratch file beside the output,
/// encode it into a second one, flush that and give it the output's name (an existing
/// file is replaced only then). A failure anywhere leaves no scratch file and the output
/// path as it was.
fn mkfs_sparse(
    args: &MkfsArgs,
    size: u64,
    blk: u32,
    opts: &mut MkfsOptions,
    fill: Fill<'_>,
    sized: String,
) -> CmdResult<i32> {
    let what = args.image.display();
    let raw = crate::sparse::Raw::new(&args.image, size).ctx(&what)?;
    let mut line = sized;
    // A reproducible build lends its files' data (a plain one reads it to skip zeros).
    let lending = crate::sparse::lend::Lending::new(blk);
    let fill = Fill {
        lend: opts.time.is_some().then_some(&lending),
        ..fill
    };
    line += &build(args, raw.path(), Some(size), opts, fill)
        .map_err(|f| rename_failure(f, raw.path(), &args.image))?;
    let placed = lending.take();
    let out = crate::sparse::Scratch::new(&args.image, "sparse").ctx(&what)?;
    let sink = crate::sparse::Sink::new(out.file(), out.path());
    // Without a mapping (no address space for it), the image is read through a window.
    let map = raw.map(size).ok().flatten();
    let image = crate::sparse::Image {
        raw: raw.file(),
        map: map.as_ref().map(|m| m.bytes()),
        len: size,
        placed: &placed,
    };
    let encoded = match image.map {
        Some(_) => crate::sparse::walk_mapped(&image, blk, sink),
        None => crate::sparse::walk(&image, blk, sink),
    };
    let sum = encoded.and_then(|(mut sink, sum)| sink.finish().map(|()| sum));
    // The raw image is let go of (its memory freed, or its scratch file removed) on
    // another thread while the output is flushed, which mostly waits for the disk.
    let freeing = std::thread::spawn(move || {
        drop(map);
        drop(raw);
    });
    let sum = sum
        .and_then(|sum| out.file().sync_data().map(|()| sum))
        .ctx(&what);
    let _ = freeing.join();
    let sum = sum?;
    out.publish(&args.image).ctx(&what)?;
    let kept = u64::from(sum.total_blks) - sum.skip_blocks;
    line += &format!(
        "wrote it as an Android sparse image of {} ({} chunks; {} of {} blocks of {} bytes \
         stored, {} of them as data)\n",
        human(sum.bytes),
        sum.chunks,
        kept,
        sum.total_blks,
        sum.blk_sz,
        sum.raw_blocks
    );
    std::io::stdout()
        .write_all(line.as_bytes())
        .ctx("standard output")?;
    Ok(0)
}

/// A failure of the build in a scratch file, worded with the output's path instead.
fn rename_failure(f: Failure, scratch: &Path, output: &Path) -> Failure {
    let (from, to) = (scratch.display().to_string(), output.display().to_string());
    let text = f.error.to_string();
    let error = if text.contains(&from) {
        Error::Msg(text.replace(&from, &to))
    } else {
        f.error
    };
    Failure {
        what: f.what.replace(&from, &to),
        error,
        code: f.code,
    }
}

/// Most rt groups `mkfs --rtdev` makes by default: enough for the threads of a small
/// machine to allocate under different locks, few enough that each holds long free runs.
const DEFAULT_RT_GROUPS: u64 = 8;

/// The block size of the image at `path`, from its superblock.
fn image_block_size(path: &Path) -> CmdResult<u32> {
    use lanefs::internals::disk::superblock::{Superblock, SB_OFFSET, SB_SIZE};
    let what = path.display();
    let dev = FileDevice::open(path, true).ctx(&what)?;
    let mut raw = vec![0u8; SB_SIZE];
    dev.read_at(SB_OFFSET, &mut raw).ctx(&what)?;
    Ok(Superblock::decode(&raw, dev.size())
        .ctx(&what)?
        .block_size())
}

/// Give the just-formatted image its realtime data device (`--rtdev`).
fn attach_rt(args: &MkfsArgs, rt: &Path) -> CmdResult<String> {
    let what = rt.display();
    if let Some(s) = &args.rtsize {
        let size = parse_size(s).map_err(|e| Failure::new("--rtsize", Error::Msg(e)))?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(rt)
            .ctx(&what)?;
        f.set_len(size).ctx(&what)?;
    } else if !rt.exists() {
        return Err(Failure::new(
            what,
            Error::msg("does not exist: give --rtsize to create it"),
        ));
    }
    let rextsize = args.rtextsize.unwrap_or(1);
    let groups = match args.rtgroup_blocks {
        Some(n) => n,
        None => {
            // Whole bitmap blocks per group, at most DEFAULT_RT_GROUPS groups.
            let rt_bytes = FileDevice::open(rt, true).ctx(&what)?.size();
            let bs = u64::from(image_block_size(&args.image)?);
            let extents = rt_bytes / (bs * u64::from(rextsize.max(1)));
            let bmblocks = extents.div_ceil(bs * 8);
            u32::try_from(bmblocks.div_ceil(DEFAULT_RT_GROUPS)).unwrap_or(u32::MAX)
        }
    };
    let geo = lanefs::format_rt(&args.image, rt, rextsize, groups)
        .map_err(|e| Failure::new(args.image.display(), e))?;
    Ok(format!(
        "realtime device {}: {} extents of {} bytes in {} group(s) ({})\n",
        rt.display(),
        geo.rextents,
        geo.extent_bytes(),
        geo.groups(),
        human(geo.device_bytes())
    ))
}

/// Open an image or device read-only, with a note when another program writes it; a
/// missing path gives a plain host error.
pub fn open_device(path: &Path) -> Result<FileDevice, Error> {
    std::fs::metadata(path)?;
    let dev = FileDevice::open_snapshot(path)?;
    crate::holders::note_if_shared(path);
    Ok(dev)
}

/// `lanefs info`.
pub fn info(args: &InfoArgs) -> CmdResult<i32> {
    let what = args.image.display();
    let dev = open_device(&args.image).ctx(&what)?;
    let mut text = info_report(&dev).ctx(&what)?;
    if let Some(who) = lanefs::sharing_note(&args.image) {
        // What lanefs may do with it now, not only what its features allow.
        let key = "lanefs access:";
        let lines: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix(key) {
                Some(rest) => {
                    let later = rest.trim();
                    format!(
                        "{key}{:pad$}read-only now ({who}); {later} once it is free",
                        "",
                        pad = rest.len() - rest.trim_start().len()
                    )
                }
                None => l.to_string(),
            })
            .collect();
        text = lines.join("\n") + "\n";
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).ctx("standard output")?;
    if !text.ends_with('\n') {
        out.write_all(b"\n").ctx("standard output")?;
    }
    Ok(0)
}
