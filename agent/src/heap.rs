//! Giving the heap's free pages back to the kernel.
//!
//! glibc's allocator keeps the pages of freed chunks mapped: only free memory at the very top
//! of the heap goes back by itself (above `M_TRIM_THRESHOLD`, 128 KiB). The daemon frees a
//! whole snapshot after every judgement (the host readings, the pods' copies, the report), and
//! the holes it leaves stay resident until later allocations reuse them: measured on a
//! 250-pod node, the daemon's anonymous memory sat 2.7 MiB above what a trim leaves
//! (docs/performance.md, "The lighter agent, continued"). `malloc_trim(0)` returns every
//! whole free page inside the heap (`MADV_DONTNEED`; glibc 2.8 and later), not only the top;
//! the daemon calls [`release_free_pages`] after every cycle of its scan loop, when that
//! cycle's snapshot is dropped.
//!
//! The one module of the agent with `unsafe`: a call to a C function whose one argument, a
//! size, cannot be wrong. Elsewhere (musl, other systems) the call does nothing.

#![allow(unsafe_code)]

/// Returns the heap's free pages to the kernel: `true` when some memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_pages() -> bool {
    // SAFETY: malloc_trim takes a size, touches no memory of the caller's and takes the
    // allocator's own locks: callable from any thread at any time (glibc's malloc(3)).
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Nothing to do without glibc's allocator.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_pages() -> bool {
    false
}

#[cfg(test)]
mod tests {
    /// Freed pages in the middle of the heap, kept by the allocator, go back to the kernel:
    /// the process's anonymous memory (RssAnon) falls by most of what was freed.
    #[test]
    fn freed_pages_inside_the_heap_go_back_to_the_kernel() {
        fn rss_anon_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            status
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        }
        // 4,000 blocks of 4 KiB (below the mmap threshold: they come from the heap), each
        // written so its pages are resident; then all but every 8th freed, so the heap holds
        // 500 holes of 28 KiB between live blocks, and a block kept at the top so nothing
        // goes back from the top alone.
        let mut blocks: Vec<Option<Vec<u8>>> = (0..4000).map(|i| Some(vec![(i % 251) as u8 + 1; 4096])).collect();
        let _top = vec![1u8; 4096];
        for (i, b) in blocks.iter_mut().enumerate() {
            if i % 8 != 0 {
                *b = None;
            }
        }
        let before = rss_anon_kib();
        assert!(super::release_free_pages(), "malloc_trim released nothing");
        let after = rss_anon_kib();
        // 3,500 blocks freed (14,000 KiB): each hole holds at least 6 whole pages, 12,000 KiB.
        assert!(
            before.saturating_sub(after) >= 10_000,
            "RssAnon {before} kB before the trim, {after} kB after"
        );
        assert_eq!(blocks.iter().flatten().count(), 500);
    }
}
