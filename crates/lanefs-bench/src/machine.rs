//! The machine and build a run measured, for reports: CPUs, memory, kernel, commit.

/// What a report says about where its numbers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The CPU's model name (`/proc/cpuinfo`), or "unknown".
    pub cpu_model: String,
    /// Memory in bytes (`/proc/meminfo`), when known.
    pub memory: Option<u64>,
    /// The running kernel's release (`/proc/sys/kernel/osrelease`), or "unknown".
    pub kernel: String,
    /// The commit the bench was built from, "+dirty" when the tree had changes, or
    /// "unknown" (see the crate's build script).
    pub commit: &'static str,
}

impl Machine {
    /// This machine, now.
    pub fn here() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map_or("unknown".to_string(), |(_, v)| v.trim().to_string());
        let memory = read("/proc/meminfo").lines().find_map(|l| {
            let kib: u64 = l
                .strip_prefix("MemTotal:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()?;
            Some(kib * 1024)
        });
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
            memory,
            kernel: if kernel.is_empty() {
                "unknown".to_string()
            } else {
                kernel
            },
            commit: env!("LANEFS_COMMIT"),
        }
    }

    /// One line: "2 CPUs (MODEL), 24.0 GiB, Linux 6.18.0, lanefs abc123".
    pub fn text(&self) -> String {
        let mem = self
            .memory
            .map(|b| format!(", {:.1} GiB", b as f64 / f64::from(1u32 << 30)))
            .unwrap_or_default();
        format!(
            "{} CPUs ({}){mem}, Linux {}, lanefs {}",
            self.cpus, self.cpu_model, self.kernel, self.commit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Machine;

    #[test]
    fn describes_this_machine() {
        let m = Machine::here();
        assert!(m.cpus >= 1);
        assert!(!m.commit.is_empty());
        let t = m.text();
        assert!(t.contains("CPUs") && t.contains("Linux"), "{t}");
    }
}
