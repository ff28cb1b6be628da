//! Per-worker free lists of heap blocks: what one request needs (the future that serves it, its
//! buffers) is handed to the next request instead of freed and allocated again, so a busy
//! connection allocates nothing per request and an idle one holds none of it.
//!
//! Each worker is one thread, so the lists are thread-local and need no lock. A block is only
//! ever reused for the same `Layout` it was allocated with, and every block comes from (and goes
//! back to) the global allocator, so a `Vec<u8>` may be rebuilt on one.

use std::alloc::Layout;
use std::cell::RefCell;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

/// Blocks kept per layout per worker: enough for the requests a worker has in flight at once
/// under heavy load (beyond that, blocks are freed as usual), and at most a few MiB.
const MOST_KEPT: usize = 256;
/// Distinct layouts kept per worker: an exchange's future, the buffers' usual size, the smaller
/// blocks a waiting read moves into (`buffer`: 1, 2, 4, 8 KiB) and a spare.
const MOST_LAYOUTS: usize = 8;
/// Byte vectors up to this capacity are kept (the buffers' usual size); larger ones, grown for an
/// unusually large head, are freed.
const MOST_KEPT_BYTES: usize = 16 * 1024;

thread_local! {
    static FREE: RefCell<FreeLists> = const { RefCell::new(FreeLists { lists: Vec::new() }) };
}

struct FreeLists {
    lists: Vec<(Layout, Vec<NonNull<u8>>)>,
}

impl Drop for FreeLists {
    fn drop(&mut self) {
        for (layout, blocks) in self.lists.drain(..) {
            for block in blocks {
                // SAFETY: every kept block was allocated by the global allocator with `layout`.
                unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
            }
        }
    }
}

/// A block of `layout` (whose size is not zero): a kept one if there is one, else a new one.
fn take(layout: Layout) -> NonNull<u8> {
    debug_assert!(layout.size() > 0);
    let kept = FREE
        .try_with(|free| {
            let mut free = free.borrow_mut();
            let (_, blocks) = free.lists.iter_mut().find(|(l, _)| *l == layout)?;
            blocks.pop()
        })
        .ok()
        .flatten();
    kept.unwrap_or_else(|| {
        // SAFETY: the size is not zero.
        let block = unsafe { std::alloc::alloc(layout) };
        NonNull::new(block).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
    })
}

/// Keeps `block` (allocated by the global allocator with `layout`, and no longer used) for a
/// later `take`, or frees it when enough are kept.
///
/// # Safety
/// `block` must have been allocated by the global allocator with exactly `layout`, and nothing
/// may use it afterwards.
unsafe fn give_back(layout: Layout, block: NonNull<u8>) {
    let kept = FREE
        .try_with(|free| {
            let mut free = free.borrow_mut();
            let index = match free.lists.iter().position(|(l, _)| *l == layout) {
                Some(index) => index,
                None if free.lists.len() < MOST_LAYOUTS => {
                    free.lists.push((layout, Vec::with_capacity(MOST_KEPT)));
                    free.lists.len() - 1
                }
                None => return false,
            };
            let blocks = &mut free.lists[index].1;
            if blocks.len() >= MOST_KEPT {
                return false;
            }
            blocks.push(block);
            true
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: the caller guarantees the block and its layout.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
    }
}

/// An empty byte vector with exactly `capacity` (not zero) bytes of room, from the free list.
pub fn take_bytes(capacity: usize) -> Vec<u8> {
    let layout = Layout::array::<u8>(capacity).expect("a buffer size fits a Layout");
    let block = take(layout);
    // SAFETY: the block comes from the global allocator with the layout of `[u8; capacity]`,
    // and a length of 0 claims no initialised bytes.
    unsafe { Vec::from_raw_parts(block.as_ptr(), 0, capacity) }
}

/// Returns a byte vector's memory to the free list; a vector that never allocated, or grew past
/// `MOST_KEPT_BYTES`, is simply dropped.
pub fn give_back_bytes(bytes: Vec<u8>) {
    if bytes.capacity() == 0 || bytes.capacity() > MOST_KEPT_BYTES {
        return;
    }
    let mut bytes = ManuallyDrop::new(bytes);
    let layout = Layout::array::<u8>(bytes.capacity()).expect("an allocated vector's layout");
    let block = NonNull::new(bytes.as_mut_ptr()).expect("an allocated vector is not null");
    // SAFETY: a Vec<u8> with this capacity was allocated with exactly this layout by the global
    // allocator, and the ManuallyDrop wrapper means the Vec never touches it again.
    unsafe { give_back(layout, block) };
}

/// A future living in a recycled block: like `Box::pin(future)`, but when it is dropped its
/// block waits for the next future of the same type instead of being freed.
///
/// An `async fn`'s future is as large as the state held at its largest await point; boxing the
/// exchange this way keeps the connection task's own future (what an idle connection costs)
/// small. Figures in bench/results/optimisation.md.
pub struct Recycled<F: Future> {
    future: NonNull<F>,
}

impl<F: Future> Recycled<F> {
    /// The future `make` returns, in a recycled block. Taking a closure rather than the future
    /// lets the compiler build the future straight into the block instead of on the stack and
    /// then copying it (about 650 instructions a request for the exchange's 1.5 KiB).
    #[inline(always)]
    pub fn new(make: impl FnOnce() -> F) -> Recycled<F> {
        let layout = Layout::new::<F>();
        let slot = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            take(layout).cast::<F>()
        };
        // SAFETY: the block is valid for writes of one F, suitably aligned (its layout is F's).
        unsafe { slot.as_ptr().write(make()) };
        Recycled { future: slot }
    }
}

impl<F: Future> Future for Recycled<F> {
    type Output = F::Output;

    // Left to the compiler: forcing it inline into the session's loop saved 43 instructions a
    // request before request buffering, and cost 58 after it (the loop's own `select!` then went
    // out of line). Callgrind, bench/results/optimisation.md.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: the future is never moved out of its block: it is dropped in place there.
        let future = unsafe { Pin::new_unchecked(&mut *self.get_mut().future.as_ptr()) };
        future.poll(cx)
    }
}

impl<F: Future> Drop for Recycled<F> {
    fn drop(&mut self) {
        let layout = Layout::new::<F>();
        // SAFETY: the block holds a live F, written in `new` and dropped only here.
        unsafe { std::ptr::drop_in_place(self.future.as_ptr()) };
        if layout.size() > 0 {
            // SAFETY: the block came from `take(layout)` and the F in it is gone.
            unsafe { give_back(layout, self.future.cast::<u8>()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_returned_buffer_is_handed_out_again() {
        let first = take_bytes(4096);
        let address = first.as_ptr();
        give_back_bytes(first);
        let second = take_bytes(4096);
        assert_eq!(second.as_ptr(), address);
        assert_eq!(second.capacity(), 4096);
        assert!(second.is_empty());
        // A different size is never given a block of another layout.
        let other = take_bytes(8192);
        assert_ne!(other.as_ptr(), address);
        give_back_bytes(other);
        give_back_bytes(second);
    }

    #[test]
    fn at_most_so_many_blocks_are_kept() {
        let blocks: Vec<Vec<u8>> = (0..MOST_KEPT + 10).map(|_| take_bytes(1000)).collect();
        blocks.into_iter().for_each(give_back_bytes);
        FREE.with(|free| {
            let free = free.borrow();
            let (_, kept) = free.lists.iter().find(|(l, _)| l.size() == 1000).unwrap();
            assert_eq!(kept.len(), MOST_KEPT);
        });
    }

    #[test]
    fn a_recycled_future_runs_drops_its_state_and_reuses_its_block() {
        let state = Rc::new(());
        let make = |state: Rc<()>| async move {
            let held = state;
            std::future::ready(()).await;
            Rc::strong_count(&held)
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let first = Recycled::new(|| make(Rc::clone(&state)));
        let address = first.future.as_ptr() as usize;
        assert_eq!(runtime.block_on(first), 2);
        assert_eq!(
            Rc::strong_count(&state),
            1,
            "the future's state was dropped"
        );
        // Dropped before it ran: its state is dropped too, and the block comes back.
        let unpolled = Recycled::new(|| make(Rc::clone(&state)));
        assert_eq!(unpolled.future.as_ptr() as usize, address);
        drop(unpolled);
        assert_eq!(Rc::strong_count(&state), 1);
    }
}
