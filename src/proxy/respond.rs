//! The response half of an exchange: read the server's head (relaying interim 1xx responses),
//! write the client's head, stream the body, then keep the server connection for reuse if the
//! message ended cleanly — or tunnel bytes both ways after a 101.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::exchange::RequestFacts;
use super::failure::Failure;
use super::relay::{BodyRelay, RelayError, BUFFER_INITIAL};
use super::{Client, Next};
use crate::http1::forward::{write_response_head, ClientFraming};
use crate::http1::{parse_response, Body, MAX_HEADERS};
use crate::upstream::{Server, Snapshot};
use crate::worker::WorkerContext;

/// Largest response head accepted from a server.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Reads until `buffer` starts with a complete final response head (1xx other than 101 are
/// relayed to an HTTP/1.1 client, or dropped for HTTP/1.0, and consumed). No timeout here: the
/// caller bounds the wait.
pub async fn read_response_head<R, W>(
    server: &mut R,
    buffer: &mut super::Buffer,
    client: &mut W,
    facts: RequestFacts,
) -> Result<(), Failure>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut interim = Vec::new();
    loop {
        if !buffer.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let parsed =
                parse_response(buffer.data(), &mut headers, facts.method, MAX_RESPONSE_HEAD)
                    .map_err(Failure::from_response_head)?;
            if let Some(response) = parsed {
                if !response.is_interim() {
                    return Ok(());
                }
                let head_len = response.head_len;
                if facts.minor_version == 1 {
                    interim.clear();
                    let framing = ClientFraming {
                        close: false,
                        http10_keep_alive: false,
                        dechunk: false,
                    };
                    write_response_head(&response, framing, &mut interim);
                    client
                        .write_all(&interim)
                        .await
                        .map_err(|_| Failure::ClientGone)?;
                }
                buffer.consume(head_len);
                continue;
            }
        }
        match buffer
            .read_from(server, BUFFER_INITIAL, MAX_RESPONSE_HEAD)
            .await
        {
            Ok(0) if buffer.is_empty() => return Err(Failure::ServerClosed),
            Ok(0) => return Err(Failure::BadResponse("incomplete response head")),
            Ok(_) => {}
            Err(e) => return Err(Failure::server_io(&e)),
        }
    }
}

/// Writes the response whose head is at the front of `client.server_buffer` to the client and
/// streams its body. `upload_finished` is false when the server answered before the request
/// body was all sent: then both connections close after the response.
#[allow(clippy::too_many_arguments)]
pub async fn respond(
    context: &WorkerContext,
    client: &mut Client,
    snapshot: &Snapshot,
    server: &Server,
    facts: RequestFacts,
    mut upstream: TcpStream,
    upload_finished: bool,
    response_started: &mut bool,
) -> Result<Next, Failure> {
    let timeouts = snapshot.timeouts;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let response = parse_response(
        client.server_buffer.data(),
        &mut headers,
        facts.method,
        MAX_RESPONSE_HEAD,
    )
    .map_err(Failure::from_response_head)?
    .ok_or(Failure::BadResponse("incomplete response head"))?;

    let switching = response.code == 101;
    if switching && !facts.upgrade {
        return Err(Failure::BadResponse("101 to a request without Upgrade"));
    }
    // An HTTP/1.0 client cannot read chunked: send the data and end it by closing.
    let dechunk = response.body == Body::Chunked && facts.minor_version == 0;
    let close = !facts.keep_alive
        || !upload_finished
        || context.is_stopping()
        || response.body == Body::UntilClose
        || dechunk;
    let framing = ClientFraming {
        close,
        http10_keep_alive: facts.minor_version == 0 && !close,
        dechunk,
    };
    client.out.clear();
    write_response_head(&response, framing, &mut client.out);
    let server_keeps_alive = response.keep_alive;
    let body = response.body;
    let head_len = response.head_len;
    client.server_buffer.consume(head_len);

    let mut download = BodyRelay::new(body, dechunk, 0);
    download
        .take_buffered(&mut client.server_buffer, &mut client.out)
        .map_err(download_failure)?;
    match timeout(timeouts.client_idle, client.stream.write_all(&client.out)).await {
        Err(_) => return Err(Failure::ClientStalled),
        Ok(Err(_)) => return Err(Failure::ClientGone),
        Ok(Ok(())) => {}
    }
    *response_started = true;

    if switching {
        tunnel(client, upstream).await;
        return Ok(Next::Close);
    }
    download
        .relay(
            &mut upstream,
            &mut client.server_buffer,
            &mut client.stream,
            timeouts.backend_response,
            timeouts.client_idle,
        )
        .await
        .map_err(download_failure)?;

    // Reuse only a connection whose last message ended exactly where the server said it would.
    if server_keeps_alive && upload_finished && client.server_buffer.is_empty() {
        context.keep_idle(server.id, upstream, snapshot.limits.max_idle_per_server);
    }
    Ok(if close { Next::Close } else { Next::KeepAlive })
}

/// After a 101: passes bytes both ways until either side closes. Bytes that arrived with the
/// heads go first.
async fn tunnel(client: &mut Client, mut upstream: TcpStream) {
    if !client.server_buffer.is_empty() {
        if client
            .stream
            .write_all(client.server_buffer.data())
            .await
            .is_err()
        {
            return;
        }
        let n = client.server_buffer.len();
        client.server_buffer.consume(n);
    }
    if !client.buffer.is_empty() {
        if upstream.write_all(client.buffer.data()).await.is_err() {
            return;
        }
        let n = client.buffer.len();
        client.buffer.consume(n);
    }
    let _ = tokio::io::copy_bidirectional(&mut client.stream, &mut upstream).await;
}

/// A response body that could not be relayed, as the server's or the client's failure.
fn download_failure(error: RelayError) -> Failure {
    match error {
        RelayError::SourceEnded => Failure::ServerTruncated,
        RelayError::SourceIo(kind) => Failure::ServerIo(kind),
        RelayError::SourceTimeout => Failure::ResponseTimeout,
        RelayError::SinkIo(_) => Failure::ClientGone,
        RelayError::SinkTimeout => Failure::ClientStalled,
        RelayError::Framing(why) => Failure::BadResponse(why),
        RelayError::TooLarge => Failure::BadResponse("response body too large"),
    }
}
