//! Fuzzes the count of an HTTP/2 client's frames (`session::h2::frames`) that decides a flood
//! or a frame that breaks the protocol by its header: never a panic, and the same verdicts
//! whether the bytes come whole or one at a time.
#![no_main]

use herdsman::session::h2::frames::{Budget, FrameWatch};
use libfuzzer_sys::fuzz_target;
use tokio::time::Instant;

fuzz_target!(|input: &[u8]| {
    let budget = Budget {
        burst: 20,
        per_stream: 2,
        per_second: 100,
        reset_burst: 5,
        resets_per_second: 10,
    };
    let now = Instant::now();
    let mut whole = FrameWatch::new(budget, 24, now);
    let mut bytewise = FrameWatch::new(budget, 24, now);
    whole.saw(input, now);
    for byte in input {
        bytewise.saw(std::slice::from_ref(byte), now);
    }
    assert_eq!(whole.spent(), bytewise.spent());
    assert_eq!(
        whole.breach().map(|b| b.code),
        bytewise.breach().map(|b| b.code)
    );
});
