//! lanefs served through FUSE: the frontend behind `lanefs mount`.
//!
//! [`serve()`] mounts an image with the engine, hands the kernel a /dev/fuse connection
//! (mount(2) as root, `fusermount3` otherwise) and serves requests until the mount goes
//! away; then the engine writes everything back. Requests come by FUSE-over-io_uring
//! ([`uring`]) where the kernel offers it (Linux 6.14+, the fuse module's `enable_uring`
//! on; [`MountConfig::io_uring`]): one queue per CPU, served by a thread pinned to that
//! CPU. Otherwise they come from [`MountConfig::threads`] threads, each reading its own
//! cloned /dev/fuse fd. [`LaneFuse`] is the request handler: it holds no lock of its own
//! and calls straight into `lanefs::Fs`. [`serve_memfs`] serves [`memfs`], an in-memory
//! file system, through the same session and transports: the ceiling `lanefs bench
//! --compare` measures the mount against.
//!
//! The design, permissions, and the measured comparison with fuse2fs, the ceiling and the
//! kernel's ext4 are in the repository's `docs/fuse-frontend.md`.

pub mod confine;
pub mod flagproxy;
pub mod frontend;
pub mod log;
pub mod memfs;
pub mod mountinfo;
pub mod options;
pub mod serve;
pub mod stats;
pub mod uring;

pub use frontend::LaneFuse;
pub use options::{ErrorPolicy, MountConfig, UringMode};
pub use serve::{mount_source, preflight, serve, serve_memfs, unmount_path, SUBTYPE};
