//! `lanefs man` and `lanefs completions`: the manual pages and the shell completion
//! scripts, generated from the command line's definitions (`cli.rs`), so they name every
//! command and option the binary takes.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::{CmdResult, Context};
use clap::CommandFactory;
use std::path::Path;

/// Write lanefs(1) and lanefs-COMMAND(1) for every command into `a.dir`.
pub fn man(a: &ManArgs) -> CmdResult<i32> {
    std::fs::create_dir_all(&a.dir).ctx(a.dir.display())?;
    let mut cmd = Cli::command();
    // Built, so that each command carries the global options (--rtdev) it takes.
    cmd.build();
    write_page(&cmd, "lanefs", &a.dir)?;
    // clap's own `help` command has no page: `lanefs help X` prints what lanefs-X(1) says.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        // A command's page is named as man(1) looks it up (lanefs-mkfs); its synopsis
        // reads as typed (lanefs mkfs ...).
        let name = format!("lanefs-{}", sub.get_name());
        let typed = format!("lanefs {}", sub.get_name());
        let sub = sub.clone().display_name(name.clone()).bin_name(typed);
        write_page(&sub, &name, &a.dir)?;
    }
    Ok(0)
}

fn write_page(cmd: &clap::Command, name: &str, dir: &Path) -> CmdResult<()> {
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section("1")
        .source(format!("lanefs {}", env!("CARGO_PKG_VERSION")))
        .manual("lanefs manual")
        .render(&mut out)
        .ctx(path.display())?;
    std::fs::write(&path, out).ctx(path.display())?;
    Ok(())
}

/// Print the completion script for `a.shell` to standard output.
pub fn completions(a: &CompletionsArgs) -> CmdResult<i32> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "lanefs", &mut std::io::stdout());
    Ok(0)
}
