//! `lanefs`: format, check and inspect ext4 images, and work on the files inside them
//! without mounting; mount them through FUSE (`lanefs mount`, crate `lanefs-fuse`); and
//! run the benchmarks (`lanefs bench`, crate `lanefs-bench`). The README has the commands
//! and the mount options; `docs/commands.md` the details, `docs/design.md` the design.

mod accounts;
mod bench;
mod browse;
mod cli;
mod copy;
mod devtable;
mod docs;
mod edit;
mod error;
mod format;
mod fsck;
mod holders;
mod hostdir;
mod hostsys;
mod imgpath;
mod modify;
mod mount;
mod progress;
mod session;
mod show;
mod size;
mod sparse;
mod supervise;
mod xattr;

use clap::Parser;
use cli::{Cli, Command};
use error::{one_line, CmdResult, EXIT_FAILURE};
use std::io::Write;

/// The command's heap: mimalloc (per-thread free lists, pages of one size class) instead
/// of glibc's malloc, whose bins fragment when millions of inodes are cached and evicted:
/// malloc and free were a fifth of a create or remove in a 2,000,000-file directory
/// (`docs/design.md`, "Memory"). The engine itself does not choose an allocator; an
/// embedder's program does.
#[global_allocator]
static HEAP: Heap = Heap;

/// mimalloc through its plain entry points where they give the alignment asked for.
///
/// The `mimalloc` crate's allocator calls `mi_malloc_aligned` for every layout. For a
/// block over 128 bytes whose size is not a power of two (an `Arc<Inode>` is 320 bytes, a
/// `Mapping` 160), mimalloc 3 takes that call's fast path only while the size class's free
/// list happens to hold a block; once the list is empty it over-allocates from a larger
/// class and never refills the list (that is `mi_malloc`'s slow path), so from then on
/// every such allocation paid the slow path and a larger block (`perf`: 4.5 % of a create
/// in `mi_theap_malloc_zero_aligned_at_overalloc`). `mi_malloc` returns blocks of its
/// size classes (word-aligned, 16-byte aligned for sizes that are multiples of 16); a
/// new block that is not aligned as asked anyway is freed and asked for again through the
/// aligned call, and a reallocation asking more than a word goes through the aligned one.
struct Heap;

/// Alignments `mi_malloc` is asked first for.
const PLAIN_ALIGN: usize = 16;
/// The alignment of every mimalloc block.
const WORD_ALIGN: usize = 8;

fn aligned(p: *mut u8, align: usize) -> bool {
    (p as usize) & (align - 1) == 0
}

/// A block for `layout` from `plain` (`mi_malloc` or `mi_zalloc`) when the alignment
/// allows and the block it gives is aligned so, else from `aligned`, its aligned form.
///
/// # Safety
/// `layout` has a non-zero size (GlobalAlloc's contract); `plain` and `aligned` are a
/// mimalloc allocation entry point and its aligned form.
unsafe fn plain_or_aligned(
    layout: std::alloc::Layout,
    plain: unsafe extern "C" fn(usize) -> *mut std::ffi::c_void,
    aligned_form: unsafe extern "C" fn(usize, usize) -> *mut std::ffi::c_void,
) -> *mut u8 {
    if layout.align() <= PLAIN_ALIGN {
        // SAFETY: plain allocation of a non-zero size.
        let p = unsafe { plain(layout.size()) }.cast::<u8>();
        if aligned(p, layout.align()) {
            return p;
        }
        // SAFETY: `p` came from mimalloc and is not used again.
        unsafe { libmimalloc_sys::mi_free(p.cast()) };
    }
    // SAFETY: `align` is a power of two (Layout's invariant).
    unsafe { aligned_form(layout.size(), layout.align()) }.cast()
}

// SAFETY: every block comes from mimalloc (`mi_malloc`, `mi_zalloc`, `mi_realloc` or their
// aligned forms), is aligned as its layout asks (checked for the plain forms, guaranteed by
// the aligned ones) and is freed by `mi_free`, which takes blocks of either form.
unsafe impl std::alloc::GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        // SAFETY: GlobalAlloc's contract (a non-zero size) is the caller's.
        unsafe { plain_or_aligned(layout, mi_malloc, mi_malloc_aligned) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        // SAFETY: as in `alloc`.
        unsafe { plain_or_aligned(layout, mi_zalloc, mi_zalloc_aligned) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        if layout.align() <= WORD_ALIGN {
            // SAFETY: `ptr` came from mimalloc; on failure it stays the caller's, as
            // GlobalAlloc asks. Every mimalloc block is word-aligned (its size classes are
            // multiples of 8 bytes), so the result needs no check.
            let p = unsafe { mi_realloc(ptr.cast(), new) }.cast::<u8>();
            debug_assert!(aligned(p, layout.align()));
            return p;
        }
        // SAFETY: `ptr` came from mimalloc; the alignment is a power of two.
        unsafe { mi_realloc_aligned(ptr.cast(), new, layout.align()) }.cast()
    }
}

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, `mimalloc.h`; the
/// sys crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed pages before giving them back to the kernel, in ms
/// (its default is 1,000). The engine's caches churn memory at a steady level: evicted
/// inodes, checkpointed journal copies and dropped buffers are freed and their memory
/// taken again within seconds, so a page given back after a second was mostly faulted in
/// and zeroed again soon after: 16,856 page faults in a 2,000,000-file mdtest run, 3,610
/// at 10 s, and its creates 2 % and removes 8 % faster (medians of seven alternated pairs;
/// `docs/design.md`, "Memory"). What the caches free stays
/// resident up to 10 s longer (the caches' own accounting keeps to their limits); the
/// bench's trim before each run still gives everything back; `MIMALLOC_PURGE_DELAY`
/// overrides it.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Set mimalloc's options before the command runs (unless the environment set them).
fn tune_heap() {
    // SAFETY: sets one of mimalloc's integer options, a plain store any thread may make at
    // any time; an option the environment set first is left as it is.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

/// Give mimalloc's freed pages back now (it purges them [`PURGE_DELAY_MS`] after they are
/// freed):
/// the bench resets the peak resident set before each run, which must not count memory an
/// earlier run freed.
fn trim_heap() {
    // SAFETY: mi_collect only walks and purges mimalloc's own heaps and may be called from
    // any thread at any time; `true` forces the purge.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Print a panic as one line instead of a trace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let cmd = error::command();
        let line = one_line(&format!("lanefs: {cmd}: internal error: {msg}{at}"));
        let _ = writeln!(std::io::stderr(), "{line}");
    }));
}

/// Run one command.
fn dispatch(command: &Command) -> CmdResult<i32> {
    match command {
        Command::Mkfs(a) => format::mkfs(a),
        Command::Fsck(a) => fsck::fsck(a),
        Command::Info(a) => format::info(a),
        Command::Ls(a) => browse::ls(a),
        Command::Stat(a) => browse::stat(a),
        Command::Cat(a) => browse::cat(a),
        Command::Mkdir(a) => modify::mkdir(a),
        Command::Rm(a) => modify::rm(a),
        Command::Realtime(a) => modify::realtime(a),
        Command::Cp(a) => copy::cp(a),
        Command::Mv(a) => edit::mv(a),
        Command::Ln(a) => edit::ln(a),
        Command::Chmod(a) => edit::chmod(a),
        Command::Chown(a) => edit::chown(a),
        Command::Touch(a) => edit::touch(a),
        Command::Getfattr(a) => xattr::getfattr(a),
        Command::Setfattr(a) => xattr::setfattr(a),
        Command::Bench(a) => bench::bench(a),
        Command::Mount(a) => mount::mount(a),
        Command::Memfs(a) => mount::memfs(a),
        Command::Umount(a) => mount::umount(a),
        Command::Man(a) => docs::man(a),
        Command::Completions(a) => docs::completions(a),
    }
}

fn main() {
    tune_heap();
    lanefs_bench::rss::set_heap_trim(trim_heap);
    install_panic_hook();
    hostsys::default_sigpipe();
    let args = mount::helper_args(std::env::args_os().collect());
    if let Some(msg) = cli::unknown_command(&args) {
        let _ = std::io::stderr().write_all(msg.as_bytes());
        std::process::exit(2);
    }
    let cli = Cli::parse_from(args);
    let name = cli.command.name();
    error::set_command(name);
    session::set_rtdev(cli.command.rtdev().or_else(|| cli.rtdev.clone()));
    let code = match std::panic::catch_unwind(|| dispatch(&cli.command)) {
        Ok(Ok(code)) => code,
        Ok(Err(failure)) => {
            let _ = writeln!(std::io::stderr(), "{}", failure.line(name));
            failure.code
        }
        Err(_) => EXIT_FAILURE,
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
