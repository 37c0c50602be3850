//! The one unsafe operation of the index: mapping its file.

use std::fs::File;

/// Maps `file` read-only.
pub(crate) fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: snapshot files are never written in place: the refresher writes a
    // temp file and renames it over the old one, so the inode mapped here keeps
    // its bytes for as long as the map lives. Reads are bounds-checked
    // (`snapshot::Bytes`); a file truncated in place by someone else would
    // fault (SIGBUS) rather than be misread, which the refresher never does.
    unsafe { memmap2::Mmap::map(file) }
}
