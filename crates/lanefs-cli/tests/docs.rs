//! Goal: the manual pages and completion scripts cover every command, and are what man(1)
//! and the shells accept.
//! Method: `lanefs man DIR` must write lanefs(1) and exactly one page per command that
//! `lanefs --help` lists, each rendered by `man --warnings` without a warning and naming
//! its command and options, with EXAMPLES and EXIT STATUS and every option's value in
//! the synopsis; `lanefs completions SHELL` must parse in bash, zsh and fish,
//! and bash's completion function must offer the commands and a command's options.
//! Without man, zsh or fish the test prints a SKIP line (a failure under
//! LANEFS_REQUIRE_PRIVILEGED=1, as CI installs them).

use std::path::Path;
use std::process::{Command, Output};

#[path = "../../lanefs/tests/common/skips.rs"]
mod skips;

const LANEFS: &str = env!("CARGO_BIN_EXE_lanefs");

fn lanefs(args: &[&str]) -> Output {
    let out = Command::new(LANEFS)
        .args(args)
        .output()
        .expect("run lanefs");
    assert!(
        out.status.success(),
        "lanefs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Print the SKIP line (fail when LANEFS_REQUIRE_PRIVILEGED=1) unless `tool` is installed.
fn need(test: &str, tool: &str) -> bool {
    if have(tool) {
        return true;
    }
    let why = format!("{tool} not installed");
    skips::report(test, &why);
    false
}

/// The commands `lanefs --help` lists (but clap's `help`).
fn commands() -> Vec<String> {
    let help = String::from_utf8(lanefs(&["--help"]).stdout).unwrap();
    let mut out = Vec::new();
    let mut on = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            on = true;
            continue;
        }
        if on && !line.starts_with("  ") {
            break;
        }
        if let Some(name) = line.split_whitespace().next().filter(|_| on) {
            if name != "help" {
                out.push(name.to_string());
            }
        }
    }
    assert!(out.len() >= 10, "{help}");
    out
}

#[test]
fn man_pages_cover_every_command_and_render_cleanly() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("man1");
    lanefs(&["man", dir.to_str().unwrap()]);
    let mut want: Vec<String> = commands().iter().map(|c| format!("lanefs-{c}.1")).collect();
    want.push("lanefs.1".into());
    want.sort();
    let mut got: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(got, want);
    let page = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let main = page("lanefs.1");
    for c in commands() {
        // The main page points at each command's page; each names its command as typed.
        assert!(
            main.contains(&format!("lanefs\\-{c}(1)")),
            "lanefs(1) on {c}"
        );
        let p = page(&format!("lanefs-{c}.1"));
        assert!(p.starts_with(".ie") || p.contains(".TH"), "{c}: {p}");
        assert!(p.contains(&format!("lanefs {c}")), "lanefs-{c}(1) synopsis");
    }
    assert!(page("lanefs-mkfs.1").contains("block\\-size"));
    assert!(page("lanefs-mount.1").contains("\\-o"));
    // --rtdev is on the commands that open an image, not on every command.
    assert!(page("lanefs-ls.1").contains("rtdev"));
    assert!(!page("lanefs-umount.1").contains("rtdev"));
    if !need("man_pages_cover_every_command_and_render_cleanly", "man") {
        return;
    }
    for name in &want {
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(dir.join(name))
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .output()
            .unwrap();
        assert!(out.status.success(), "man -l {name}: {out:?}");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(warnings.trim().is_empty(), "{name}: {warnings}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("NAME") && text.contains("SYNOPSIS"),
            "{name}: {text}"
        );
        assert!(
            text.contains("EXAMPLES") && text.contains("EXIT STATUS"),
            "{name}: {text}"
        );
        // Every option in the synopsis shows its value.
        assert!(
            !text.contains(" ]"),
            "{name}: an option without its value: {text}"
        );
    }
}

/// Run `script` with `shell -n` (parse only).
fn parses(shell: &str, script: &Path) {
    let out = Command::new(shell).arg("-n").arg(script).output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{shell} -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completion_scripts_parse_and_bash_completes_commands_and_options() {
    let test = "completion_scripts_parse_and_bash_completes_commands_and_options";
    let t = tempfile::tempdir().unwrap();
    let write = |shell: &str| {
        let p = t.path().join(format!("lanefs.{shell}"));
        std::fs::write(&p, lanefs(&["completions", shell]).stdout).unwrap();
        p
    };
    let bash = write("bash");
    parses("bash", &bash);
    // bash's completion function, as the shell calls it for `lanefs m<TAB>` and for
    // `lanefs mkfs --bl<TAB>`.
    let complete = |words: &str| {
        let script = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; _lanefs lanefs; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            bash.display()
        );
        let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cmds = complete("lanefs m");
    for c in ["mkfs", "mkdir", "mount", "memfs", "man"] {
        assert!(cmds.lines().any(|l| l == c), "lanefs m<TAB>: {cmds}");
    }
    let opts = complete("lanefs mkfs --bl");
    assert!(opts.lines().any(|l| l == "--block-size"), "{opts}");
    for shell in ["zsh", "fish"] {
        if need(test, shell) {
            parses(shell, &write(shell));
        }
    }
    let bad = Command::new(LANEFS)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
