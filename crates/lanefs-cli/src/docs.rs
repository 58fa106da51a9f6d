//! `lanefs man` and `lanefs completions`: the manual pages and the shell completion
//! scripts, generated from the command line's definitions (`cli.rs`), so they name every
//! command and option the binary takes. A page is clap_mangen's sections with a synopsis
//! of its own (clap_mangen's leaves out option values: `[-o ]`), then EXAMPLES and EXIT
//! STATUS from `examples` below.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::{CmdResult, Context};
use clap::CommandFactory;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use std::path::Path;

/// Write lanefs(1) and lanefs-COMMAND(1) for every command into `a.dir`.
pub fn man(a: &ManArgs) -> CmdResult<i32> {
    std::fs::create_dir_all(&a.dir).ctx(a.dir.display())?;
    let mut cmd = Cli::command();
    cmd.build();
    write_page(&cmd, "lanefs", "", &a.dir)?;
    // clap's own `help` command has no page: `lanefs help X` prints what lanefs-X(1) says.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        // A command's page is named as man(1) looks it up (lanefs-mkfs); its synopsis
        // reads as typed (lanefs mkfs ...).
        let name = format!("lanefs-{}", sub.get_name());
        let typed = format!("lanefs {}", sub.get_name());
        let sub = sub.clone().display_name(name.clone()).bin_name(typed);
        write_page(&sub, &name, sub.get_name(), &a.dir)?;
    }
    Ok(0)
}

fn write_page(cmd: &clap::Command, name: &str, command: &str, dir: &Path) -> CmdResult<()> {
    let path = dir.join(format!("{name}.1"));
    let man = clap_mangen::Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section("1")
        .source(format!("lanefs {}", env!("CARGO_PKG_VERSION")))
        .manual("lanefs manual");
    let mut out = Vec::new();
    let w = &mut out;
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    man.render_title(w)
        .and_then(|()| man.render_name_section(w))
        .and_then(|()| synopsis(cmd).to_writer(w))
        .and_then(|()| man.render_description_section(w))
        .and_then(|()| match has_args {
            true => man.render_options_section(w),
            false => Ok(()),
        })
        .and_then(|()| match cmd.has_subcommands() {
            true => man.render_subcommands_section(w),
            false => Ok(()),
        })
        .and_then(|()| closing(command).to_writer(w))
        .and_then(|()| match cmd.get_version() {
            Some(_) => man.render_version_section(w),
            None => Ok(()),
        })
        .ctx(path.display())?;
    std::fs::write(&path, out).ctx(path.display())?;
    Ok(())
}

/// SYNOPSIS: the command as typed, each option with its value (`[-o OPTS]`), optional
/// ones in brackets, then the operands.
fn synopsis(cmd: &clap::Command) -> Roff {
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut line: Vec<Inline> = vec![bold(name)];
    for opt in cmd.get_arguments().filter(|a| !a.is_positional()) {
        if opt.is_hide_set() {
            continue;
        }
        let flag = match (opt.get_short(), opt.get_long()) {
            (Some(s), Some(l)) => format!("-{s}|--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => continue,
        };
        let (lhs, rhs) = if opt.is_required_set() {
            ("", "")
        } else {
            ("[", "]")
        };
        line.push(roman(format!(" {lhs}")));
        line.push(bold(flag));
        if opt.get_action().takes_values() {
            let value = opt
                .get_value_names()
                .map(|v| v.join(" "))
                .unwrap_or_else(|| opt.get_id().as_str().to_uppercase());
            line.push(roman(" "));
            line.push(italic(value));
        }
        line.push(roman(rhs));
    }
    for arg in cmd.get_positionals() {
        let value = arg
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let (lhs, rhs) = if arg.is_required_set() {
            ("", "")
        } else {
            ("[", "]")
        };
        line.push(roman(format!(" {lhs}")));
        line.push(italic(value));
        line.push(roman(format!("{}{rhs}", if many { "..." } else { "" })));
    }
    if cmd.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("COMMAND"));
        line.push(roman(" ..."));
    }
    let mut roff = Roff::default();
    roff.control("SH", ["SYNOPSIS"]);
    roff.text(line);
    roff
}

/// EXAMPLES and EXIT STATUS of `command` ("" for lanefs(1)).
fn closing(command: &str) -> Roff {
    let mut roff = Roff::default();
    roff.control("SH", ["EXAMPLES"]);
    for (line, what) in examples(command) {
        roff.control("TP", []);
        roff.text([bold(*line)]);
        roff.text([roman(*what)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, what) in exit_status(command) {
        roff.control("TP", []);
        roff.text([bold(*code)]);
        roff.text([roman(*what)]);
    }
    roff
}

/// What each command's exit status means.
fn exit_status(command: &str) -> &'static [(&'static str, &'static str)] {
    match command {
        "fsck" => &[
            ("0", "The image is clean."),
            ("1", "-p or -y repaired it, and it is clean now."),
            ("2", "A usage error."),
            ("4", "Problems are left (each printed); run e2fsck -fy for what lanefs does not repair."),
            ("5", "-p or -y repaired part of it; problems are left (1 and 4 together)."),
            ("8", "The check could not run: the image is unreadable or not an ext2/3/4 file system, or -p/-y was given for an image in use (mounted, or held by another program)."),
        ],
        "mount" | "memfs" => &[
            ("0", "The file system is mounted (the daemon serves it until it is unmounted), or with -f it was served and unmounted cleanly."),
            ("1", "It could not be mounted or served; one line on standard error says why."),
            ("2", "A usage error."),
        ],
        _ => &[
            ("0", "Success."),
            ("1", "Failure: one line on standard error, lanefs: COMMAND: WHAT: WHY (cp prints each error of a copy, then a count)."),
            ("2", "A usage error (an unknown command or option, a missing operand)."),
        ],
    }
}

/// Examples for each command's page.
fn examples(command: &str) -> &'static [(&'static str, &'static str)] {
    match command {
        "" => &[
            ("lanefs mkfs -s 1G disk.img", "Make a 1 GiB ext4 image (a sparse file)."),
            ("lanefs cp -r ./site disk.img:/srv", "Copy a tree into it, as cp -a would, without mounting."),
            ("lanefs ls -l disk.img:/srv/site", "List what is there."),
            ("lanefs mount disk.img /mnt", "Mount it through FUSE; lanefs umount /mnt writes it back and unmounts."),
        ],
        "mkfs" => &[
            ("lanefs mkfs -s 4G disk.img", "Make a 4 GiB image file (sparse), formatted as mke2fs would."),
            ("lanefs mkfs -t ext3 -L data /dev/sdb1", "Format a partition as ext3 labelled data (asks first if it holds a file system)."),
            ("SOURCE_DATE_EPOCH=1700000000 lanefs mkfs -s 1G -d rootfs/ rootfs.img", "Build an image holding the tree rootfs/, the same bytes every time for the same tree (with -U and -E hash_seed too)."),
            ("lanefs mkfs -F old.img", "Format an image that already holds a file system without asking."),
        ],
        "fsck" => &[
            ("lanefs fsck disk.img", "Check the image; change nothing."),
            ("lanefs fsck -p disk.img", "After a crash: replay the journal and finish what a mount would, then check."),
        ],
        "info" => &[("lanefs info disk.img", "Show the superblock, the groups and the free space.")],
        "ls" => &[
            ("lanefs ls -l disk.img:/etc", "List a directory with modes, owners, sizes and times."),
            ("lanefs ls -a disk.img:/", "List the root, names starting with a dot too."),
        ],
        "stat" => &[("lanefs stat disk.img:/etc/passwd", "Show every attribute of a file.")],
        "cat" => &[("lanefs cat disk.img:/etc/hostname", "Print a file to standard output.")],
        "mkdir" => &[("lanefs mkdir -p disk.img:/srv/www/html", "Make a directory and its missing parents.")],
        "rm" => &[
            ("lanefs rm -r disk.img:/tmp/build", "Remove a tree."),
            ("lanefs rm -f disk.img:/maybe", "Remove a file if it is there."),
        ],
        "realtime" => &[
            ("lanefs realtime --rtdev data.img disk.img:/media", "Make a directory realtime: files made in it keep their data on data.img."),
            ("lanefs realtime --rtdev data.img --keep disk.img:/media", "Show the realtime state of a directory."),
        ],
        "cp" => &[
            ("lanefs cp -r /etc disk.img:/", "Copy a tree into an image with everything cp -a keeps."),
            ("lanefs cp disk.img:/etc/passwd passwd.copy", "Copy a file out."),
            ("lanefs cp -r disk.img:/ restored/", "Copy a whole image out into a new directory."),
        ],
        "mv" => &[
            ("lanefs mv disk.img:/srv/old disk.img:/srv/new", "Rename inside an image."),
            ("lanefs mv disk.img:/a disk.img:/b disk.img:/dir", "Move two entries into a directory."),
        ],
        "ln" => &[
            ("lanefs ln disk.img:/etc/hosts disk.img:/etc/hosts.bak", "Make a hard link."),
            ("lanefs ln -s ../lib/libx.so.1 disk.img:/usr/lib/libx.so", "Make a symbolic link holding the text ../lib/libx.so.1."),
        ],
        "chmod" => &[
            ("lanefs chmod 0755 disk.img:/usr/local/bin/tool", "Set permission bits."),
            ("lanefs chmod -R go-w disk.img:/srv", "Take write permission from group and others in a tree."),
        ],
        "chown" => &[
            ("lanefs chown www-data:www-data disk.img:/srv/www", "Give a directory to the image's own www-data user and group."),
            ("lanefs chown -R 1000:1000 disk.img:/home/user", "Give a tree to uid and gid 1000."),
        ],
        "touch" => &[
            ("lanefs touch disk.img:/etc/first-boot", "Make an empty file, or set an existing one's times to now."),
            ("lanefs touch -d '2024-01-01 00:00' disk.img:/etc/issue", "Set times to a given moment (UTC)."),
        ],
        "getfattr" => &[
            ("lanefs getfattr disk.img:/usr/bin/ping", "Print every extended attribute (capabilities, ACLs, user.*)."),
            ("lanefs getfattr -n user.comment disk.img:/srv/a", "Print one attribute."),
        ],
        "setfattr" => &[
            ("lanefs setfattr -n user.comment -v 'built by ci' disk.img:/srv/a", "Set an attribute."),
            ("lanefs setfattr -x user.comment disk.img:/srv/a", "Remove it."),
        ],
        "bench" => &[
            ("lanefs bench --quick", "Every workload, short runs: each seed's table against its baseline."),
            ("lanefs bench --compare programs --reps 3", "Time tar, find, cp -a and rm -rf on the FUSE mount beside the kernel's ext4 and fuse2fs (as root)."),
        ],
        "mount" => &[
            ("lanefs mount disk.img /mnt", "Mount an image; the command returns once the mount is up."),
            ("lanefs mount disk.img /mnt -o ro,allow_other", "Mount read-only for every user."),
            ("mount -t fuse.lanefs disk.img /mnt", "The same through mount(8), with /sbin/mount.fuse.lanefs linked to lanefs."),
        ],
        "umount" => &[("lanefs umount /mnt", "Unmount and wait until the image is written back.")],
        "memfs" => &[("lanefs memfs /mnt/ceiling", "Serve an empty in-memory file system (nothing is kept).")],
        "man" => &[("lanefs man /usr/local/share/man/man1", "Install the manual pages.")],
        "completions" => &[("lanefs completions bash > /etc/bash_completion.d/lanefs", "Install bash's completion.")],
        _ => &[],
    }
}

/// Print the completion script for `a.shell` to standard output.
pub fn completions(a: &CompletionsArgs) -> CmdResult<i32> {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "lanefs", &mut std::io::stdout());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command has examples, and each example runs the command it documents.
    #[test]
    fn every_command_has_examples_of_itself() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name();
            let ex = examples(name);
            assert!(!ex.is_empty(), "{name} has no examples");
            for (line, _) in ex {
                let ours = line.contains(&format!("lanefs {name}"))
                    || (name == "mount" && line.starts_with("mount -t fuse.lanefs"));
                assert!(ours, "{name}: {line}");
            }
        }
    }
}
