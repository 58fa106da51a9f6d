//! FUSE-over-io_uring (Linux 6.14+, `enable_uring` on): the kernel hands requests to
//! per-CPU queues of ring entries instead of /dev/fuse reads, and takes replies with the
//! command that fetches the next request (COMMIT_AND_FETCH), so a request costs one
//! io_uring round trip on the CPU that issued it instead of a wake-up of a reader thread
//! somewhere, a read and a write.
//!
//! The protocol (the kernel's Documentation/filesystems/fuse/fuse-io-uring.rst,
//! fs/fuse/dev_uring.c; libfuse's lib/fuse_uring.c does the same in C):
//! - FUSE_INIT arrives on /dev/fuse. The kernel offers FUSE_OVER_IO_URING there when
//!   io_uring is enabled; a server that answers with the flag must then register entries
//!   on every queue (one per possible CPU), or new requests wait for it.
//! - An entry is two buffers: a 288-byte header (`fuse_in_header`/`fuse_out_header` at 0,
//!   the operation's fixed arguments at 128, then `commit_id` at 264 and `payload_sz` at
//!   272) and a payload of the connection's largest request (names, write data; a
//!   reply's body). It is registered by an `IORING_OP_URING_CMD` (128-byte SQE) REGISTER
//!   with an iovec pair; its completion brings a request; COMMIT_AND_FETCH sends the reply
//!   and waits for the next.
//! - FORGET, INTERRUPT and anything queued before every queue has an entry still come
//!   through /dev/fuse, so one reader thread stays. Unmounting completes every waiting
//!   entry with ENOTCONN.
//!
//! Here: [`prepare`] runs before the handshake and starts one thread per possible CPU,
//! pinned to it, each with its ring built (the part that can fail: a kernel without
//! io_uring, a container's seccomp filter). The frontend's `init` asks for
//! FUSE_OVER_IO_URING only if the kernel offers it and every queue is ready. Then
//! [`Prepared::start`] gives the threads the /dev/fuse descriptor and fuser's
//! [`Dispatcher`] (the vendored fuser's one addition): each registers its entries and
//! serves them until unmount. A request is rebuilt as /dev/fuse would give it (its
//! header and fixed arguments copied just before its payload, so only those few bytes
//! move), dispatched to the same `Filesystem` as /dev/fuse requests, and its reply
//! staged and copied into the entry's buffers once the handler has returned (the
//! handler borrows the request's payload while it runs).

use crate::log;
use fuser::{Dispatcher, Filesystem, InitFlags, KernelConfig, RawReplySink};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::Layout;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// `IORING_OP_URING_CMD` command: register an entry.
const CMD_REGISTER: u32 = 1;
/// `IORING_OP_URING_CMD` command: send an entry's reply and fetch its next request.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Size of `struct fuse_uring_req_header`, the header buffer.
const HEADER_SIZE: usize = 288;
/// Where the operation's fixed arguments start in the header buffer.
const OP_IN: usize = 128;
/// Their largest size (`FUSE_URING_OP_IN_OUT_SZ`).
const OP_IN_MAX: usize = 128;
/// `ring_ent_in_out.commit_id` and `.payload_sz` in the header buffer.
const COMMIT_ID: usize = 264;
const PAYLOAD_SZ: usize = 272;
/// `fuse_in_header` and `fuse_out_header` sizes.
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// An entry's memory: the header buffer at 0, then the payload from this offset (the
/// bytes between are where a request's header and fixed arguments are copied to, just
/// before its payload).
const PAYLOAD_AT: usize = 4096;
/// The smallest payload the kernel accepts (`FUSE_MIN_READ_BUFFER`).
const MIN_PAYLOAD: usize = 8192;

/// Why a mount cannot have it, when the kernel does not offer it.
const NOT_OFFERED: &str =
    "the kernel does not offer it (Linux 6.14+ with /sys/module/fuse/parameters/enable_uring set to 1)";

/// The smallest payload buffer: room for a 64 KiB xattr value and its name, whatever
/// `max_write` is (the kernel puts a request's variable arguments in the payload).
const XATTR_ROOM: usize = 128 << 10;

/// How the mount chose its transport, for the log line and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// FUSE-over-io_uring with this many queues of this many entries.
    Uring { queues: usize, depth: usize },
    /// /dev/fuse, and why not io_uring.
    DevFuse(String),
}

/// A file system served over FUSE-over-io_uring when offered: it keeps the offer and
/// negotiates it in its `init` ([`negotiate`]).
pub trait UringCapable: Filesystem {
    /// The queues are ready: ask for FUSE_OVER_IO_URING at FUSE_INIT.
    fn offer_uring(&mut self, offer: UringOffer);
}

/// What a file system may negotiate at FUSE_INIT for the io_uring transport.
#[derive(Debug, Clone)]
pub struct UringOffer {
    /// The mount's `max_write`.
    pub max_write: u32,
    /// The queues' payload buffer: at least `max_write` and the reads the mount allows,
    /// a whole number of pages.
    pub payload: u32,
    /// Fail the mount when the kernel does not offer it.
    pub required: bool,
    /// Set at FUSE_INIT: whether the flag went into the reply, or why not.
    pub decided: Arc<Mutex<Option<Result<(), String>>>>,
}

/// At FUSE_INIT: ask for FUSE_OVER_IO_URING if the kernel offers it and every request
/// fits the queues' entries; record the decision in the offer. An error (refusing the
/// mount) when the offer was required and cannot be met.
pub fn negotiate(offer: &UringOffer, config: &mut KernelConfig) -> std::io::Result<()> {
    let decided = if config
        .capabilities()
        .contains(InitFlags::FUSE_OVER_IO_URING)
    {
        // Every request must fit an entry's payload: writes (max_write) and reads
        // (max_pages, which fuser derives from max_write and max_readahead).
        // The kernel wants max(8192, max_write, max_pages pages) of payload, with
        // max_pages = max(max_write, max_readahead) in pages: both at most `payload`,
        // a whole number of pages, fit.
        let fits = offer.max_write <= offer.payload
            && config.set_max_write(offer.max_write).is_ok()
            && config.set_max_readahead(offer.payload).map_or_else(
                |most| most <= offer.payload && config.set_max_readahead(most).is_ok(),
                |_| true,
            );
        if fits
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok()
        {
            Ok(())
        } else {
            Err(format!(
                "a request could exceed the queues' {} bytes",
                offer.payload
            ))
        }
    } else {
        Err(NOT_OFFERED.to_string())
    };
    let refused = offer.required.then(|| decided.clone().err()).flatten();
    *offer.decided.lock().unwrap_or_else(|e| e.into_inner()) = Some(decided);
    match refused {
        Some(why) => Err(std::io::Error::other(format!("io_uring: {why}"))),
        None => Ok(()),
    }
}

/// The queue threads, ready and waiting for the go.
pub struct Prepared<FS: Filesystem> {
    go: Vec<Sender<Go<FS>>>,
    threads: Vec<JoinHandle<()>>,
    /// Largest request payload (the mount's `max_write`).
    pub payload: usize,
    /// Entries per queue.
    pub depth: usize,
}

/// What a queue thread gets when the handshake is done: serve with this, or stop.
enum Go<FS: Filesystem> {
    Serve {
        fd: Arc<OwnedFd>,
        dispatcher: Arc<Dispatcher<FS>>,
    },
    Stop,
}

/// The CPUs the kernel keeps a queue for: 0 to the highest possible CPU
/// (`/sys/devices/system/cpu/possible`, e.g. `0-3` or `0,2-5`).
pub fn possible_cpus() -> Result<usize, String> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .map_err(|e| format!("/sys/devices/system/cpu/possible: {e}"))?;
    let last = text
        .trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next())
        .filter_map(|n| n.trim().parse::<usize>().ok())
        .max()
        .ok_or_else(|| format!("/sys/devices/system/cpu/possible: {text:?}"))?;
    Ok(last + 1)
}

/// Whether this kernel offers FUSE-over-io_uring to new mounts (the fuse module's
/// `enable_uring` parameter).
pub fn offered() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| matches!(v.trim(), "Y" | "1"))
}

/// Start one thread per possible CPU, pinned to it, with its ring and `depth` entries of
/// at least `payload` bytes (rounded up to whole pages, and room for any xattr), each
/// polling for `spin` after the last request any of them served ([`Activity`]); returns
/// once every one is ready and its ring passed `probe` (or at the first failure).
pub fn prepare<FS: Filesystem>(
    depth: usize,
    payload: usize,
    spin: std::time::Duration,
) -> Result<Prepared<FS>, String> {
    let queues = possible_cpus()?;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let payload = payload
        .max(MIN_PAYLOAD)
        .max(XATTR_ROOM)
        .next_multiple_of(page);
    let mut go = Vec::with_capacity(queues);
    let mut threads = Vec::with_capacity(queues);
    let (ready_tx, ready_rx) = channel::<Result<(), String>>();
    let activity = Arc::new(Activity::new(spin));
    for qid in 0..queues {
        let (tx, rx) = channel();
        let ready = ready_tx.clone();
        let activity = activity.clone();
        let t = std::thread::Builder::new()
            .name(format!("lanefs-uring-{qid}"))
            .spawn(move || queue_thread(qid, depth, payload, &activity, &ready, &rx))
            .map_err(|e| format!("starting a queue thread: {e}"))?;
        go.push(tx);
        threads.push(t);
    }
    drop(ready_tx);
    let prepared = Prepared {
        go,
        threads,
        payload,
        depth,
    };
    for _ in 0..queues {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                prepared.stop();
                return Err(e);
            }
            Err(_) => {
                prepared.stop();
                return Err("a queue thread ended while starting".into());
            }
        }
    }
    Ok(prepared)
}

impl<FS: Filesystem> Prepared<FS> {
    /// The number of queues (possible CPUs).
    pub fn queues(&self) -> usize {
        self.go.len()
    }

    /// Let every queue register its entries and serve, through the session's /dev/fuse
    /// descriptor `fd` and `dispatcher`. Returns the threads, to join after unmount.
    pub fn start(self, fd: OwnedFd, dispatcher: Dispatcher<FS>) -> Vec<JoinHandle<()>> {
        let (fd, dispatcher) = (Arc::new(fd), Arc::new(dispatcher));
        for tx in &self.go {
            let _ = tx.send(Go::Serve {
                fd: fd.clone(),
                dispatcher: dispatcher.clone(),
            });
        }
        self.threads
    }

    /// Stop the threads without serving (io_uring was not negotiated).
    pub fn stop(self) {
        for tx in &self.go {
            let _ = tx.send(Go::Stop);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Pin the calling thread to `cpu` (a queue's requests come from tasks on that CPU).
fn pin(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set` (it checks `cpu` against the set's size).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` lives across the call, which only reads size_of::<cpu_set_t>() of it.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One queue: build, probe, report ready, wait for the go, serve.
fn queue_thread<FS: Filesystem>(
    qid: usize,
    depth: usize,
    payload: usize,
    activity: &Activity,
    ready: &Sender<Result<(), String>>,
    go: &Receiver<Go<FS>>,
) {
    // A CPU this thread may not run on (offline, or outside the daemon's CPU set) still
    // has a queue; it is served from elsewhere, and does not poll: its thread would share
    // a CPU with the others and with the program.
    let polls = pin(qid).is_ok();
    // The entries are declared before the ring, so the ring (and any command of it the
    // kernel still holds) goes first when the thread ends.
    let mut entries = match (0..depth)
        .map(|_| Entry::new(payload))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(e) => e,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // Made disabled, restricted to the one operation the queue uses (URING_CMD, with no
    // SQE flags) and then enabled: a daemon that a hostile image took over cannot use
    // its rings for what its seccomp filter refuses (IORING_OP_SOCKET, CONNECT, OPENAT).
    let built = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_cqsize(2 * depth as u32)
        .setup_submit_all()
        .setup_r_disabled()
        .build(depth as u32)
        .and_then(|r| {
            let mut only = [io_uring::register::Restriction::sqe_op(
                opcode::UringCmd80::CODE,
            )];
            r.submitter().register_restrictions(&mut only)?;
            r.submitter().register_enable_rings()?;
            Ok(r)
        })
        .map_err(|e| format!("io_uring_setup: {e}"));
    let mut ring = match built.and_then(|mut r| probe(&mut r, &entries[0]).map(|()| r)) {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let Ok(Go::Serve { fd, dispatcher }) = go.recv() else {
        return;
    };
    let activity = polls.then_some(activity);
    if let Err(e) = serve(
        &mut ring,
        &mut entries,
        qid as u16,
        &fd,
        &dispatcher,
        activity,
    ) {
        // The kernel may still hold entries of this queue: requests from tasks on this CPU
        // would wait for them until the mount is aborted, and the kernel would write into
        // their buffers. End the daemon instead, as errors=panic does; the connection is
        // then aborted and the journal replays at the next mount.
        log::line(&format!(
            "io_uring queue {qid}: {e}; ending the daemon (the journal replays at the next mount)"
        ));
        std::process::abort();
    }
}

/// Before FUSE_INIT: a REGISTER against a /dev/fuse descriptor no mount uses must reach
/// the fuse module and be refused there for having no connection. Anything else (a
/// security module refusing the command, 128-byte commands unsupported, the module's
/// `enable_uring` off: EOPNOTSUPP) means the queues could not register on the mount
/// either, where a failure that is not the module's own would leave requests waiting.
fn probe(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, e: &Entry) -> Result<(), String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    let fd = OwnedFd::from(dev);
    let sqe = command(&fd, CMD_REGISTER, 0, 0, usize::MAX, Some(&e.iov));
    push(ring, &sqe)?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(format!("io_uring_enter: {e}")),
        }
    }
    let res = ring.completion().next().map(|c| c.result());
    match res {
        // The fuse module's own refusals of a descriptor without a connection: ENOTCONN
        // up to 6.17, EPERM since (fuse_get_dev). (A security module's refusal is EACCES.)
        Some(r) if r == -libc::ENOTCONN || r == -libc::EPERM => Ok(()),
        Some(r) if r == -libc::EOPNOTSUPP => Err(NOT_OFFERED.to_string()),
        Some(r) => Err(format!(
            "a FUSE io_uring command was refused ({})",
            std::io::Error::from_raw_os_error(-r)
        )),
        None => Err("no completion for the probe".into()),
    }
}

/// An entry's memory: header buffer, then the payload at `PAYLOAD_AT`. While a command
/// naming it is in flight the kernel may write it, so it is only read or written between
/// the command's completion and the next submission.
struct Entry {
    mem: NonNull<u8>,
    layout: Layout,
    payload: usize,
    /// The iovec pair REGISTER names (read by the kernel at submission).
    iov: Box<[libc::iovec; 2]>,
    sink: Arc<Staged>,
    /// Whether the kernel still holds this entry (false once it answered ENOTCONN).
    live: bool,
    /// The last command sent for it, to send again on EAGAIN/EINTR.
    last: Option<squeue::Entry128>,
    /// Failed commands in a row (an entry registered again after one).
    failures: u32,
}

impl Entry {
    fn new(payload: usize) -> Result<Entry, String> {
        let layout = Layout::from_size_align(PAYLOAD_AT + payload, 4096)
            .map_err(|e| format!("entry layout: {e}"))?;
        // SAFETY: the layout has a non-zero size.
        let mem = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| format!("out of memory for a {payload}-byte io_uring entry"))?;
        let base = mem.as_ptr();
        let iov = Box::new([
            libc::iovec {
                iov_base: base.cast(),
                iov_len: HEADER_SIZE,
            },
            libc::iovec {
                // SAFETY: PAYLOAD_AT is inside the allocation.
                iov_base: unsafe { base.add(PAYLOAD_AT) }.cast(),
                iov_len: payload,
            },
        ]);
        Ok(Entry {
            mem,
            layout,
            payload,
            iov,
            sink: Arc::new(Staged::default()),
            live: true,
            last: None,
            failures: 0,
        })
    }

    /// The whole memory, for the owning thread between a completion and a submission.
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `mem` is a live allocation of `layout.size()` bytes owned by this Entry,
        // zero-initialized at allocation; `&mut self` makes this the only view of it, and
        // the caller holds it only while no command naming the entry is in flight.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.layout.size()) }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.mem.as_ptr(), self.layout) };
    }
}

/// A reply as fuser encodes it (`fuse_out_header` and body), staged until the handler has
/// returned; the buffer is the entry's for its life, so a reply allocates nothing once it
/// has grown to the largest.
#[derive(Debug, Default)]
struct Staged {
    reply: Mutex<Reply>,
}

/// The staged reply: whether one came since the request was dispatched, and its bytes.
#[derive(Debug, Default)]
struct Reply {
    sent: bool,
    bytes: Vec<u8>,
}

impl Staged {
    fn lock(&self) -> std::sync::MutexGuard<'_, Reply> {
        self.reply.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RawReplySink for Staged {
    fn send(&self, data: &[IoSlice<'_>]) -> std::io::Result<()> {
        let mut r = self.lock();
        r.bytes.clear();
        for s in data {
            r.bytes.extend_from_slice(s);
        }
        r.sent = true;
        Ok(())
    }
}

/// A 128-byte SQE for FUSE command `op` on entry `index` of queue `qid`.
fn command(
    fd: &OwnedFd,
    op: u32,
    qid: u16,
    commit_id: u64,
    index: usize,
    iov: Option<&[libc::iovec; 2]>,
) -> squeue::Entry128 {
    // struct fuse_uring_cmd_req: flags u64, commit_id u64, qid u16.
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let mut b = opcode::UringCmd80::new(types::Fd(fd.as_raw_fd()), op).cmd(cmd);
    if let Some(iov) = iov {
        b = b.addr(Some(iov.as_ptr() as u64));
    }
    let sqe = b.build().user_data(index as u64);
    if iov.is_none() {
        return sqe;
    }
    // The SQE's `len` (bytes 24..28) counts the iovecs; the crate has no setter for it.
    // SAFETY: Entry128 is repr(C), 128 bytes of plain integers (an io_uring_sqe and 64
    // bytes of command data), so it and [u8; 128] have the same size and every bit
    // pattern is valid for both.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Register every entry, then serve completions until every entry is gone (unmount).
/// An error means the queue cannot go on while the kernel may still hold its entries.
fn serve<FS: Filesystem>(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    entries: &mut [Entry],
    qid: u16,
    fd: &OwnedFd,
    dispatcher: &Dispatcher<FS>,
    activity: Option<&Activity>,
) -> Result<(), String> {
    for (i, e) in entries.iter_mut().enumerate() {
        let sqe = command(fd, CMD_REGISTER, qid, 0, i, Some(&e.iov));
        e.last = Some(sqe.clone());
        push(ring, &sqe)?;
    }
    // Transient failures of io_uring_enter (memory, a full completion queue) are retried.
    let mut transient = 0u32;
    while entries.iter().any(|e| e.live) {
        if let Some(a) = activity {
            a.poll(|| !ring.completion().is_empty());
        }
        let waited = if ring.completion().is_empty() {
            ring.submit_and_wait(1)
        } else {
            Ok(0)
        };
        match waited {
            Ok(_) => transient = 0,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOMEM)
                ) && transient < 1000 =>
            {
                transient += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("io_uring_enter: {e}")),
        }
        let done: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (i, res) in done {
            let Some(e) = entries.get_mut(i) else {
                return Err(format!("a completion for entry {i}, which is not ours"));
            };
            let next = match res {
                0 => {
                    e.failures = 0;
                    let commit_id = handle(e, dispatcher);
                    // The window runs from the reply, so that a long request (an fsync)
                    // still finds the queues polling when its reply wakes the program.
                    if let Some(a) = activity {
                        a.served();
                    }
                    Some(command(fd, CMD_COMMIT_AND_FETCH, qid, commit_id, i, None))
                }
                r if r == -libc::EAGAIN || r == -libc::EINTR => e.last.clone(),
                // Unmounted (or the ring is being torn down): this entry is done.
                r if r == -libc::ENOTCONN || r == -libc::ECANCELED || r == -libc::ECONNABORTED => {
                    e.live = false;
                    None
                }
                // Anything else: the kernel let go of the entry; register it again, a few
                // times, before giving the queue up.
                r => {
                    e.failures += 1;
                    if e.failures > 3 {
                        let err = std::io::Error::from_raw_os_error(-r);
                        return Err(format!("entry {i}: {err}"));
                    }
                    Some(command(fd, CMD_REGISTER, qid, 0, i, Some(&e.iov)))
                }
            };
            // Each reply goes out at once, not after the rest of the batch is served.
            if let Some(sqe) = next {
                e.last = Some(sqe.clone());
                push(ring, &sqe)?;
                ring.submit().map_err(|e| format!("io_uring_enter: {e}"))?;
            }
        }
    }
    Ok(())
}

/// When the queues last served a request, shared by all of them: each queue thread polls
/// its ring for `spin` after the last request any queue served before it sleeps in
/// `io_uring_enter`.
///
/// Why every queue and not only the one that served: a program waiting for a reply is
/// woken by the queue thread on its own CPU, and the scheduler puts a woken task on an
/// idle CPU when there is one (`select_idle_sibling`). With the other CPUs asleep, each
/// reply then wakes a halted CPU (an inter-processor interrupt, and in a VM an exit to
/// the host) and moves the program there, and its next request goes to that CPU's queue,
/// whose thread must wake too. A queue thread that polls keeps its CPU busy, so the
/// program is woken where it was, as if it were pinned there (the measurements are in
/// docs/fuse-frontend.md). The poll yields the CPU at every turn (`sched_yield`), so any
/// other runnable task on that CPU runs first, and it ends `spin` after the last request.
pub struct Activity {
    /// Microseconds from `epoch` to the last request served (by any queue).
    last: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
    spin_us: u64,
}

impl Activity {
    fn new(spin: std::time::Duration) -> Activity {
        Activity {
            last: std::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            spin_us: u64::try_from(spin.as_micros()).unwrap_or(u64::MAX),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A queue took a request.
    fn served(&self) {
        if self.spin_us > 0 {
            self.last
                .store(self.now_us(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Poll (yielding the CPU each turn) until `ready` or until `spin` has passed since
    /// the last request any queue served. Each `sched_yield` is a system call, on whose
    /// return the kernel runs the ring's pending task work, which posts the completion
    /// of a request that arrived meanwhile.
    fn poll(&self, mut ready: impl FnMut() -> bool) {
        if self.spin_us == 0 {
            return;
        }
        while !ready() {
            let last = self.last.load(std::sync::atomic::Ordering::Relaxed);
            if self.now_us().saturating_sub(last) >= self.spin_us {
                return;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Queue one SQE (there is room: at most one command per entry is in flight).
fn push(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    sqe: &squeue::Entry128,
) -> Result<(), String> {
    // SAFETY: the SQE names an entry's iovecs (REGISTER) or nothing (COMMIT_AND_FETCH);
    // the iovecs and the buffers they point to live in `entries`, which outlive the ring's
    // use of them: they are dropped only after `serve` returns, when every entry has been
    // completed with ENOTCONN (or the thread ends with the process).
    unsafe { ring.submission().push(sqe) }.map_err(|_| "the submission queue is full".to_string())
}

/// Serve the request entry `e` holds and put its reply in its buffers; returns the
/// commit id to send it with.
fn handle<FS: Filesystem>(e: &mut Entry, dispatcher: &Dispatcher<FS>) -> u64 {
    let payload_cap = e.payload;
    let sink = e.sink.clone();
    let mem = e.bytes();
    let word = |m: &[u8], at: usize| u64::from_ne_bytes(m[at..at + 8].try_into().expect("8 bytes"));
    let commit_id = word(mem, COMMIT_ID);
    let payload_sz =
        u32::from_ne_bytes(mem[PAYLOAD_SZ..PAYLOAD_SZ + 4].try_into().expect("4 bytes")) as usize;
    let len = u32::from_ne_bytes(mem[0..4].try_into().expect("4 bytes")) as usize;
    let unique = word(mem, 8);
    let op_len = len.checked_sub(IN_HEADER + payload_sz);
    let error = match op_len {
        Some(op) if op <= OP_IN_MAX && payload_sz <= payload_cap => {
            // The request as /dev/fuse gives it, ending where the payload ends.
            let start = PAYLOAD_AT - IN_HEADER - op;
            let (head, rest) = mem.split_at_mut(start);
            rest[..IN_HEADER].copy_from_slice(&head[..IN_HEADER]);
            rest[IN_HEADER..IN_HEADER + op].copy_from_slice(&head[OP_IN..OP_IN + op]);
            let request = &rest[..IN_HEADER + op + payload_sz];
            sink.lock().sent = false;
            // A handler that panics fails its request, not the queue (the reply it
            // dropped unwinding is already an EIO).
            let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if start.is_multiple_of(8) {
                    dispatcher.dispatch(request, sink.clone())
                } else {
                    // fuser reads arguments in place and needs them 8-byte aligned.
                    let mut aligned = vec![0u64; request.len().div_ceil(8)];
                    let view = bytes_of(&mut aligned);
                    view[..request.len()].copy_from_slice(request);
                    dispatcher.dispatch(&view[..request.len()], sink.clone())
                }
            }));
            match parsed {
                Ok(true) => None,
                Ok(false) => Some(libc::EIO),
                Err(_) => {
                    log::line(&format!("request {unique}: its handler panicked"));
                    None
                }
            }
        }
        _ => Some(libc::EIO),
    };
    let staged = sink.lock();
    let r = &staged.bytes;
    let body_len = r.len().saturating_sub(OUT_HEADER);
    let error = match (error, staged.sent) {
        (None, true) if r.len() >= OUT_HEADER && body_len <= payload_cap => {
            i32::from_ne_bytes(r[4..8].try_into().expect("4 bytes"))
        }
        (None, true) => -libc::EIO,
        (None, false) => {
            log::line(&format!(
                "request {unique}: no reply by the time its handler returned"
            ));
            -libc::EIO
        }
        (Some(e), _) => -e,
    };
    // fuse_out_header { len (unused here), error, unique }, then the body in the payload.
    let body_len = if error == 0 { body_len } else { 0 };
    mem[0..4].copy_from_slice(&((OUT_HEADER + body_len) as u32).to_ne_bytes());
    mem[4..8].copy_from_slice(&error.to_ne_bytes());
    mem[8..16].copy_from_slice(&unique.to_ne_bytes());
    if body_len > 0 {
        mem[PAYLOAD_AT..PAYLOAD_AT + body_len].copy_from_slice(&r[OUT_HEADER..]);
    }
    mem[PAYLOAD_SZ..PAYLOAD_SZ + 4].copy_from_slice(&(body_len as u32).to_ne_bytes());
    commit_id
}

/// `words` as bytes.
fn bytes_of(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: u64 has no padding and every byte pattern is a valid u8; the view covers
    // exactly the words' memory and borrows it mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polling stops at once when a request is there or polling is off, and otherwise
    /// once the window since the last request has passed (it cannot spin on forever).
    #[test]
    fn polling_ends() {
        let off = Activity::new(std::time::Duration::ZERO);
        off.served();
        off.poll(|| false);
        let on = Activity::new(std::time::Duration::from_millis(2));
        on.poll(|| true);
        on.served();
        let mut turns = 0u64;
        on.poll(|| {
            turns += 1;
            false
        });
        assert!(turns >= 1);
        // Nothing served for longer than the window: no polling at all.
        std::thread::sleep(std::time::Duration::from_millis(3));
        let mut late = 0u64;
        on.poll(|| {
            late += 1;
            false
        });
        assert_eq!(late, 1, "one look, then sleep");
    }

    #[test]
    fn possible_cpus_reads_sysfs() {
        let n = possible_cpus().unwrap();
        assert!(n >= 1);
    }

    #[test]
    fn register_sqe_carries_the_iovec_pair() {
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let e = Entry::new(MIN_PAYLOAD).unwrap();
        let sqe = command(&fd, CMD_REGISTER, 3, 0, 7, Some(&e.iov));
        // SAFETY: as in `command`.
        let raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(raw[0], 46, "IORING_OP_URING_CMD");
        assert_eq!(
            u32::from_ne_bytes(raw[8..12].try_into().unwrap()),
            CMD_REGISTER
        );
        assert_eq!(
            u64::from_ne_bytes(raw[16..24].try_into().unwrap()),
            e.iov.as_ptr() as u64
        );
        assert_eq!(u32::from_ne_bytes(raw[24..28].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(raw[32..40].try_into().unwrap()), 7);
        assert_eq!(
            u16::from_ne_bytes(raw[48 + 16..48 + 18].try_into().unwrap()),
            3
        );
    }
}
