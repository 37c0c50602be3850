//! Work over 10^4–10^5 items (carriers, shares, offers) split in order
//! across a few threads: building and matching a grid's offers share it.

/// `work` over `items` split in order across a few threads when there are
/// many (10^4–10^5 carriers or shares), else on this one; the parts' results
/// in order. `work` is given each part with the index of its first item.
pub fn in_parts<'t, T: Sync, R: Send>(items: &'t [T], work: impl Fn(usize, &'t [T]) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
    if threads < 2 || items.len() < 4096 {
        return vec![work(0, items)];
    }
    let work = &work;
    let size = items.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> =
            items.chunks(size).enumerate().map(|(i, part)| s.spawn(move || work(i * size, part))).collect();
        parts.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}
