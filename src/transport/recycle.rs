//! Per-worker free lists of heap blocks: what one request needs (the future that serves it, its
//! buffers) is handed to the next request instead of freed and allocated again, so a busy
//! connection allocates nothing per request and an idle one holds none of it.
//!
//! Each worker is one thread, so the lists are thread-local and need no lock. A block is only
//! ever reused for the same `Layout` it was allocated with, and every block comes from (and goes
//! back to) the global allocator, so a `Vec<u8>` may be rebuilt on one.

use std::alloc::Layout;
use std::cell::UnsafeCell;
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
    // No destructor of its own, so that reaching it is one thread-pointer offset with no state
    // to check (a `RefCell` in a `thread_local!` with a `Drop` cost some 20 instructions a take
    // or give-back, eight of which a keep-alive request makes); `FreeOnExit` frees its blocks.
    static FREE: UnsafeCell<FreeLists> = const { UnsafeCell::new(FreeLists::EMPTY) };
    static FREE_ON_EXIT: FreeOnExit = const { FreeOnExit };
}

struct FreeLists {
    /// Lists in use: the first `used` of `lists`, one per layout.
    used: usize,
    /// The thread is ending and its blocks were freed: nothing is kept from now on.
    closed: bool,
    lists: [FreeList; MOST_LAYOUTS],
}

struct FreeList {
    layout: Layout,
    /// Blocks kept: the first `kept` of `blocks`.
    kept: usize,
    blocks: [*mut u8; MOST_KEPT],
}

impl FreeLists {
    const EMPTY: FreeLists = FreeLists {
        used: 0,
        closed: false,
        lists: [const {
            FreeList {
                layout: Layout::new::<u8>(),
                kept: 0,
                blocks: [std::ptr::null_mut(); MOST_KEPT],
            }
        }; MOST_LAYOUTS],
    };
}

/// Runs `f` on this thread's free lists.
#[inline(always)]
fn with_free_lists<R>(f: impl FnOnce(&mut FreeLists) -> R) -> R {
    // SAFETY: the lists are this thread's alone, and `f` (here: list bookkeeping, no allocator
    // call, nothing that could reach this function again) holds the only reference.
    FREE.with(|free| f(unsafe { &mut *free.get() }))
}

/// Frees the thread's kept blocks when it ends.
struct FreeOnExit;

impl Drop for FreeOnExit {
    fn drop(&mut self) {
        let blocks = with_free_lists(|free| {
            free.closed = true;
            let used = std::mem::take(&mut free.used);
            free.lists[..used]
                .iter_mut()
                .flat_map(|list| {
                    let kept = std::mem::take(&mut list.kept);
                    let layout = list.layout;
                    list.blocks[..kept]
                        .iter()
                        .map(move |&block| (block, layout))
                })
                .collect::<Vec<_>>()
        });
        for (block, layout) in blocks {
            // SAFETY: every kept block was allocated by the global allocator with its list's
            // layout.
            unsafe { std::alloc::dealloc(block, layout) };
        }
    }
}

/// A block of `layout` (whose size is not zero): a kept one if there is one, else a new one.
#[inline]
fn take(layout: Layout) -> NonNull<u8> {
    debug_assert!(layout.size() > 0);
    let kept = with_free_lists(|free| {
        let used = free.used;
        let list = free.lists[..used]
            .iter_mut()
            .find(|list| list.layout == layout)?;
        list.kept = list.kept.checked_sub(1)?;
        NonNull::new(list.blocks[list.kept])
    });
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
#[inline]
unsafe fn give_back(layout: Layout, block: NonNull<u8>) {
    let kept = with_free_lists(|free| {
        let used = free.used;
        let index = match free.lists[..used]
            .iter()
            .position(|list| list.layout == layout)
        {
            Some(index) => index,
            None if used < MOST_LAYOUTS && !free.closed => {
                free.lists[used].layout = layout;
                free.used = used + 1;
                // A thread keeping blocks frees them when it ends.
                FREE_ON_EXIT.with(|_| ());
                used
            }
            None => return false,
        };
        let list = &mut free.lists[index];
        if list.kept == MOST_KEPT {
            return false;
        }
        list.blocks[list.kept] = block.as_ptr();
        list.kept += 1;
        true
    });
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
        with_free_lists(|free| {
            let list = free.lists[..free.used]
                .iter()
                .find(|list| list.layout.size() == 1000)
                .unwrap();
            assert_eq!(list.kept, MOST_KEPT);
        });
    }

    #[test]
    fn a_thread_frees_its_blocks_as_it_ends_and_keeps_none_after() {
        std::thread::spawn(|| {
            give_back_bytes(take_bytes(2000));
            let kept = || {
                with_free_lists(|free| {
                    free.lists[..free.used]
                        .iter()
                        .map(|l| l.kept)
                        .sum::<usize>()
                })
            };
            assert_eq!(kept(), 1);
            // What the thread's end runs: the kept block is freed, and one given back later is
            // freed at once rather than kept where nothing would free it.
            drop(FreeOnExit);
            assert_eq!(kept(), 0);
            give_back_bytes(take_bytes(2000));
            assert_eq!(kept(), 0);
        })
        .join()
        .unwrap();
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
