//! Where the daemon's log lines go: stderr in the foreground (`-f`), syslog (facility
//! daemon, ident `lanefs`) once daemonized, as fuse2fs does.

use std::sync::atomic::{AtomicBool, Ordering};

static SYSLOG: AtomicBool = AtomicBool::new(false);

/// Send later log lines to syslog instead of stderr (called once, when daemonizing).
pub fn to_syslog() {
    // SAFETY: openlog keeps the ident pointer; a static C string literal lives for the
    // whole program.
    unsafe {
        libc::openlog(
            c"lanefs".as_ptr(),
            libc::LOG_PID | libc::LOG_NDELAY,
            libc::LOG_DAEMON,
        )
    };
    SYSLOG.store(true, Ordering::Release);
}

/// Log one line.
pub fn line(msg: &str) {
    if SYSLOG.load(Ordering::Acquire) {
        let c = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: "%s" takes exactly one NUL-terminated string argument, which `c` is, and
        // it outlives the call.
        unsafe { libc::syslog(libc::LOG_ERR, c"%s".as_ptr(), c.as_ptr()) };
    } else {
        // A closed stderr (`lanefs mount -f ... 2>&1 | head -1`) loses the line; eprintln
        // would panic and take the mount down.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "lanefs: {msg}");
    }
}
