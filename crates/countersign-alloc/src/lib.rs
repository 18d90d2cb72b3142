//! The gateway binary's global allocator: mimalloc, asked the way mimalloc is fastest.
//!
//! Rust hands every allocation an alignment. The `mimalloc` crate passes each one to
//! `mi_malloc_aligned`, and mimalloc v3 serves an aligned request from its size class's free
//! list only while that list has a block; when it is empty, it over-allocates `size +
//! align - 1` from the next size class instead of refilling it, so the list stays empty and
//! every later request of that size takes the slow path too. On the read path that was about
//! nine allocations per request, at ~350 instructions each instead of ~30, in blocks one class
//! too large (`bash bench/instructions.sh`; figures in BENCHMARKS.md).
//!
//! Every mimalloc block is at least pointer-aligned: its size classes are whole words. So an
//! allocation whose alignment is at most a word goes to plain `mi_malloc`, which refills the
//! list, and only larger alignments (tokio's cache-padded task cells) to `mi_malloc_aligned`.
//!
//! This crate owns nothing else and must import nothing of the gateway's.

#![deny(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// Every block mimalloc hands out is aligned to at least this many bytes.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator; see the [crate docs](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct Mimalloc;

impl Mimalloc {
    /// Whether plain `mi_malloc` meets `layout`'s alignment.
    fn word_aligned(layout: &Layout) -> bool {
        layout.align() <= WORD
    }
}

// SAFETY: each method forwards to the mimalloc function with the same contract as the
// `GlobalAlloc` method (a null pointer on failure, blocks of at least the size asked, freed by
// `mi_free` whatever call allocated them). The plain calls are used only for alignments of at
// most a word, which every mimalloc block has.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `mi_malloc*` accept any size and a power-of-two alignment, which `Layout`
        // guarantees.
        unsafe {
            if Self::word_aligned(&layout) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if Self::word_aligned(&layout) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned, and every one of them came
        // from mimalloc.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a live mimalloc block (the caller's contract); a reallocation keeps
        // the alignment it was allocated with, chosen the same way as in `alloc`.
        unsafe {
            if Self::word_aligned(&layout) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason for this crate: word-aligned blocks come from their own size class every
    /// time. Through `mi_malloc_aligned`, a class whose free list is empty is served by
    /// over-allocating from the next class (224 bytes at alignment 8 got 256-byte blocks), and
    /// the list is never refilled.
    #[test]
    #[allow(unsafe_code)]
    fn word_aligned_blocks_come_from_their_own_size_class() {
        let allocator = Mimalloc;
        for (size, align) in [(224, 8), (384, 8), (40, 8), (8192, 1), (1000, 4)] {
            let layout = Layout::from_size_align(size, align).expect("valid layout");
            // SAFETY: `mi_good_size` only computes; blocks are freed once, after the checks.
            let class = unsafe { mi::mi_good_size(size) };
            // Several pages' worth, so the size class's free list runs empty on the way.
            let blocks: Vec<*mut u8> = (0..2_000)
                // SAFETY: a non-zero size.
                .map(|_| unsafe { allocator.alloc(layout) })
                .collect();
            let misplaced = blocks
                .iter()
                // SAFETY: each block is live and came from mimalloc.
                .filter(|&&block| unsafe { mi::mi_usable_size(block.cast()) } != class)
                .count();
            for block in blocks {
                // SAFETY: allocated above with `layout`, freed once.
                unsafe { allocator.dealloc(block, layout) };
            }
            assert_eq!(
                misplaced, 0,
                "{misplaced} of 2,000 blocks of {size} bytes at alignment {align} were not \
                 {class}-byte blocks"
            );
        }
    }

    /// Allocates through the allocator directly, writes every byte, checks the alignment and
    /// frees, for the sizes and alignments the gateway uses and the edges between them.
    #[test]
    #[allow(unsafe_code)]
    fn every_block_meets_its_layout() {
        let allocator = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1, 3, 7, 8, 12, 24, 40, 160, 224, 344, 1000, 8192, 70_000] {
                let layout = Layout::from_size_align(size, align).expect("valid layout");
                // SAFETY: a non-zero size; the block is written within its size and freed once.
                unsafe {
                    let block = allocator.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size} align {align}");
                    block.write_bytes(0xA5, size);
                    let grown = allocator.realloc(block, layout, size * 2);
                    assert!(!grown.is_null());
                    assert_eq!(grown as usize % align, 0, "grown {size} align {align}");
                    assert_eq!(*grown.add(size - 1), 0xA5, "realloc keeps the contents");
                    allocator.dealloc(
                        grown,
                        Layout::from_size_align(size * 2, align).expect("valid"),
                    );
                    let zeroed = allocator.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0);
                    assert!(
                        std::slice::from_raw_parts(zeroed, size)
                            .iter()
                            .all(|&b| b == 0)
                    );
                    allocator.dealloc(zeroed, layout);
                }
            }
        }
    }
}
