//! `lanefs bench --report FILE.md`: one Markdown file that can be attached to a bug report
//! or a paper: the machine and commit, what ran, what each variant means, every workload's
//! compact table with its chart, and every field of every run.

use crate::config::{BenchConfig, TargetSpec};
use crate::machine::Machine;
use crate::report::{compact, Record};
use crate::variant::Family;
use std::path::{Path, PathBuf};

/// The report of a run of `cfg` that made `records`, with `charts` (the SVGs written, one
/// per workload, linked relative to `report`'s directory when they are under it).
pub fn report(cfg: &BenchConfig, records: &[Record], charts: &[PathBuf], report: &Path) -> String {
    let m = Machine::here();
    let mut out = String::from("# lanefs bench report\n\n");
    out.push_str(&format!("{}.\n\n", m.text()));
    out.push_str("## The run\n\n");
    out.push_str(&format!("- target: {}\n", target_text(&cfg.target)));
    out.push_str(&format!("- workloads: {}\n", cfg.workloads.join(", ")));
    out.push_str(&format!(
        "- thread counts: {}\n",
        match &cfg.threads {
            Some(t) => format!("{t:?}"),
            None => format!("{:?} (powers of two up to the CPUs)", cfg.sweep()),
        }
    ));
    out.push_str(&format!(
        "- {}, interleaved (tables show the median); {} s measured per duration-timed run \
         after {} s of warm-up; {} files per thread (mdtest, mdtest-shared, stat)\n",
        if cfg.reps == 1 {
            "1 repetition".to_string()
        } else {
            format!("{} repetitions", cfg.reps)
        },
        cfg.seconds,
        cfg.warmup,
        cfg.files
    ));
    out.push_str(
        "- the control loop (threads that share no memory) runs at every thread count: its \
         scaling is the machine's ceiling, given in each table's title and drawn as the \
         charts' dashed line\n\n",
    );
    out.push_str(&variants_section(cfg, records));
    out.push_str("## Results\n\n");
    for table in compact::tables(records) {
        out.push_str(&table.markdown());
        if let Some(chart) = charts
            .iter()
            .find(|p| p.file_stem().and_then(|s| s.to_str()) == Some(table.workload.as_str()))
        {
            out.push_str(&format!(
                "![{} chart]({})\n\n",
                table.workload,
                link(chart, report)
            ));
        }
    }
    let (heading, goals) = match cfg.target {
        TargetSpec::Compare { .. } => ("Goals", crate::compare::goals(records)),
        _ => (
            "The seeds beside this run",
            crate::report::seeds::render(records),
        ),
    };
    if !goals.trim().is_empty() {
        out.push_str(&format!(
            "## {heading}\n\n```text\n{}\n```\n\n",
            goals.trim()
        ));
    }
    let saturation = crate::report::saturation::render(records);
    if !saturation.is_empty() {
        out.push_str(&format!(
            "## Lock saturation\n\n```text\n{}\n```\n\n",
            saturation.trim()
        ));
    }
    let full = match cfg.target {
        TargetSpec::Compare { .. } => crate::compare::render(records),
        _ => crate::report::render_table(records),
    };
    out.push_str(&format!(
        "## Every field\n\nThe full tables (`lanefs bench --verbose`); the JSON records \
         (`--json`) hold the same and more.\n\n```text\n{}\n```\n",
        full.trim_end()
    ));
    out
}

/// The target in words.
fn target_text(target: &TargetSpec) -> String {
    match target {
        TargetSpec::Lanefs {
            size, block_size, ..
        } => format!(
            "the engine in-process (function calls, no kernel) on a fresh sparse {} image \
             per run, {block_size}-byte blocks",
            size_text(*size)
        ),
        TargetSpec::Path(dir) => format!("real syscalls in {}", dir.display()),
        TargetSpec::Compare { size } => format!(
            "real syscalls on mounts of alike mkfs.ext4 images of {}: lanefs's FUSE \
             mount, the FUSE ceiling (lanefs memfs), fuse2fs and the kernel's ext4 (loop device)",
            size_text(*size)
        ),
    }
}

fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// `chart` relative to `report`'s directory when it is under it, else as given.
fn link(chart: &Path, report: &Path) -> String {
    let dir = report.parent().filter(|d| !d.as_os_str().is_empty());
    let base = dir.map_or_else(
        || std::env::current_dir().unwrap_or_default(),
        Path::to_path_buf,
    );
    let (Ok(c), Ok(b)) = (chart.canonicalize(), base.canonicalize()) else {
        return chart.display().to_string();
    };
    c.strip_prefix(&b)
        .map_or_else(|_| c.display().to_string(), |p| p.display().to_string())
}

/// What each variant that ran means: its family's mechanism in words and its mount options.
fn variants_section(cfg: &BenchConfig, records: &[Record]) -> String {
    if !matches!(cfg.target, TargetSpec::Lanefs { .. }) {
        return String::new();
    }
    let mut out = String::from(
        "## The variants\n\nEach workload runs the variants of its seed, interleaved; the \
         changes are measured against its family's baseline (`base`, for the inode cache \
         alone `global`, for the realtime allocator `plain`).\n\n\
         | workload | variant | what it is | mount options |\n|---|---|---|---|\n",
    );
    for w in &cfg.workloads {
        let Some(family) = crate::workloads::find(w).map(|w| w.family()) else {
            continue;
        };
        for v in cfg.variants_for(w) {
            if !records
                .iter()
                .any(|r| r.workload == *w && r.variant == v.name)
            {
                continue;
            }
            out.push_str(&format!(
                "| {w} | {} | {} | `{}` |\n",
                v.name,
                meaning(family, &v.name),
                v.options_text()
            ));
        }
    }
    out.push('\n');
    out
}

/// A variant's mechanism in words.
pub fn meaning(family: Family, name: &str) -> &'static str {
    match (family, name) {
        (_, "default") => "lanefs's defaults (`MountOptions::default()`)",
        (Family::Blocks, "base") => {
            "ext4 before seed 000: blocking group locks, one stream goal for all (s_md_lock)"
        }
        (Family::Blocks, "trylock") => "seed 000 patch 1: skip busy groups (ext4_try_lock_group)",
        (Family::Blocks, "linear") => {
            "seed 000 patches 1+2: busy groups skipped, stream goal per inode, linear scan"
        }
        (Family::Blocks, "optimize_scan") => {
            "seed 000 with mb_optimize_scan's group lists (lanefs's default)"
        }
        (Family::Blocks, "slots") => "lanefs's own: stream goals in per-CPU slots",
        (Family::Inodes, "base") => {
            "before seeds 001 and 004: inode bitmap searched under the group lock, one lock \
             for the inode cache"
        }
        (Family::Inodes, "ialloc") => {
            "seed 001 alone: free bit found without the lock, set by test-and-set; global \
             cache lock"
        }
        (Family::Inodes, "icache") => "seed 004 alone: the inode cache with a lock per bucket",
        (Family::Inodes, "lanefs") => "seeds 001 and 004 together (lanefs's default)",
        (Family::Inodes, "global") => "inode cache under one lock, as the VFS's inode_hash_lock",
        (Family::Inodes, "bucket") => {
            "inode cache with a lock per bucket, lock-free lookups (lanefs's default)"
        }
        (Family::Inodes, "papaya") => "inode cache in papaya, a lock-free map (comparison)",
        (Family::Pages, "base") => "before seed 002: single-block pages (folio order 0)",
        (Family::Pages, "order2") => "large folios up to order 2",
        (Family::Pages, "order6") => "large folios up to order 6",
        (Family::Realtime, "plain") => "XFS's realtime allocator as in Linux 6.4",
        (Family::Realtime, "lean") => "seed 003: the 6.7 series' six changes (the default)",
        _ => "raw mount options",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every named variant of every family has words of its own.
    #[test]
    fn every_variant_has_a_meaning() {
        for f in Family::ALL {
            for name in f.variant_names() {
                assert_ne!(meaning(f, name), "raw mount options", "{f:?} {name}");
            }
        }
    }
}
