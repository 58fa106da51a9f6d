//! The few engine calls outside `Fs`: formatting (with a realtime device too) and lock
//! statistics, kept in one place.

use lanefs::BlockDevice;

/// Format `dev` with default mkfs options and `block_size`-byte blocks.
pub(crate) fn format_image(dev: &dyn BlockDevice, block_size: u32) -> Result<(), String> {
    let opts = lanefs::mkfs::MkfsOptions {
        block_size: Some(block_size),
        ..lanefs::mkfs::MkfsOptions::default()
    };
    lanefs::mkfs::format(dev, &opts).map_err(|e| e.to_string())
}

/// Format `dev` with default mkfs options, `block_size`-byte blocks and a journal of
/// `journal_blocks` blocks.
pub(crate) fn format_image_with_journal(
    dev: &dyn BlockDevice,
    block_size: u32,
    journal_blocks: u32,
) -> Result<(), String> {
    let opts = lanefs::mkfs::MkfsOptions {
        block_size: Some(block_size),
        journal_blocks: Some(journal_blocks),
        ..lanefs::mkfs::MkfsOptions::default()
    };
    lanefs::mkfs::format(dev, &opts).map_err(|e| e.to_string())
}

/// Give the unmounted image at `image` the realtime data device at `rtdev` (`rextsize`
/// blocks per rt extent, `group_bmblocks` bitmap blocks per rt group; 0: one group).
pub(crate) fn format_rt(
    image: &std::path::Path,
    rtdev: &std::path::Path,
    rextsize: u32,
    group_bmblocks: u32,
) -> Result<(), String> {
    lanefs::format_rt(image, rtdev, rextsize, group_bmblocks)
        .map(|_| ())
        .map_err(|e| {
            format!(
                "realtime device {} for {}: {e}",
                rtdev.display(),
                image.display()
            )
        })
}

/// Turn the engine's lock statistics on or off.
pub(crate) fn lockstat_enable(on: bool) {
    lanefs::internals::sync::set_lockstat(on);
}

/// Zero the engine's lock statistics.
pub(crate) fn lockstat_reset() {
    lanefs::internals::sync::lockstat_reset();
}

/// The engine's lock statistics since the last reset, one entry per class.
pub(crate) fn lockstat_snapshot() -> Vec<lanefs::internals::sync::LockStat> {
    lanefs::internals::sync::lockstat_snapshot()
}

/// `stats` as the engine's lock statistics table (every class, most wait first).
pub(crate) fn lockstat_table(stats: &[lanefs::internals::sync::LockStat]) -> String {
    lanefs::internals::sync::lockstat_table(stats)
}
