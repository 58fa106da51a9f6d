//! The few engine calls outside `Fs`: formatting and lock statistics, kept in one place.

use lanefs::BlockDevice;

/// Format `dev` with default mkfs options and `block_size`-byte blocks.
pub(crate) fn format_image(dev: &dyn BlockDevice, block_size: u32) -> Result<(), String> {
    let opts = lanefs::mkfs::MkfsOptions {
        block_size: Some(block_size),
        ..lanefs::mkfs::MkfsOptions::default()
    };
    lanefs::mkfs::format(dev, &opts).map_err(|e| e.to_string())
}

/// Turn the engine's lock statistics on or off.
pub(crate) fn lockstat_enable(on: bool) {
    lanefs::sync::set_lockstat(on);
}

/// Zero the engine's lock statistics.
pub(crate) fn lockstat_reset() {
    lanefs::sync::lockstat_reset();
}

/// The engine's lock statistics since the last reset, one entry per class.
pub(crate) fn lockstat_snapshot() -> Vec<lanefs::sync::LockStat> {
    lanefs::sync::lockstat_snapshot()
}

/// `stats` as the engine's lock statistics table (every class, most wait first).
pub(crate) fn lockstat_table(stats: &[lanefs::sync::LockStat]) -> String {
    lanefs::sync::lockstat_table(stats)
}
