//! The one unsafe operation of the index: mapping its file.

use std::fs::File;

/// Maps `file` read-only.
pub(crate) fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: snapshot files are never written in place: the refresher writes a
    // temp file and renames it over the old one, so the inode mapped here keeps
    // its bytes for as long as the map lives. Every read of the map is
    // bounds-checked (`snapshot::Bytes`), so even a file truncated by someone
    // else cannot be read past its end through a slice index.
    unsafe { memmap2::Mmap::map(file) }
}
