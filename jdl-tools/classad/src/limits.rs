//! How deep parsing and evaluation may go: both recurse, and both must stop
//! before the thread's stack does.

/// Most stack one evaluation (or parse) may use. Frames are far larger in
/// debug builds than in release ones, so depth alone cannot bound the stack;
/// this keeps well inside a 2 MiB thread stack either way.
pub const MAX_STACK_BYTES: usize = 640 * 1024;

/// An address on the current stack (stacks grow down on every supported target).
#[inline(always)]
pub fn stack_addr() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}
