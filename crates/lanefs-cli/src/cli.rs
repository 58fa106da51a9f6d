//! The command line: every command and its options.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// ext4 in user space: format, check and inspect images, and work on files inside them
/// without mounting.
#[derive(Debug, Parser)]
#[command(name = "lanefs", version, about, long_about = None)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
    /// The realtime data device of an image made with `mkfs --rtdev` (any command that
    /// opens the image needs it; for mkfs, the device to give the image). Also taken
    /// after the command's name, by the commands that open an image.
    #[arg(long, value_name = "DATA")]
    pub rtdev: Option<PathBuf>,
}

/// `--rtdev` on a command that opens an image.
#[derive(Debug, Args, Default)]
pub struct RtdevArg {
    /// The realtime data device of an image made with `mkfs --rtdev` (for mkfs, the
    /// device to give the image).
    #[arg(long = "rtdev", value_name = "DATA")]
    pub rtdev: Option<PathBuf>,
}

/// Every command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Format an image file (created sparse) or a block device as ext4.
    Mkfs(MkfsArgs),
    /// Check an image for errors (exit 0 clean, 4 errors left, 8 operational error).
    Fsck(FsckArgs),
    /// Show what the superblock and group descriptors say.
    Info(InfoArgs),
    /// List a directory inside an image.
    Ls(LsArgs),
    /// Show every attribute of a file inside an image.
    Stat(PathArg),
    /// Write a file inside an image to standard output.
    Cat(PathArg),
    /// Create a directory inside an image.
    Mkdir(MkdirArgs),
    /// Remove files or directories inside an image.
    Rm(RmArgs),
    /// Make files or directories realtime (data on the --rtdev device; a directory passes
    /// it on to new children), or not, and set their extent size hint; prints the state.
    Realtime(RealtimeArgs),
    /// Copy files into or out of an image (IMAGE:/PATH names a path inside an image).
    Cp(CpArgs),
    /// Move or rename inside an image, as mv does.
    Mv(MvArgs),
    /// Make a hard link, or a symbolic link with -s, inside an image.
    Ln(LnArgs),
    /// Change permission bits inside an image (octal or u+x,g-w,o=r as chmod takes them).
    Chmod(ChmodArgs),
    /// Change the owner and group inside an image (numbers, or names from the image's
    /// /etc/passwd and /etc/group).
    #[command(disable_help_flag = true)]
    Chown(ChownArgs),
    /// Set access and modification times inside an image, making empty files as needed.
    Touch(TouchArgs),
    /// Print extended attributes inside an image, as getfattr -d does.
    Getfattr(GetfattrArgs),
    /// Set or remove an extended attribute inside an image, as setfattr does.
    Setfattr(SetfattrArgs),
    /// Run the benchmark workloads.
    Bench(BenchArgs),
    /// Mount an image through FUSE (daemonizes unless -f).
    Mount(MountArgs),
    /// Unmount a lanefs mount and wait until the image is written back.
    Umount(UmountArgs),
    /// Serve an empty in-memory file system through the same FUSE frontend and transports
    /// (the FUSE ceiling `bench --compare` measures the mount against; nothing is kept).
    Memfs(MemfsArgs),
    /// Write the manual pages: lanefs(1) and one page per command (lanefs-mkfs(1), ...).
    Man(ManArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
}

impl Command {
    /// The `--rtdev` given after the command's name, if it takes one.
    pub fn rtdev(&self) -> Option<PathBuf> {
        let rt = match self {
            Command::Mkfs(a) => &a.rt,
            Command::Fsck(a) => &a.rt,
            Command::Info(a) => &a.rt,
            Command::Ls(a) => &a.rt,
            Command::Stat(a) | Command::Cat(a) => &a.rt,
            Command::Mkdir(a) => &a.rt,
            Command::Rm(a) => &a.rt,
            Command::Realtime(a) => &a.rt,
            Command::Cp(a) => &a.rt,
            Command::Mv(a) => &a.rt,
            Command::Ln(a) => &a.rt,
            Command::Chmod(a) => &a.rt,
            Command::Chown(a) => &a.rt,
            Command::Touch(a) => &a.rt,
            Command::Getfattr(a) => &a.rt,
            Command::Setfattr(a) => &a.rt,
            _ => return None,
        };
        rt.rtdev.clone()
    }

    /// The command's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Mkfs(_) => "mkfs",
            Command::Fsck(_) => "fsck",
            Command::Info(_) => "info",
            Command::Ls(_) => "ls",
            Command::Stat(_) => "stat",
            Command::Cat(_) => "cat",
            Command::Mkdir(_) => "mkdir",
            Command::Rm(_) => "rm",
            Command::Realtime(_) => "realtime",
            Command::Cp(_) => "cp",
            Command::Mv(_) => "mv",
            Command::Ln(_) => "ln",
            Command::Chmod(_) => "chmod",
            Command::Chown(_) => "chown",
            Command::Touch(_) => "touch",
            Command::Getfattr(_) => "getfattr",
            Command::Setfattr(_) => "setfattr",
            Command::Bench(_) => "bench",
            Command::Mount(_) => "mount",
            Command::Umount(_) => "umount",
            Command::Memfs(_) => "memfs",
            Command::Man(_) => "man",
            Command::Completions(_) => "completions",
        }
    }
}

/// Options of `mkfs` (named as mke2fs names them).
#[derive(Debug, Args)]
pub struct MkfsArgs {
    /// Image file or block device.
    pub image: PathBuf,
    /// Size of the image file, e.g. 4G, 512M or bytes (K/M/G/T are powers of 1024);
    /// creates or resizes the file. `min` is the smallest image that holds the -d tree
    /// (counted before the copy), `min+64M` or `min+10%` that much larger. Without it an
    /// existing file or device keeps its size, and a new image made with -d is min+10%.
    #[arg(short, long)]
    pub size: Option<String>,
    /// File system type: ext2, ext3 or ext4 (default ext4), with the features Debian 12's
    /// mke2fs.conf gives it.
    #[arg(short = 't', long = "type", value_name = "TYPE")]
    pub fs_type: Option<String>,
    /// Usage types of mke2fs.conf, comma separated: small, floppy, default, big, huge,
    /// news, largefile, largefile4, hurd (default: from the size, as mke2fs).
    #[arg(short = 'T', long = "usage-type", value_name = "TYPES")]
    pub usage_types: Option<String>,
    /// Features to turn on, or off with ^, comma separated, e.g. ^has_journal,mmp (may
    /// be repeated).
    #[arg(short = 'O', long = "features", value_name = "FEATURES")]
    pub features: Vec<String>,
    /// Block size in bytes: 1024, 2048, 4096 ... 65536 (default: 1024 below 512 MiB,
    /// else 4096, as mke2fs.conf).
    #[arg(short = 'b', long, value_name = "BYTES")]
    pub block_size: Option<String>,
    /// Number of inodes (rounded up to fill whole inode-table blocks).
    #[arg(short = 'N', long = "inodes", value_name = "COUNT")]
    pub inodes: Option<String>,
    /// Inode size in bytes: 128, 256, 512 ... up to the block size (default 256).
    #[arg(short = 'I', long, value_name = "BYTES")]
    pub inode_size: Option<String>,
    /// Volume label (at most 16 bytes).
    #[arg(short = 'L', long)]
    pub label: Option<String>,
    /// Bytes of space per inode, e.g. 16K.
    #[arg(short = 'i', long)]
    pub inode_ratio: Option<String>,
    /// Journal size in file-system blocks (0: no journal).
    #[arg(short = 'J', long)]
    pub journal_blocks: Option<u32>,
    /// Percentage of blocks reserved for root.
    #[arg(short = 'm', long)]
    pub reserved_percent: Option<u32>,
    /// Overwrite a file or device that holds a file system, a volume or a partition
    /// table without asking (mkfs asks on a terminal, else refuses).
    #[arg(short = 'F', long, visible_short_alias = 'f')]
    pub force: bool,
    /// Copy this host directory into the new file system, as `mke2fs -d`: its contents
    /// become the root's, with everything `cp -a` keeps (the root takes the directory's
    /// owner, mode, times and xattrs). Or a tar archive (a file, or `-` for standard
    /// input; plain, gzip, zstd or xz, told by its first bytes): its members become the
    /// root's with what the archive says (owners by number, modes, ns times, hard links,
    /// devices, xattrs, ACLs, holes), no privileges needed. With SOURCE_DATE_EPOCH set,
    /// the image is reproducible: every time is clamped to it, and with -U and -E
    /// hash_seed the same tree or archive gives the same bytes.
    #[arg(short = 'd', long = "root-directory", value_name = "DIR|ARCHIVE")]
    pub root_dir: Option<PathBuf>,
    /// The file system's UUID: a UUID (8-4-4-4-12 hex digits), `random` (default) or
    /// `clear` (all zeros).
    #[arg(short = 'U', long, value_name = "UUID")]
    pub uuid: Option<String>,
    /// Extended options, comma separated (may be repeated): `hash_seed=UUID`, the seed of
    /// directory name hashes; `root_owner[=UID:GID]`, the owner and group of the root
    /// directory only, as mke2fs sets them (with no value: the user running mkfs; without
    /// the option: 0:0, or with -d the directory's owner).
    #[arg(short = 'E', long = "extended", value_name = "OPTIONS")]
    pub extended: Vec<String>,
    /// Make every file and directory -d copies owned by user 0 and group 0, as
    /// `mksquashfs -all-root` and `mkfs.erofs --all-root` do (modes are kept; -E
    /// root_owner and --device-table still set theirs).
    #[arg(long)]
    pub all_root: bool,
    /// A device table (makedevs format, as `genext2fs -D`): lines of `PATH TYPE MODE UID
    /// GID MAJOR MINOR START INCREMENT COUNT`, types f d c b p s. Listed paths the tree
    /// has get the line's owner and mode as they are copied; directories and nodes it
    /// lacks are made; a listed regular file it lacks is an error.
    #[arg(long = "device-table", visible_alias = "devtable", value_name = "FILE")]
    pub device_table: Option<PathBuf>,
    /// Write IMAGE as an Android sparse image, what `fastboot flash` takes, `img2simg`
    /// makes and `simg2img` expands (also `-E android_sparse`, as mke2fs names it). Needs
    /// --size (or -d); the file system is built in a scratch file beside IMAGE, which is then
    /// encoded: free blocks as DONT_CARE, repeated 4-byte patterns as FILL, with a CRC32
    /// chunk.
    #[arg(long = "sparse-output")]
    pub sparse_output: bool,
    /// Realtime extent size in file-system blocks (with --rtdev; default 1).
    #[arg(long, value_name = "BLOCKS", requires = "rtdev")]
    pub rtextsize: Option<u32>,
    /// Bitmap blocks per realtime group, each allocated under its own lock (with
    /// --rtdev; default: 8 groups at most, 0 = one group).
    #[arg(long, value_name = "BLOCKS", requires = "rtdev")]
    pub rtgroup_blocks: Option<u32>,
    /// Size of the realtime data device file, e.g. 1T; creates or resizes it (sparse).
    /// Without it an existing file or device keeps its size.
    #[arg(long, value_name = "SIZE", requires = "rtdev")]
    pub rtsize: Option<String>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `fsck`.
#[derive(Debug, Args)]
pub struct FsckArgs {
    /// Image file or block device.
    pub image: PathBuf,
    /// Say more about what is checked.
    #[arg(short, long)]
    pub verbose: bool,
    /// Check only, change nothing (the default).
    #[arg(short = 'n', long = "no", conflicts_with_all = ["preen", "yes"])]
    pub no: bool,
    /// Repair what is safe without asking, as `e2fsck -p`: replay the journal, finish the
    /// orphan list, rewrite the free counts; name the rest and leave it to `e2fsck -fy`.
    #[arg(
        short = 'p',
        long = "preen",
        visible_short_alias = 'a',
        conflicts_with = "yes"
    )]
    pub preen: bool,
    /// Repair as `-p` does (lanefs repairs nothing more; the rest goes to `e2fsck -fy`).
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Accepted for e2fsck's sake: the check is always full.
    #[arg(short = 'f', long = "force", hide = true)]
    pub force: bool,
    /// Check through the backup superblock at this block and the descriptor copy after
    /// it, as e2fsck -b reads them (8193 for 1 KiB blocks, 32768 for 4 KiB: the first
    /// backup); read only.
    #[arg(short = 'b', value_name = "BLOCK", conflicts_with_all = ["preen", "yes"])]
    pub superblock: Option<u64>,
    /// The block size of -b's block (each size is tried without it).
    #[arg(short = 'B', value_name = "BYTES", requires = "superblock")]
    pub block_size: Option<u32>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Image file or block device.
    pub image: PathBuf,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Long listing: mode, links, owner, group, size, modification time, name.
    #[arg(short = 'l')]
    pub long: bool,
    /// Show entries whose names start with '.', including '.' and '..'.
    #[arg(short = 'a')]
    pub all: bool,
    /// With -l, show owners and groups by the names the image's /etc/passwd and
    /// /etc/group give them (numbers where they give none).
    #[arg(long)]
    pub names: bool,
    /// IMAGE:/PATH (a bare IMAGE lists its root).
    pub target: OsString,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// A single `IMAGE:/PATH`.
#[derive(Debug, Args)]
pub struct PathArg {
    /// IMAGE:/PATH.
    pub target: OsString,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `mkdir`.
#[derive(Debug, Args)]
pub struct MkdirArgs {
    /// Create missing parents; an existing directory is no error.
    #[arg(short, long)]
    pub parents: bool,
    /// IMAGE:/PATH of each directory to create.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    /// Remove directories and everything in them.
    #[arg(short, long, visible_short_alias = 'R')]
    pub recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short, long)]
    pub force: bool,
    /// IMAGE:/PATH of each entry to remove.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `realtime`.
#[derive(Debug, Args)]
pub struct RealtimeArgs {
    /// Clear the realtime flag instead of setting it.
    #[arg(long)]
    pub off: bool,
    /// Leave the flag as it is (only show it, or only set --extsize).
    #[arg(long, conflicts_with = "off")]
    pub keep: bool,
    /// Extent size hint in blocks (a multiple of the rt extent size; 0: none).
    #[arg(long, value_name = "BLOCKS")]
    pub extsize: Option<u32>,
    /// IMAGE:/PATH of each file or directory (a file must have no data yet).
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `mv`.
#[derive(Debug, Args)]
pub struct MvArgs {
    /// Do not replace an existing destination.
    #[arg(short = 'n', long = "no-clobber")]
    pub no_clobber: bool,
    /// IMAGE:/PATH of each source, then the destination (a directory to move into, or
    /// the new name of a single source); all in one image.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `ln`.
#[derive(Debug, Args)]
pub struct LnArgs {
    /// Make a symbolic link holding TARGET as it is written (not looked up).
    #[arg(short, long)]
    pub symbolic: bool,
    /// Replace an existing non-directory at the link's place.
    #[arg(short, long)]
    pub force: bool,
    /// What to link to: IMAGE:/PATH for a hard link; any text for -s.
    pub target: OsString,
    /// IMAGE:/PATH of the new link (an existing directory: a link of the target's name
    /// in it).
    pub link: OsString,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `chmod`.
#[derive(Debug, Args)]
pub struct ChmodArgs {
    /// Change directories' contents too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Octal (0644) or symbolic ([ugoa]*[+-=][rwxXst]*, comma separated).
    pub mode: String,
    /// IMAGE:/PATH of each file.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `chown`.
#[derive(Debug, Args)]
pub struct ChownArgs {
    /// Change directories' contents too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Change a symbolic link itself, not what it points to.
    #[arg(short = 'h', long = "no-dereference")]
    pub no_dereference: bool,
    /// Print help (-h means --no-dereference here, as for chown).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// OWNER, OWNER:GROUP, OWNER: or :GROUP: numbers, or names from the image's
    /// /etc/passwd and /etc/group.
    pub owner: String,
    /// IMAGE:/PATH of each file.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `touch`.
#[derive(Debug, Args)]
pub struct TouchArgs {
    /// Make no file that does not exist.
    #[arg(short = 'c', long = "no-create")]
    pub no_create: bool,
    /// The time to set instead of now: @SECONDS, or YYYY-MM-DD[ HH:MM[:SS]] in UTC.
    #[arg(short = 'd', long = "date", value_name = "TIME")]
    pub date: Option<String>,
    /// Change only the access time.
    #[arg(short = 'a')]
    pub access_only: bool,
    /// Change only the modification time.
    #[arg(short = 'm', conflicts_with = "access_only")]
    pub modify_only: bool,
    /// IMAGE:/PATH of each file.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `getfattr`.
#[derive(Debug, Args)]
pub struct GetfattrArgs {
    /// Only this attribute (e.g. user.comment).
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// How to show values: text (quoted, where printable) or hex.
    #[arg(
        short = 'e',
        long = "encoding",
        value_name = "text|hex",
        default_value = "text"
    )]
    pub encoding: String,
    /// Accepted for getfattr's sake: values are always printed.
    #[arg(short = 'd', long = "dump", hide = true)]
    pub dump: bool,
    /// IMAGE:/PATH of each file.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `setfattr`.
#[derive(Debug, Args)]
pub struct SetfattrArgs {
    /// The attribute to set (e.g. user.comment).
    #[arg(
        short = 'n',
        long = "name",
        required_unless_present = "remove",
        conflicts_with = "remove"
    )]
    pub name: Option<String>,
    /// Its value: text, "quoted text", 0x followed by hex digits, or 0s followed by
    /// base64 (empty when not given).
    #[arg(short = 'v', long = "value", requires = "name")]
    pub value: Option<String>,
    /// Remove this attribute instead.
    #[arg(short = 'x', long = "remove", value_name = "NAME")]
    pub remove: Option<String>,
    /// IMAGE:/PATH of each file.
    #[arg(required = true)]
    pub targets: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Copy directories recursively.
    #[arg(short, long, visible_short_alias = 'R')]
    pub recursive: bool,
    /// Do not replace an existing file (directories still merge).
    #[arg(short = 'n', long = "no-clobber")]
    pub no_clobber: bool,
    /// Print each name copied, as 'SOURCE' -> 'DESTINATION'.
    #[arg(short, long)]
    pub verbose: bool,
    /// Sources, then the destination; exactly one side is IMAGE:/PATH (`-` is standard
    /// input as the one source, standard output as the destination). IMAGE:/PATH splits
    /// at a ':' that follows an existing image file, so an image whose name holds ':' is
    /// written as it is (`./a:b.img:/dir`), and paths inside may hold ':' too.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<OsString>,
    #[command(flatten)]
    pub rt: RtdevArg,
}

/// Options of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workloads to run: fallocate2, mdtest, mdtest-shared, fsmark, stat, fsync, bufio64k,
    /// bufio, rtfrag (all when none is named; with --compare: programs, fallocate2,
    /// mdtest, bufio64k). programs (--compare only) times tar x, find -ls, tar c, cp -a
    /// and rm -rf as whole commands on each mount (--tarball). mdtest-shared is mdtest with every thread in one directory; fsmark
    /// creates files until the inode cache evicts; stat looks cached files up; bufio is
    /// cached 64 KiB reads and write mixes beside a memcpy control, and cold reads; rtfrag
    /// allocates on a fragmented 1 TiB realtime device (engine only).
    pub workloads: Vec<String>,
    /// Thread counts to sweep, e.g. 1,2,4 (default: powers of two up to the CPUs, at most
    /// 8: 1,2 on a 2-CPU machine; with --compare: 1,2).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Repetitions of the whole sweep; tables show the median (default: 3).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Measured seconds per duration-timed run (default: 0.3).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Warm-up seconds before each duration-timed run (default: 0.05).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Files per thread for mdtest, mdtest-shared and stat (default: 2000).
    #[arg(long)]
    pub files: Option<usize>,
    /// Files each thread of fsmark creates (default: 150000 in total, split evenly
    /// between the threads).
    #[arg(long, value_name = "N")]
    pub fsmark_files: Option<usize>,
    /// Bytes of file data bufio moves in each of its shapes, e.g. 64M (default: 384M, at
    /// most a quarter of the engine's page cache limit).
    #[arg(long, value_name = "SIZE")]
    pub bufio_size: Option<String>,
    /// Run on real syscalls in this directory instead of the engine.
    #[arg(long, conflicts_with_all = ["image", "size"])]
    pub path: Option<PathBuf>,
    /// Image file for the engine (default: a temporary file).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Size of the image, e.g. 8G (default: 4G). With --compare: of each image, 1G unless
    /// given.
    #[arg(long)]
    pub size: Option<String>,
    /// Block size of the image the engine formats: 1024, 2048, 4096 or 65536 (default 4096).
    #[arg(long, conflicts_with = "path")]
    pub block_size: Option<u32>,
    /// Also write all records as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one SVG chart per workload into this directory: ops/s against threads, a line
    /// per variant, the control loop as the ceiling.
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,
    /// Write a Markdown report to this file: the machine, the commit, what each variant
    /// means, every table, and the charts (with --svg).
    #[arg(long, value_name = "FILE.md")]
    pub report: Option<PathBuf>,
    /// A line per run instead of the progress bar, and the full tables with every field
    /// after the compact ones.
    #[arg(short, long)]
    pub verbose: bool,
    /// A quick look at every workload and seed variant in under 30 s: one repetition of
    /// 0.2 s runs, smaller fsmark, bufio and rtfrag shapes, no callgrind (given options
    /// still apply).
    #[arg(long)]
    pub quick: bool,
    /// Collect and print lock statistics (engine only), one table per workload, variant
    /// and thread count.
    #[arg(long)]
    pub lockstat: bool,
    /// Mount-option variants to compare in one run, engine only, comma separated and
    /// repeatable (default: each workload its seed's: fallocate2 base,linear,optimize_scan,
    /// slots; fsync, bufio64k base,default; mdtest, mdtest-shared base,ialloc,icache,lanefs;
    /// fsmark, stat global,bucket,papaya; bufio base,default; rtfrag plain,default). Each
    /// workload runs the variants of its family, and base is that family's baseline.
    /// fallocate2, fsync, bufio64k (seed 000): base, trylock, linear, optimize_scan, slots.
    /// mdtest, mdtest-shared, fsmark, stat (seeds 001 and 004): base
    /// (ialloc=locked,icache=global), ialloc (optimistic + global), icache (locked +
    /// bucket), lanefs (optimistic + bucket), global, bucket, papaya (icache= that). bufio
    /// (seed 002): base (folio_max_order=0), order2, order6. rtfrag (seed 003): plain
    /// (rt_alloc=plain), lean. default and NAME:OPTIONS apply to every workload;
    /// NAME:OPTIONS mounts with engine options as in mount -o, and the items after it up to
    /// the next variant name or NAME: are its options, e.g. 'x:ialloc=locked,icache=global'.
    /// A name no chosen workload takes is an error. With base (or global) and another, the
    /// tables compare each with it per thread count.
    #[arg(long, value_name = "LIST")]
    pub variants: Vec<String>,
    /// Run on mounts of alike mkfs.ext4 images, interleaved, in one table: lanefs mount
    /// (FUSE), the FUSE ceiling (lanefs memfs, in memory, the same frontend and transport),
    /// each also over /dev/fuse where FUSE-over-io_uring is the default, fuse2fs and the
    /// kernel's ext4 (loop device), with ratios against fuse2fs, the ceiling and the kernel,
    /// scaling and the FUSE daemons' CPU time per operation. Needs root, /dev/fuse, fuse2fs
    /// and loop devices.
    #[arg(long, conflicts_with_all = ["path", "image", "block_size", "lockstat", "variants"])]
    pub compare: bool,
    /// With --compare: pin each workload thread, and each program, to a CPU of its own
    /// (default: not pinned, as users' programs are not).
    #[arg(long, requires = "compare")]
    pub pin: bool,
    /// With --compare: the archive the programs workload extracts, copies and removes
    /// (plain or compressed, as tar reads it; default: a tree of 8,000 files, 140 MB,
    /// built for the run).
    #[arg(long, value_name = "FILE", requires = "compare")]
    pub tarball: Option<PathBuf>,
}

/// Options of `mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// Image file or block device.
    pub image: PathBuf,
    /// Directory to mount it on.
    pub mountpoint: PathBuf,
    /// Mount options, comma separated (may be repeated): ro, allow_other, allow_root,
    /// default_permissions, threads=N, writeback_cache, attr_timeout=SECS,
    /// entry_timeout=SECS, negative_timeout=SECS, max_write=BYTES, commit=SECS,
    /// errors=remount-ro|panic, fsname=NAME (or source=NAME), the VFS flags (nosuid, nodev,
    /// noexec, sync, dirsync, ...), relatime, strictatime, noatime, nodiratime, io_uring,
    /// no_io_uring, io_uring_depth=N, io_uring_spin=USECS, unconfined, and the engine's
    /// mb_trylock=0|1, mb_stream_goal=global|inode|slots, mb_optimize_scan=0|1,
    /// ialloc=optimistic|locked, icache=bucket|global|papaya, icache_limit=SIZE,
    /// dir_digest=0|1, pagecache_limit=SIZE, folio_max_order=N, bufcache_limit=SIZE,
    /// rtdev=DATA, rt_alloc=lean|plain.
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Stay in the foreground and log to stderr.
    #[arg(short = 'f', long = "foreground")]
    pub foreground: bool,
}

/// Options of `memfs`.
#[derive(Debug, Args)]
pub struct MemfsArgs {
    /// Directory to mount it on.
    pub mountpoint: PathBuf,
    /// Mount options, as for `mount` (those of the FUSE frontend and the transport).
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Stay in the foreground and log to stderr.
    #[arg(short = 'f', long = "foreground")]
    pub foreground: bool,
}

/// Options of `umount`.
#[derive(Debug, Args)]
pub struct UmountArgs {
    /// Where a lanefs image is mounted.
    pub mountpoint: PathBuf,
}

/// Options of `man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into (created if missing), e.g. /usr/local/share/man/man1.
    pub dir: PathBuf,
}

/// Options of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell, e.g. `lanefs completions bash > /etc/bash_completion.d/lanefs`.
    pub shell: clap_complete::Shell,
}

/// The error for a first argument that is no command, with suggestions only for names
/// a typo away (clap's own suggests any name that shares a few letters: `nosuch` got
/// `bench`), or `None` when the command is known (clap then parses as usual).
pub fn unknown_command(args: &[OsString]) -> Option<String> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut rest = args.iter().skip(1);
    let first = loop {
        let a = rest.next()?.to_str()?;
        match a {
            "--rtdev" => {
                rest.next();
            }
            _ if a.starts_with('-') => return None,
            _ => break a,
        }
    };
    let names: Vec<&str> = cmd
        .get_subcommands()
        .flat_map(|c| std::iter::once(c.get_name()).chain(c.get_all_aliases()))
        .chain(["help"])
        .collect();
    if names.contains(&first) {
        return None;
    }
    let near: Vec<String> = names
        .iter()
        .filter(|n| {
            let d = strsim::damerau_levenshtein(first, n);
            let same_start = first.chars().next() == n.chars().next();
            d <= 1 || (d == 2 && same_start && n.len() >= 6)
        })
        .map(|n| format!("'{n}'"))
        .collect();
    let tip = match near.len() {
        0 => String::new(),
        1 => format!("\n  tip: a similar command exists: {}\n", near[0]),
        _ => format!("\n  tip: similar commands exist: {}\n", near.join(", ")),
    };
    let all: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
    Some(format!(
        "error: unrecognized command '{first}'\n{tip}\nCommands: {}\n\nFor more information, try 'lanefs --help'.\n",
        all.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    /// clap's own checks of every command's definition (unique short options and the
    /// like), which a release build skips until the command runs.
    #[test]
    fn every_command_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
