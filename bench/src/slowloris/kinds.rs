//! The four kinds of slow client, each one connection's behaviour as a task on a current-thread
//! tokio runtime (a holder process of `kit::slow_holders`), built from `kit::slow_steps`; what
//! each saw of herdsman is a `kit::slow_holders::Tally`: still held at the end, or ended by
//! herdsman (a close, a reset, or an answer to a request it had not finished sending) and how.
//!
//! Every task sleeps `TRICKLE` between two steps, so a thousand of them cost a few thousand
//! wake-ups per second and no CPU to speak of; every task ends at the first step after `stop`.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::{sleep, timeout};

use crate::kit::slow_holders::{Shared, SlowKind, Tally};
use crate::kit::slow_steps::{connect_counted, ended_by_peer, read_slowly, trickle, SMALL_WINDOW};

/// The pause between two steps of every slow connection.
pub const TRICKLE: Duration = Duration::from_secs(1);

/// The slow head: a request line and a header whose value never ends, sent one byte per step.
/// At one byte a second it would take 18 hours to reach herdsman's 64 KiB head limit.
const SLOW_HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
const SLOW_HEAD_PAD: u8 = b'a';

/// The never-finished body: a 1,000,000-byte upload that gets `BODY_TRICKLE` bytes per step.
/// `/upload` makes the backend wait for the whole body, as an application that reads its input
/// first would, so herdsman holds the upload (and its server connection) for as long as it lasts.
const SLOW_BODY_HEAD: &[u8] =
    b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n";
const BODY_TRICKLE: &[u8] = b"data";

/// The slow reader asks for the backend's 1 MiB answer and reads `READ_TRICKLE` bytes per step,
/// with the small window of a reader far away (`slow_steps::SMALL_WINDOW`), so that herdsman's own
/// write waits and it holds the response and the server connection behind it.
const SLOW_READER_REQUEST: &[u8] = b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const READ_TRICKLE: usize = 16;

/// The reset loop: a 10 MB upload, `UPLOAD_PIECE` bytes at once and again after each step, then
/// a reset (SO_LINGER 0, close) after `UPLOAD_STEPS` steps, and a new connection straight away.
const RESET_HEAD: &[u8] =
    b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n";
const UPLOAD_PIECE: usize = 16 * 1024;
const UPLOAD_STEPS: u32 = 2;

/// The kinds, in the order of the mix (a quarter each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    SlowHead,
    SlowBody,
    SlowReader,
    ResetUpload,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::SlowHead,
        Kind::SlowBody,
        Kind::SlowReader,
        Kind::ResetUpload,
    ];

    /// The word that names the kind in the holder's report lines and in the results.
    pub fn label(self) -> &'static str {
        match self {
            Kind::SlowHead => "slow-head",
            Kind::SlowBody => "slow-body",
            Kind::SlowReader => "slow-reader",
            Kind::ResetUpload => "reset-upload",
        }
    }

    /// What a connection of this kind does, for the results file.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::SlowHead => {
                "`GET /` whose head never ends (an `X-Slow:` header growing by one byte a second)"
            }
            Kind::SlowBody => {
                "`POST /upload` with `Content-Length: 1000000`, then 4 bytes of body a second \
                 (the backend answers `/upload` only after the whole body)"
            }
            Kind::SlowReader => {
                "`GET /big` (a 1 MiB answer), read 16 bytes a second, with SO_RCVBUF 4096 and \
                 TCP_MAXSEG 1460 so that herdsman's own write waits"
            }
            Kind::ResetUpload => {
                "`POST /upload` with `Content-Length: 10000000`, 16 KiB at once and 16 KiB a second \
                 later, then a reset (SO_LINGER 0, close) 2 s after connecting, and again"
            }
        }
    }

    pub fn from_label(label: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.label() == label)
    }
}

impl SlowKind for Kind {
    fn label(self) -> &'static str {
        Kind::label(self)
    }
}

/// One slow connection of `kind` (the reset loop: one loop of them), started after `phase` so that
/// the connections of a holder open, and trickle, spread over a second rather than in bursts.
pub async fn run(kind: Kind, shared: &Shared, phase: Duration) -> Tally {
    sleep(phase).await;
    let mut tally = Tally::default();
    if kind == Kind::ResetUpload {
        reset_loop(shared, &mut tally).await;
        return tally;
    }
    let window = (kind == Kind::SlowReader).then_some(SMALL_WINDOW);
    let Some(mut stream) = connect_counted(shared, window, &mut true, &mut tally).await else {
        return tally;
    };
    match kind {
        Kind::SlowHead => {
            let bytes = SLOW_HEAD
                .iter()
                .copied()
                .chain(std::iter::repeat(SLOW_HEAD_PAD));
            let pieces = bytes.map(|b| vec![b]);
            trickle(&mut stream, shared, pieces, TRICKLE, &mut tally).await;
        }
        Kind::SlowBody => {
            let pieces = std::iter::once(SLOW_BODY_HEAD.to_vec())
                .chain(std::iter::repeat(BODY_TRICKLE.to_vec()));
            trickle(&mut stream, shared, pieces, TRICKLE, &mut tally).await;
        }
        Kind::SlowReader => {
            let request = SLOW_READER_REQUEST;
            read_slowly(
                &mut stream,
                shared,
                request,
                READ_TRICKLE,
                TRICKLE,
                &mut tally,
            )
            .await;
        }
        Kind::ResetUpload => unreachable!("handled above"),
    }
    shared.close_or_keep(stream);
    tally
}

/// Uploads part of a large body and resets, over and over, until `stop`.
async fn reset_loop(shared: &Shared, tally: &mut Tally) {
    let mut first = true;
    let piece = vec![b'u'; UPLOAD_PIECE];
    'cycles: while !shared.stopping() {
        let Some(mut stream) = connect_counted(shared, None, &mut first, tally).await else {
            sleep(TRICKLE).await;
            continue;
        };
        let start = [RESET_HEAD, &piece].concat();
        if let Err(e) = stream.write_all(&start).await {
            tally.end(format!("write: {}", e.kind()));
            sleep(TRICKLE).await;
            continue;
        }
        for step in 1..=UPLOAD_STEPS {
            sleep(TRICKLE).await;
            if let Some(how) = ended_by_peer(&stream) {
                tally.end(how);
                continue 'cycles;
            }
            if shared.stopping() {
                tally.held += 1;
                break;
            }
            if step < UPLOAD_STEPS {
                if let Ok(Err(e)) = timeout(TRICKLE, stream.write_all(&piece)).await {
                    tally.end(format!("write: {}", e.kind()));
                    continue 'cycles;
                }
            }
        }
        if shared.stopping() {
            shared.close_or_keep(stream);
            break;
        }
        // An abortive close: RST instead of FIN, mid-body.
        if stream.set_zero_linger().is_ok() {
            tally.resets += 1;
        }
        drop(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::slow_holders::run_until_stopped;
    use crate::kit::slow_steps::serve_one_connection;
    use std::io::Read;

    #[test]
    fn labels_name_every_kind_once() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_label(kind.label()), Some(kind));
        }
    }

    /// A slow body against a server that reads and keeps the connection: held when told to stop.
    #[test]
    fn a_slow_body_that_the_server_keeps_is_held() {
        let (addr, server) = serve_one_connection(|mut conn| {
            let mut head = vec![0u8; SLOW_BODY_HEAD.len()];
            conn.read_exact(&mut head).unwrap();
            // Hold it until the client has finished.
            let mut rest = Vec::new();
            let _ = conn.read_to_end(&mut rest);
            head
        });
        let tally = run_until_stopped(addr, Duration::from_millis(1500), |shared| async move {
            run(Kind::SlowBody, &shared, Duration::ZERO).await
        });
        assert_eq!((tally.opened, tally.held, tally.ended), (1, 1, 0));
        assert_eq!(server.join().unwrap(), SLOW_BODY_HEAD);
    }
}
