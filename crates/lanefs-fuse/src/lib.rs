//! lanefs served through FUSE: the frontend behind `lanefs mount`.
//!
//! [`serve()`] mounts an image with the engine, hands the kernel a /dev/fuse connection
//! (mount(2) as root, `fusermount3` otherwise) and serves requests from
//! [`MountConfig::threads`] threads, each reading its own cloned /dev/fuse fd, until the
//! mount goes away; then the engine writes everything back. [`LaneFuse`] is the request
//! handler: it holds no lock of its own and calls straight into `lanefs::Fs`.

pub mod frontend;
pub mod log;
pub mod memfs;
pub mod options;
pub mod serve;
pub mod uring;

pub use frontend::LaneFuse;
pub use options::{ErrorPolicy, MountConfig, UringMode};
pub use serve::{mount_source, preflight, serve, serve_memfs, unmount_path, SUBTYPE};
