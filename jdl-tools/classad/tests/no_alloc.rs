//! A compiled request matches and ranks offers without allocating: counted
//! with a global allocator that tallies allocations on this thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cder_classad::{parse_classad, parse_classads, CompiledRequest};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from System.alloc with layout l.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn matching_compiled_requests_does_not_allocate() {
    let offers = parse_classads(
        r#"[ GPGPUVendor = "Nvidia"; GPGPUMainMemorySize = 1024; GPGPUCores = 192; Tags = {"CUDA", "NVIDIA-KEPLER"}; Queue = "ce/cream-pbs-gpgpu" ]
           [ GPGPUVendor = "AMD"; GPGPUMainMemorySize = 4096; GPGPUCores = 64; Tags = {"OpenCL"}; Queue = "ce/cream-pbs-long" ]
           [ GPGPUVendor = "NVIDIA"; GPGPUMainMemorySize = 256; Tags = {}; Queue = "x-gpgpu" ]"#,
    )
    .unwrap();
    for req in [
        r#"[ Requirements = GPGPUVendor == "Nvidia" && (GPGPUMainMemorySize >= 512); Rank = GPGPUMainMemorySize * GPGPUCores / 1024.0 ]"#,
        r#"[ Requirements = other.GPGPUVendor =?= "Nvidia" || member("NVIDIA-KEPLER", other.Tags); Rank = -other.GPGPUMainMemorySize ]"#,
        r#"[ Requirements = regexp(".*gpgpu$", other.Queue) && !isUndefined(other.GPGPUCores); Rank = ifThenElse(other.GPGPUCores > 100, 2, 1) ]"#,
    ] {
        let compiled = CompiledRequest::new(&parse_classad(req).unwrap());
        // Warm up (thread-locals, lazily initialised regex caches).
        let mut n = 0usize;
        for o in &offers {
            n += usize::from(compiled.match_rank(o).is_some());
        }
        assert!(n > 0, "{req} matches none of the offers");
        let before = allocations();
        for _ in 0..1000 {
            for o in &offers {
                n += usize::from(compiled.match_rank(o).is_some());
            }
        }
        assert_eq!(allocations() - before, 0, "{req}");
        assert!(n > 1000);
    }
}
