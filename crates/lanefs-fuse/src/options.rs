//! `-o` mount options: the FUSE frontend's own, the kernel's VFS flags, and every engine
//! option (`lanefs::MountOptions::apply`). Unknown or malformed options are refused by
//! name, before anything is opened.

use lanefs::{MountOptions, OptionError, OptionProblem};
use std::time::Duration;

/// What to do when the engine meets a corrupt structure or a failing device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// The operation fails with EIO; a failed journal turns the mount read-only (ext4's
    /// `errors=remount-ro`, the default).
    #[default]
    RemountRo,
    /// The daemon logs and exits at once, leaving the journal to replay (ext4's
    /// `errors=panic`; the mount point then reports "transport endpoint is not
    /// connected" until unmounted).
    Panic,
}

/// Which transport carries requests: FUSE-over-io_uring where the kernel offers it (the
/// default), always (`io_uring`: the mount fails without it), or never (`no_io_uring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UringMode {
    /// io_uring when the kernel offers it, else /dev/fuse (one log line says which).
    #[default]
    Auto,
    /// io_uring or no mount.
    Required,
    /// /dev/fuse only.
    Off,
}

/// `io_uring_spin`'s default, in microseconds: a little longer than a program takes
/// between two requests when it does nothing else (measured in docs/fuse-frontend.md).
pub const DEFAULT_SPIN_US: u64 = 200;

/// The most CPUs on which the queue threads poll by default. Polling helps only when it
/// leaves no CPU idle for the scheduler to wake a program on, so every queue must poll;
/// beyond this many CPUs that would burn too many of them, and there the default is not
/// to poll (`io_uring_spin=` still sets it).
pub const SPIN_MAX_CPUS: usize = 4;

/// The CPUs the daemon may use: its affinity and its cgroup's CPU quota, as the standard
/// library counts them.
fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(usize::MAX, |n| n.get())
}

/// The default `io_uring_spin` where the daemon may use `cpus` CPUs.
pub fn default_spin(cpus: usize) -> Duration {
    if cpus <= SPIN_MAX_CPUS {
        Duration::from_micros(DEFAULT_SPIN_US)
    } else {
        Duration::ZERO
    }
}

/// How long the kernel may cache attributes, names and missing names by default: a day.
/// The daemon is the image's only writer (exclusive access) and every change comes from
/// a kernel request, after which the kernel drops what it changed (the parent's
/// attributes after a create, a file's size and times after a write, atime after a
/// read); what the daemon changes on its own (set-user-ID cleared by a write) it tells
/// the kernel with a notification. So what the kernel caches stays true, and every
/// `stat`, path walk and permission check it can answer costs no request.
pub const CACHE_SECS: u64 = 86_400;

/// Everything `lanefs mount -o ...` can set.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The engine's options (`ro`, `commit=`, the `mb_*` allocator policies).
    pub engine: MountOptions,
    /// Let other users in (`allow_other`).
    pub allow_other: bool,
    /// Let root in besides the owner (`allow_root`).
    pub allow_root: bool,
    /// `default_permissions` was given: the kernel checks permissions even on a mount
    /// only the mounter reaches. Implied by `allow_other` and `allow_root`
    /// ([`MountConfig::kernel_checks_permissions`]); nothing turns it off.
    pub default_permissions: bool,
    /// Request threads, each with its own cloned /dev/fuse fd (`threads=N`).
    pub threads: usize,
    /// Let the kernel cache writes (`writeback_cache`).
    pub writeback_cache: bool,
    /// How long the kernel may cache attributes (`attr_timeout=SECS`).
    pub attr_timeout: Duration,
    /// How long the kernel may cache names (`entry_timeout=SECS`).
    pub entry_timeout: Duration,
    /// How long the kernel may cache that a name does not exist (`negative_timeout=SECS`;
    /// 0: it asks again at every lookup). Every name this daemon makes comes from a kernel
    /// request, which replaces the kernel's negative entry, so caching one is as safe as
    /// caching a positive one.
    pub negative_timeout: Duration,
    /// Largest write request (`max_write=BYTES`).
    pub max_write: Option<u32>,
    /// FUSE-over-io_uring (`io_uring`, `no_io_uring`; default: where offered).
    pub io_uring: UringMode,
    /// Entries per io_uring queue (`io_uring_depth=N`, one queue per CPU).
    pub io_uring_depth: usize,
    /// How long every io_uring queue thread keeps polling for a request after the last
    /// one any queue served, before it sleeps (`io_uring_spin=USECS`; 0: never polls;
    /// default [`default_spin`]: 200 us on up to 4 CPUs, else 0).
    /// A polling thread keeps its CPU from idling, so the scheduler wakes the program
    /// that made a request on the CPU that answered it instead of waking an idle one.
    pub io_uring_spin: Duration,
    /// `errors=remount-ro|panic`.
    pub errors: ErrorPolicy,
    /// The mount's source as `/proc/mounts` shows it (`fsname=` or `source=`).
    pub fsname: Option<String>,
    /// Kernel VFS flags passed through (`nosuid`, `nodev`, `noexec`, `noatime`, ...).
    pub vfs_flags: Vec<String>,
    /// The process that unmounts for the daemon (`lanefs mount`'s supervisor): a signal
    /// the daemon gets goes to it, and the daemon confines itself once the mount is up
    /// (see [`crate::confine`]). `None` (the library's callers, tests): the daemon
    /// unmounts on a signal itself and is not confined.
    pub supervisor: Option<i32>,
    /// `unconfined`: serve without the confinement even when supervised.
    pub unconfined: bool,
    /// The daemon's end of the supervisor's [`crate::flagproxy`] channel (a descriptor
    /// the daemon owns for its life), where a confined daemon asks for FS_IOC_SHUTDOWN's
    /// flags.
    pub flag_channel: Option<i32>,
}

impl Default for MountConfig {
    fn default() -> MountConfig {
        MountConfig {
            engine: MountOptions::default(),
            allow_other: false,
            allow_root: false,
            default_permissions: false,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            writeback_cache: false,
            attr_timeout: Duration::from_secs(CACHE_SECS),
            entry_timeout: Duration::from_secs(CACHE_SECS),
            negative_timeout: Duration::from_secs(CACHE_SECS),
            max_write: None,
            io_uring: UringMode::Auto,
            io_uring_depth: 8,
            io_uring_spin: default_spin(usable_cpus()),
            errors: ErrorPolicy::RemountRo,
            fsname: None,
            vfs_flags: Vec::new(),
            supervisor: None,
            unconfined: false,
            flag_channel: None,
        }
    }
}

/// The options that take no value (`MountConfig::switch`).
const SWITCHES: &[&str] = &[
    "allow_other",
    "allow_root",
    "default_permissions",
    "writeback_cache",
    "io_uring",
    "no_io_uring",
    "unconfined",
];

/// The options that take a number (`MountConfig::number`).
const NUMBERS: &[&str] = &[
    "threads",
    "io_uring_depth",
    "io_uring_spin",
    "max_write",
    "attr_timeout",
    "entry_timeout",
    "negative_timeout",
];

/// VFS flags the kernel applies to the mount itself; passed through unchanged.
const VFS_FLAGS: &[&str] = &[
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
    "nodiratime",
    "sync",
    "async",
    "dirsync",
];

/// Options mount(8) and fstab carry that concern only them: accepted and ignored.
const FSTAB_ONLY: &[&str] = &[
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users",
];

impl MountConfig {
    /// Apply a comma-separated option list (one `-o` argument); the first option refused
    /// is named in the error.
    pub fn parse(&mut self, list: &str) -> Result<(), OptionError> {
        for opt in list.split(',').filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            self.apply(key, value)?;
        }
        Ok(())
    }

    fn apply(&mut self, key: &str, value: Option<&str>) -> Result<(), OptionError> {
        let refuse = |problem| OptionError::new(key, value, problem);
        let need = || value.ok_or_else(|| refuse(OptionProblem::NeedsValue));
        let no_value = || match value {
            None => Ok(()),
            Some(_) => Err(refuse(OptionProblem::TakesNoValue)),
        };
        let expected = |what: &'static str| Err(refuse(OptionProblem::Expected(what.into())));
        if SWITCHES.contains(&key) {
            no_value()?;
            self.switch(key);
            return Ok(());
        }
        if NUMBERS.contains(&key) {
            return self.number(key, need()?).map_err(refuse);
        }
        match key {
            "errors" => {
                self.errors = match need()? {
                    "remount-ro" => ErrorPolicy::RemountRo,
                    "panic" => ErrorPolicy::Panic,
                    _ => return expected("remount-ro or panic"),
                }
            }
            "fsname" | "source" => self.fsname = Some(need()?.to_string()),
            "subtype" => {
                if need()? != "lanefs" {
                    return expected("lanefs");
                }
            }
            k if VFS_FLAGS.contains(&k) => {
                no_value()?;
                self.vfs_flags.push(k.to_string());
                // The atime flags are the engine's to apply: FUSE inodes are S_NOATIME.
                self.engine.apply(k, None)?;
            }
            k if FSTAB_ONLY.contains(&k) || k.starts_with("x-") || k == "comment" => {}
            k => {
                if !self.engine.apply(k, value)? {
                    return Err(refuse(OptionProblem::Unknown));
                }
            }
        }
        Ok(())
    }

    /// Set the option `key`, one of `SWITCHES`.
    fn switch(&mut self, key: &str) {
        match key {
            "allow_other" => self.allow_other = true,
            "allow_root" => self.allow_root = true,
            "default_permissions" => self.default_permissions = true,
            "writeback_cache" => self.writeback_cache = true,
            "io_uring" => self.io_uring = UringMode::Required,
            "no_io_uring" => self.io_uring = UringMode::Off,
            "unconfined" => self.unconfined = true,
            other => debug_assert!(false, "{other} is not in SWITCHES"),
        }
    }

    /// Set the numeric option `key` (one of `NUMBERS`) from `v`.
    fn number(&mut self, key: &str, v: &str) -> Result<(), OptionProblem> {
        let int = |range: std::ops::RangeInclusive<u64>, what: &'static str| {
            v.parse::<u64>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or(OptionProblem::Expected(what.into()))
        };
        let secs = || -> Result<Duration, OptionProblem> {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
                .map(Duration::from_secs_f64)
                .ok_or(OptionProblem::Expected("seconds".into()))
        };
        match key {
            "threads" => self.threads = int(1..=1024, "1 to 1024")? as usize,
            "io_uring_depth" => self.io_uring_depth = int(1..=128, "1 to 128")? as _,
            "io_uring_spin" => {
                let us = int(0..=1_000_000, "0 to 1000000 microseconds")?;
                self.io_uring_spin = Duration::from_micros(us);
            }
            "max_write" => {
                self.max_write = Some(int(4096..=16 << 20, "4096 to 16777216 bytes")? as _);
            }
            "attr_timeout" => self.attr_timeout = secs()?,
            "entry_timeout" => self.entry_timeout = secs()?,
            "negative_timeout" => self.negative_timeout = secs()?,
            _ => return Err(OptionProblem::Unknown),
        }
        Ok(())
    }

    /// Whether the kernel checks permissions (`default_permissions`, and POSIX ACLs with
    /// it): whenever users other than the mounter can reach the mount (`allow_other`,
    /// `allow_root`), whoever mounts, so that every access is checked as ext4 checks it
    /// (mode bits, owner and groups, ACLs, sticky directories, the capabilities of the
    /// real root), the mounter's own included; or when `default_permissions` is given.
    /// There is no option to turn it off. Without it (a mount only its non-root mounter
    /// reaches, who owns the image's bytes anyway) the daemon checks no mode bits.
    pub fn kernel_checks_permissions(&self) -> bool {
        self.default_permissions || self.allow_other || self.allow_root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_by_name() {
        let mut c = MountConfig::default();
        c.parse("ro,allow_other,threads=3,attr_timeout=0.5,mb_stream_goal=slots,commit=2,nosuid")
            .unwrap();
        assert!(c.engine.read_only && c.allow_other);
        assert_eq!(c.threads, 3);
        assert_eq!(c.attr_timeout, Duration::from_millis(500));
        assert_eq!(c.negative_timeout, Duration::from_secs(CACHE_SECS));
        c.parse("negative_timeout=0").unwrap();
        assert!(c.negative_timeout.is_zero());
        assert_eq!(c.engine.mb_stream_goal, lanefs::StreamGoal::Slots);
        assert_eq!(c.engine.commit_interval, Duration::from_secs(2));
        assert_eq!(c.vfs_flags, vec!["nosuid".to_string()]);
        c.parse("noatime,nodiratime").unwrap();
        assert_eq!(c.engine.atime, lanefs::AtimePolicy::Never);
        assert!(c.engine.nodiratime);
        let err = |s: &str| MountConfig::default().parse(s).unwrap_err().to_string();
        assert_eq!(err("bogus"), "unknown mount option \"bogus\"");
        assert_eq!(err("ro,bogus=1,rw"), "unknown mount option \"bogus\"");
        // Typed: the option, its value and what is wrong, for the frontend's options and
        // the engine's alike.
        let typed = |s: &str| MountConfig::default().parse(s).unwrap_err();
        let expected = |what: &'static str| OptionProblem::Expected(what.into());
        assert_eq!(
            typed("threads=0"),
            OptionError::new("threads", Some("0"), expected("1 to 1024"))
        );
        assert_eq!(
            typed("subtype=ext4"),
            OptionError::new("subtype", Some("ext4"), expected("lanefs"))
        );
        assert_eq!(
            typed("nosuid=1"),
            OptionError::new("nosuid", Some("1"), OptionProblem::TakesNoValue)
        );
        assert_eq!(
            typed("commit"),
            OptionError::new("commit", None, OptionProblem::NeedsValue)
        );
        assert_eq!(
            err("errors=continue"),
            "option errors=continue: expected remount-ro or panic"
        );
        assert!(err("threads=0").contains("threads=0"));
        assert!(err("threads").contains("needs a value"));
        assert!(err("mb_trylock=2").contains("mb_trylock=2"));
        assert!(err("errors=continue").contains("errors=continue"));
        assert!(err("allow_other=1").contains("takes no value"));
        assert!(err("max_write=12").contains("max_write=12"));
        assert!(err("io_uring=1").contains("takes no value"));
        assert!(err("io_uring_depth=0").contains("io_uring_depth=0"));
        assert!(err("io_uring_spin=2000000").contains("io_uring_spin=2000000"));
        assert!(err("io_uring_spin=-1").contains("io_uring_spin=-1"));
        let mut s = MountConfig::default();
        s.parse("io_uring_spin=0").unwrap();
        assert!(s.io_uring_spin.is_zero());
        s.parse("io_uring_spin=50").unwrap();
        assert_eq!(s.io_uring_spin, Duration::from_micros(50));
        // Polling by default only where every CPU can be kept busy.
        assert_eq!(default_spin(2), Duration::from_micros(DEFAULT_SPIN_US));
        assert_eq!(
            default_spin(SPIN_MAX_CPUS),
            Duration::from_micros(DEFAULT_SPIN_US)
        );
        assert!(default_spin(SPIN_MAX_CPUS + 1).is_zero());
        let mut u = MountConfig::default();
        assert_eq!(u.io_uring, UringMode::Auto);
        u.parse("io_uring,io_uring_depth=4").unwrap();
        assert_eq!((u.io_uring, u.io_uring_depth), (UringMode::Required, 4));
        u.parse("no_io_uring").unwrap();
        assert_eq!(u.io_uring, UringMode::Off);
    }

    #[test]
    fn other_users_imply_kernel_permission_checks() {
        let checks = |s: &str| {
            let mut c = MountConfig::default();
            c.parse(s).unwrap();
            c.kernel_checks_permissions()
        };
        // Only the mounter reaches the mount: no checks unless asked for.
        assert!(!checks(""));
        assert!(!checks("ro,threads=2"));
        assert!(checks("default_permissions"));
        // Anyone else can: always, whoever mounts (the answer no longer depends on root).
        assert!(checks("allow_other"));
        assert!(checks("allow_root"));
        assert!(checks("allow_other,default_permissions"));
        assert!(checks("ro,allow_root,nosuid"));
        // Nothing turns them off.
        let err = |s: &str| MountConfig::default().parse(s).unwrap_err().to_string();
        assert!(err("allow_other,no_default_permissions").contains("no_default_permissions"));
        assert!(err("default_permissions=0").contains("takes no value"));
    }
}
