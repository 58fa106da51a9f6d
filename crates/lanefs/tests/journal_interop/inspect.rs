//! Image inspection with e2fsprogs: what `dumpe2fs -h` says about recovery and the orphan
//! list (`SbInfo`), the free blocks and inodes of the superblock and of the groups
//! (`Counts`), whether an inode is in use, the transactions in the log and where the log
//! lies, and e2fsck: `-fn` must be clean, and what `-fy` fixed is sorted (`Repair`).

use super::*;

// ---------------------------------------------------------------------------------------
// Image inspection with e2fsprogs.

/// What `dumpe2fs -h` says about recovery and the orphan list.
#[derive(Debug, Clone)]
pub(super) struct SbInfo {
    pub(super) features: String,
    pub(super) needs_recovery: bool,
    pub(super) journal_start: u64,
    pub(super) journal_seq: u64,
    pub(super) first_orphan: Option<u64>,
    /// The journal part of the output, for messages.
    pub(super) journal: String,
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    // The header ends where the per-group lines ("Group 0: ...") start.
    let group_line = |l: &str| {
        l.strip_prefix("Group ")
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    };
    text.lines()
        .take_while(|l| !group_line(l))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

fn num(s: Option<&str>) -> u64 {
    let s = s.unwrap_or("0");
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or(0),
        None => s.parse().unwrap_or(0),
    }
}

pub(super) fn sb_info(img: &Path) -> Result<SbInfo, String> {
    let out = run(Command::new("dumpe2fs").arg("-h").arg(img))?;
    let features = field(&out, "Filesystem features").unwrap_or("").to_string();
    Ok(SbInfo {
        needs_recovery: features.split_whitespace().any(|f| f == "needs_recovery"),
        features,
        journal_start: num(field(&out, "Journal start")),
        journal_seq: num(field(&out, "Journal sequence")),
        first_orphan: field(&out, "First orphan inode").map(|s| num(Some(s))),
        journal: out
            .lines()
            .filter(|l| l.starts_with("Journal") || l.contains("journal"))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

pub(super) fn sb_info_or_panic(img: &Path) -> SbInfo {
    sb_info(img).unwrap_or_else(|e| panic!("dumpe2fs -h {}: {e}", img.display()))
}

/// Free blocks and inodes: the superblock's, and the sums over the group descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) sb_blocks: u64,
    pub(super) sb_inodes: u64,
    pub(super) group_blocks: u64,
    pub(super) group_inodes: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "superblock {} free blocks / {} free inodes, groups {} / {}",
            self.sb_blocks, self.sb_inodes, self.group_blocks, self.group_inodes
        )
    }
}

pub(super) fn counts(img: &Path) -> Result<Counts, String> {
    let out = run(Command::new("dumpe2fs").arg(img))?;
    let (mut gb, mut gi) = (0, 0);
    for l in out.lines() {
        // "  27283 free blocks, 8181 free inodes, 2 directories, 8179 unused inodes"
        let Some((b, rest)) = l.trim().split_once(" free blocks, ") else {
            continue;
        };
        let Some((i, _)) = rest.split_once(" free inodes") else {
            continue;
        };
        gb += b.trim().parse::<u64>().unwrap_or(0);
        gi += i.trim().parse::<u64>().unwrap_or(0);
    }
    Ok(Counts {
        sb_blocks: num(field(&out, "Free blocks")),
        sb_inodes: num(field(&out, "Free inodes")),
        group_blocks: gb,
        group_inodes: gi,
    })
}

/// Whether `ino` is marked in use in the inode bitmap (`debugfs testi`).
pub(super) fn inode_in_use(img: &Path, ino: u64) -> Result<bool, String> {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("testi <{ino}>"))
        .arg(img)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("is not in use") {
        Ok(false)
    } else if text.contains("is marked in use") {
        Ok(true)
    } else {
        Err(format!(
            "debugfs testi <{ino}>: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Transactions in the log (`debugfs logdump`: commit blocks found).
pub(super) fn log_commits(img: &Path) -> Result<usize, String> {
    // -c: a crash image's bitmaps may not match their checksums before replay.
    let out = Command::new("debugfs")
        .args(["-c", "-R", "logdump"])
        .arg(img)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Journal starts at") {
        Ok(text.matches("(commit block)").count())
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Byte ranges of the journal inode's blocks after its superblock (`debugfs stat <8>`).
pub(super) fn journal_log_ranges(img: &Path) -> Vec<(u64, u64)> {
    let out =
        run(Command::new("debugfs").arg("-R").arg("stat <8>").arg(img)).expect("debugfs stat <8>");
    let ext = out
        .split("EXTENTS:")
        .nth(1)
        .expect("journal inode has extents");
    let mut ranges = Vec::new();
    for tok in ext.split([',', '\n']).map(str::trim) {
        // "(0-4095):32801-36896" or "(7):1234"; "(ETB0):..." are index blocks.
        let Some((l, p)) = tok.strip_prefix('(').and_then(|t| t.split_once("):")) else {
            continue;
        };
        if l.starts_with("ETB") {
            continue;
        }
        let l0: u64 = l
            .split('-')
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0);
        let mut ps = p.split('-').map(|x| x.trim().parse::<u64>());
        let (Some(Ok(p0)), p1) = (ps.next(), ps.next()) else {
            continue;
        };
        let p1 = match p1 {
            Some(Ok(p1)) => p1,
            _ => p0,
        };
        // Logical block 0 is the journal superblock, not the log.
        let p0 = if l0 == 0 { p0 + 1 } else { p0 };
        if p0 <= p1 {
            ranges.push((p0 * BS, (p1 + 1) * BS));
        }
    }
    assert!(!ranges.is_empty(), "no journal extents in:\n{out}");
    ranges
}

/// `e2fsck -fn` must exit 0 and answer no question.
pub(super) fn fsck_n(img: &Path) -> Result<(), String> {
    let (code, text) = common::e2fsck(img);
    let asked = text.lines().any(|l| l.trim_end().ends_with("? no"));
    if code == 0 && !asked {
        Ok(())
    } else {
        Err(format!("exit {code}:\n{}", indent(&text)))
    }
}

/// Output lines, indented for a message; at most 60 of them.
pub(super) fn indent(text: &str) -> String {
    const MAX: usize = 60;
    let lines: Vec<&str> = text.lines().collect();
    let mut s = lines
        .iter()
        .take(MAX)
        .map(|l| format!("        | {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > MAX {
        s.push_str(&format!("\n        | ... {} more lines", lines.len() - MAX));
    }
    s
}

/// What `e2fsck -fy` did.
pub(super) struct Repair {
    pub(super) code: i32,
    pub(super) output: String,
    /// "recovering journal" was printed.
    pub(super) recovered: bool,
    /// Problems it fixed, beyond the lazy superblock counters and orphan clearing.
    pub(super) extra_fixes: Vec<String>,
    /// Lines about the journal other than "recovering journal".
    pub(super) journal_complaints: Vec<String>,
}

pub(super) fn e2fsck_fy(img: &Path) -> Repair {
    let out = Command::new("e2fsck")
        .arg("-fy")
        .arg(img)
        .output()
        .expect("run e2fsck -fy");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    let mut extra_fixes = Vec::new();
    for (k, l) in lines.iter().enumerate() {
        if !l.ends_with("? yes") {
            continue;
        }
        // "Fix? yes" alone follows its problem; otherwise the problem is on the line.
        let problem = if l.split_whitespace().count() <= 3 && k > 0 {
            let prev = lines[..k].iter().rev().find(|p| !p.is_empty());
            format!("{} {l}", prev.unwrap_or(&""))
        } else {
            l.to_string()
        };
        let lazy = problem.starts_with("Free blocks count wrong (")
            || problem.starts_with("Free inodes count wrong (");
        if !lazy {
            extra_fixes.push(problem);
        }
    }
    let journal_complaints = lines
        .iter()
        .filter(|l| l.to_lowercase().contains("journal") && !l.contains("recovering journal"))
        .map(|l| l.to_string())
        .collect();
    Repair {
        code: out.status.code().unwrap_or(-1),
        recovered: output.contains("recovering journal"),
        output,
        extra_fixes,
        journal_complaints,
    }
}
