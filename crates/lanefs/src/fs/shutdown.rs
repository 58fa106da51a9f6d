//! Shutdown: ext4's `FS_IOC_SHUTDOWN` (XFS's `XFS_IOC_GOINGDOWN`, what fstests'
//! `godown` and `xfs_io -c shutdown` send), which stops a mount where it stands, as a
//! crash would, but with the machine still running.
//!
//! As `ext4_force_shutdown` (fs/ext4/ioctl.c): the mode says what is made durable first,
//! then the mount stops. From then on nothing more reaches the image: the device wrapper
//! every write goes through (`ErrorLatch`, the image's and the realtime device's) refuses
//! every write and flush, whichever thread issues it (an operation, the commit timer, the flusher, the MMP
//! updater), and waits for those under way. Operations that would change something,
//! read file data or an attribute's value, open a file or make anything durable fail
//! with [`Error::ShutDown`] (EIO); those ext4 still answers after a shutdown, from memory
//! and from the image, answer here too: [`Fs::getattr`], [`Fs::lookup`],
//! [`Fs::readdir`], [`Fs::readlink`], [`Fs::listxattr`], [`Fs::statfs`] and the flags
//! and extent reports (ext4_getattr, ext4_lookup, ext4_readdir, ext4_listxattr and
//! ext4_statfs check no shutdown; ext4_file_open, ext4_file_read_iter, ext4_xattr_get,
//! ext4_sync_file and every journal handle start do). [`Fs::release`] drops its
//! reference and frees nothing. [`Fs::unmount`] writes nothing: the image keeps what was
//! committed, marked as needing recovery, and the next mount replays its journal.

use super::*;
use std::sync::atomic::Ordering;

/// How [`Fs::shutdown`] stops the mount: ext4's `EXT4_GOING_FLAGS_*`, the `u32` the
/// ioctl passes.
///
/// ```
/// use lanefs::{Error, ShutdownMode};
///
/// assert_eq!(ShutdownMode::from_flags(2)?, ShutdownMode::NoLogFlush);
/// assert_eq!(ShutdownMode::LogFlush.flags(), 1);
/// assert!(matches!(ShutdownMode::from_flags(3), Err(Error::Invalid(_))));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `EXT4_GOING_FLAGS_DEFAULT` (0): write every dirty page back, commit and checkpoint
    /// (ext4 freezes the device, which syncs the file system), then stop. Everything
    /// written before survives.
    Default,
    /// `EXT4_GOING_FLAGS_LOGFLUSH` (1): commit the running transaction (with the data it
    /// orders: blocks it mapped), then stop; dirty data of blocks mapped before is not
    /// written back. ext4: `jbd2_journal_force_commit`, then abort the journal.
    LogFlush,
    /// `EXT4_GOING_FLAGS_NOLOGFLUSH` (2): stop at once, committing nothing: what was
    /// committed (fsync'd) survives, the rest is lost, as after a crash. ext4: abort the
    /// journal.
    NoLogFlush,
}

impl ShutdownMode {
    /// The mode of ext4's flag value `flags`; any other value is [`Error::Invalid`]
    /// (EINVAL, as ext4 answers).
    pub fn from_flags(flags: u32) -> Result<ShutdownMode> {
        match flags {
            0 => Ok(ShutdownMode::Default),
            1 => Ok(ShutdownMode::LogFlush),
            2 => Ok(ShutdownMode::NoLogFlush),
            f => Err(Error::Invalid(format!(
                "shutdown flags {f}: expected 0 (default), 1 (logflush) or 2 (nologflush)"
            ))),
        }
    }

    /// ext4's flag value of the mode.
    pub fn flags(self) -> u32 {
        match self {
            ShutdownMode::Default => 0,
            ShutdownMode::LogFlush => 1,
            ShutdownMode::NoLogFlush => 2,
        }
    }
}

impl Fs {
    /// Shut the file system down, as ext4's `FS_IOC_SHUTDOWN` does: make durable what
    /// `mode` says, then stop writing to the image for good (see the module's
    /// documentation for what still answers). Operations started before finish in
    /// memory; none started after changes anything. A second call does nothing and
    /// returns `Ok`, as on ext4.
    ///
    /// The mount is shut down even when the flush `mode` asks for fails (a device error):
    /// the error is returned, and what the flush did not make durable may be lost. (ext4
    /// ignores a failed commit under `LogFlush`, and refuses the shutdown when the freeze
    /// of `Default` fails.)
    ///
    /// ```
    /// use lanefs::{mkfs, CrashDevice, Error, Fs, MemDevice, MountOptions, Owner};
    /// use lanefs::{ShutdownMode, ROOT_INO};
    /// use std::sync::Arc;
    ///
    /// let dev = Arc::new(CrashDevice::new(32 << 20));
    /// mkfs::format(&*dev, &mkfs::MkfsOptions::default())?;
    /// let fs = Fs::mount(dev.clone(), MountOptions::default())?;
    /// let o = Owner::default();
    /// let kept = fs.create(ROOT_INO, b"kept", 0o644, o)?;
    /// fs.write(kept.ino, 0, b"durable")?;
    /// fs.fsync(kept.ino, false)?;
    /// let lost = fs.create(ROOT_INO, b"lost", 0o644, o)?; // never committed
    ///
    /// fs.shutdown(ShutdownMode::NoLogFlush)?;
    /// let writes = dev.writes();
    /// assert_eq!(fs.create(ROOT_INO, b"more", 0o644, o), Err(Error::ShutDown));
    /// assert_eq!(fs.fsync(lost.ino, false), Err(Error::ShutDown));
    /// fs.unmount()?; // writes nothing
    /// assert_eq!(dev.writes(), writes);
    ///
    /// let fs = Fs::mount(Arc::new(MemDevice::from_vec(dev.snapshot())), MountOptions::default())?;
    /// assert_eq!(fs.lookup(ROOT_INO, b"kept")?.size, 7); // replayed
    /// assert_eq!(fs.lookup(ROOT_INO, b"lost"), Err(Error::NotFound));
    /// fs.unmount()?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn shutdown(&self, mode: ShutdownMode) -> Result<()> {
        let _one = self
            .life
            .shutdown_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.life.shut.load(Ordering::Acquire) {
            return Ok(());
        }
        // From here on no operation starts; those under way finish in memory, and a
        // flush below commits them.
        self.life.shut.store(true, Ordering::Release);
        let flushed = if self.vol.read_only {
            Ok(())
        } else {
            match mode {
                ShutdownMode::Default => self.sync_all(),
                ShutdownMode::LogFlush => self.journal.commit_running(),
                ShutdownMode::NoLogFlush => Ok(()),
            }
        };
        self.latch.shut_down();
        // kmmpd stops at a shutdown too: the MMP block stays as a crash leaves it, and
        // the next mount waits for it as after a crash.
        if let Some(g) = self
            .life
            .mmp
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            g.abandon();
        }
        flushed
    }

    /// Whether [`Fs::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.life.shut.load(Ordering::Acquire)
    }

    /// Fail with [`Error::ShutDown`] once the file system is shut down.
    pub(super) fn check_live(&self) -> Result<()> {
        if self.is_shut_down() {
            Err(Error::ShutDown)
        } else {
            Ok(())
        }
    }
}
