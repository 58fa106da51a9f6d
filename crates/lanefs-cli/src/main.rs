//! `lanefs`: format, check and inspect ext4 images, and work on the files inside them
//! without mounting.

mod bench;
mod browse;
mod cli;
mod copy;
mod error;
mod format;
mod hostsys;
mod imgpath;
mod modify;
mod mount;
mod progress;
mod session;
mod show;
mod size;

use clap::Parser;
use cli::{Cli, Command};
use error::{one_line, CmdResult, EXIT_FAILURE};
use std::io::Write;
use std::sync::OnceLock;

/// The command's heap: mimalloc (per-thread free lists, pages of one size class) instead
/// of glibc's malloc, whose bins fragment when millions of inodes are cached and evicted:
/// malloc and free were a fifth of a create or remove in a 2,000,000-file directory
/// (README, "2,000,000 files"). The engine itself does not choose an allocator; an
/// embedder's program does.
#[global_allocator]
static HEAP: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Give mimalloc's freed pages back now (it purges them a second after they are freed):
/// the bench resets the peak resident set before each run, which must not count memory an
/// earlier run freed.
fn trim_heap() {
    // SAFETY: mi_collect only walks and purges mimalloc's own heaps and may be called from
    // any thread at any time; `true` forces the purge.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// The running command's name, for the panic hook's message.
static COMMAND: OnceLock<&'static str> = OnceLock::new();

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
        let cmd = COMMAND.get().copied().unwrap_or("error");
        let line = one_line(&format!("lanefs: {cmd}: internal error: {msg}{at}"));
        let _ = writeln!(std::io::stderr(), "{line}");
    }));
}

/// Run one command.
fn dispatch(command: &Command) -> CmdResult<i32> {
    match command {
        Command::Mkfs(a) => format::mkfs(a),
        Command::Fsck(a) => format::fsck(a),
        Command::Info(a) => format::info(a),
        Command::Ls(a) => browse::ls(a),
        Command::Stat(a) => browse::stat(a),
        Command::Cat(a) => browse::cat(a),
        Command::Mkdir(a) => modify::mkdir(a),
        Command::Rm(a) => modify::rm(a),
        Command::Realtime(a) => modify::realtime(a),
        Command::Cp(a) => copy::cp(a),
        Command::Bench(a) => bench::bench(a),
        Command::Mount(a) => mount::mount(a),
        Command::Umount(a) => mount::umount(a),
    }
}

fn main() {
    lanefs_bench::rss::set_heap_trim(trim_heap);
    install_panic_hook();
    hostsys::default_sigpipe();
    let cli = Cli::parse_from(mount::helper_args(std::env::args_os().collect()));
    let name = cli.command.name();
    let _ = COMMAND.set(name);
    session::set_rtdev(cli.rtdev.clone());
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
