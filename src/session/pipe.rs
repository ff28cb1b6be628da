//! Bytes both ways between a client and a server, until either side closes: what follows a 101
//! Switching Protocols (WebSocket), and later the TCP mode.

use tokio::io::AsyncWriteExt;

use crate::transport::{Buffer, Stream};

/// Passes bytes both ways between `client` and `server` until either closes. What either side
/// sent before the switch (in `from_client`, `from_server`) goes first.
pub async fn run(
    client: &mut Stream,
    from_client: &mut Buffer,
    mut server: Stream,
    from_server: &mut Buffer,
) {
    if !send_early(from_server, client).await || !send_early(from_client, &mut server).await {
        return;
    }
    let _ = tokio::io::copy_bidirectional(client, &mut server).await;
}

/// Writes the bytes `early` holds to `to`; false if that failed.
async fn send_early(early: &mut Buffer, to: &mut Stream) -> bool {
    if early.is_empty() {
        return true;
    }
    if to.write_all(early.data()).await.is_err() {
        return false;
    }
    let n = early.len();
    early.consume(n);
    true
}
