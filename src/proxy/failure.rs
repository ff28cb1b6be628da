//! Why an exchange failed, which side caused it, and what the client is told.
//!
//! These happen in normal operation (clients vanish, servers restart), so they are plain values:
//! no allocation, no formatting until one is logged.

use std::io;

use crate::config::access::Refusal;
use crate::config::RetryCondition;
use crate::http1::HeadError;
use crate::transport::HandshakeFailure;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request head is malformed or ambiguous.
    BadRequest(&'static str),
    /// The request head is larger than `max_header_bytes`.
    HeadTooLarge,
    /// The request body is larger than `max_body_bytes`.
    BodyTooLarge,
    /// The client started a head and did not finish it within `client_header`.
    HeadTimeout,
    /// The client sent its request body slower than `[buffering] request_min_rate`.
    BodyTooSlow,
    /// A request herdsman does not proxy (CONNECT, a transfer coding other than chunked).
    NotImplemented(&'static str),
    /// The request line's HTTP major version is not 1.
    VersionNotSupported,
    /// The client stopped sending its body or reading the response for `client_idle`.
    ClientStalled,
    /// The client closed or reset its connection.
    ClientGone,
    /// The client took a buffered response slower than `[buffering] response_min_rate`.
    ReaderTooSlow,
    /// A buffered body could not be kept or read back (its temporary file failed).
    SpoolFailed,
    /// The pool has no server that may take the request.
    NoServer,
    /// Every server that may take the request was at its `max_connections` for `queue_timeout`.
    QueueTimeout,
    /// No descriptor was free to connect to a server (EMFILE, ENFILE) for as long as a request
    /// waits for a slot: the process's fault, not the server's, and nothing was sent.
    NoDescriptor,
    /// Connecting to the server failed (refused, unreachable).
    ConnectFailed(io::ErrorKind),
    ConnectTimeout,
    /// The TLS handshake with the server (`[pool.tls]`) failed, for the reason given; nothing
    /// of the request was sent.
    ServerTls(&'static str),
    /// The server closed the connection before any response byte.
    ServerClosed,
    /// Reading from or writing to the server failed.
    ServerIo(io::ErrorKind),
    /// The server's response is malformed, or not one the request allows.
    BadResponse(&'static str),
    /// No response head within `backend_response`, or a body stalled for `backend_read`.
    ResponseTimeout,
    /// No response head within the request's own `request` timeout, over every attempt.
    RequestTimeout,
    /// The server stopped in the middle of a response body.
    ServerTruncated,
    /// The request asked for a stored answer only (`Cache-Control: only-if-cached`) and the
    /// cache holds none it may give (RFC 9111 §5.2.1.7).
    NotCached,
    /// A listener's or route's `access` refuses the client's address (`refuse = "403"`).
    Forbidden,
    /// The same with `refuse = "close"`: the connection closes without an answer.
    Refused,
}

impl Failure {
    /// The status to answer with, if the client may still be answered.
    pub fn status(self) -> Option<u16> {
        Some(match self {
            Failure::BadRequest(_) => 400,
            Failure::HeadTimeout | Failure::BodyTooSlow => 408,
            Failure::BodyTooLarge => 413,
            Failure::HeadTooLarge => 431,
            Failure::NotImplemented(_) => 501,
            Failure::VersionNotSupported => 505,
            Failure::NoServer | Failure::QueueTimeout | Failure::NoDescriptor => 503,
            Failure::ConnectFailed(_)
            | Failure::ServerTls(_)
            | Failure::ServerClosed
            | Failure::ServerIo(_)
            | Failure::BadResponse(_)
            | Failure::ServerTruncated => 502,
            Failure::ConnectTimeout
            | Failure::ResponseTimeout
            | Failure::RequestTimeout
            | Failure::NotCached => 504,
            Failure::SpoolFailed => 500,
            Failure::Forbidden => 403,
            Failure::Refused => return None,
            Failure::ClientStalled | Failure::ClientGone | Failure::ReaderTooSlow => return None,
        })
    }

    /// A short description, safe to show the client.
    pub fn detail(self) -> &'static str {
        match self {
            Failure::BadRequest(why)
            | Failure::NotImplemented(why)
            | Failure::BadResponse(why)
            | Failure::ServerTls(why) => why,
            Failure::HeadTooLarge => "request header section too large",
            Failure::VersionNotSupported => "only HTTP/1.0 and HTTP/1.1 are spoken here",
            Failure::BodyTooLarge => "request body too large",
            Failure::HeadTimeout => "request head not received in time",
            Failure::BodyTooSlow => "request body arrived too slowly",
            Failure::ClientStalled => "client stalled",
            Failure::ClientGone => "client closed the connection",
            Failure::ReaderTooSlow => "client read the response too slowly",
            Failure::SpoolFailed => "a temporary file for a buffered body failed",
            Failure::NoServer => "no server available",
            Failure::QueueTimeout => "every server is busy; try again shortly",
            Failure::NoDescriptor => "the proxy is out of connections; try again shortly",
            Failure::ConnectFailed(_) => "cannot connect to the server",
            Failure::ConnectTimeout => "timed out connecting to the server",
            Failure::ServerClosed => "server closed the connection without responding",
            Failure::ServerIo(_) => "server connection failed",
            Failure::ResponseTimeout => "server did not respond in time",
            Failure::RequestTimeout => "no response within the request's time limit",
            Failure::ServerTruncated => "server closed the connection mid-response",
            Failure::NotCached => "only-if-cached: the cache holds no answer it may give",
            Failure::Forbidden | Failure::Refused => "access denied",
        }
    }

    /// What the access log's `ended` field says of it. `client_gone` and `client_stalled` say
    /// where the client left: `_mid_body` while its request body was still coming,
    /// `_mid_response` once the response had begun.
    pub fn ended(self, mid_body: bool, mid_response: bool) -> &'static str {
        match self {
            Failure::ClientGone if mid_response => "client_gone_mid_response",
            Failure::ClientGone if mid_body => "client_gone_mid_body",
            Failure::ClientGone => "client_gone",
            Failure::ClientStalled if mid_response => "client_stalled_mid_response",
            Failure::ClientStalled if mid_body => "client_stalled_mid_body",
            Failure::ClientStalled => "client_stalled",
            Failure::BadRequest(_) => "bad_request",
            Failure::HeadTooLarge => "head_too_large",
            Failure::BodyTooLarge => "body_too_large",
            Failure::HeadTimeout => "head_timeout",
            Failure::BodyTooSlow => "body_too_slow",
            Failure::NotImplemented(_) => "not_implemented",
            Failure::VersionNotSupported => "version_not_supported",
            Failure::ReaderTooSlow => "reader_too_slow",
            Failure::SpoolFailed => "spool_failed",
            Failure::NoServer => "no_server",
            Failure::QueueTimeout => "queue_timeout",
            Failure::NoDescriptor => "no_descriptor",
            Failure::ConnectFailed(_) => "connect_failed",
            Failure::ConnectTimeout => "connect_timeout",
            Failure::ServerTls(_) => "server_tls",
            Failure::ServerClosed => "server_closed",
            Failure::ServerIo(_) => "server_error",
            Failure::BadResponse(_) => "bad_response",
            Failure::ResponseTimeout => "response_timeout",
            Failure::RequestTimeout => "request_timeout",
            Failure::ServerTruncated => "server_truncated",
            Failure::NotCached => "not_cached",
            Failure::Forbidden | Failure::Refused => "denied",
        }
    }

    /// The server could not be reached or did not answer: what passive checks count (a server
    /// that answered badly or stopped mid-body answered, and is not counted).
    pub fn is_server_unreachable(self) -> bool {
        matches!(
            self,
            Failure::ConnectFailed(_)
                | Failure::ConnectTimeout
                | Failure::ServerTls(_)
                | Failure::ServerClosed
                | Failure::ServerIo(_)
                | Failure::ResponseTimeout
        )
    }

    /// The server failed the attempt — it could not be reached, did not answer in time (its
    /// own `backend_response` or the request's deadline), or answered with a head that is not
    /// HTTP — as opposed to the client, or herdsman itself: what peak-ewma counts as a slow
    /// answer.
    pub fn is_server_failure(self) -> bool {
        self.is_server_unreachable()
            || matches!(self, Failure::BadResponse(_) | Failure::RequestTimeout)
    }

    /// The `retry_on` condition this failure meets, if any. Only failures before a response
    /// byte come here: the exchange stops at any failure after one.
    pub fn retry_condition(self) -> Option<RetryCondition> {
        Some(match self {
            Failure::ConnectFailed(_) | Failure::ConnectTimeout | Failure::ServerTls(_) => {
                RetryCondition::ConnectFailure
            }
            Failure::ServerClosed => RetryCondition::EmptyResponse,
            Failure::ServerIo(_) => RetryCondition::ResetBeforeResponse,
            Failure::ResponseTimeout => RetryCondition::ResponseTimeout,
            _ => return None,
        })
    }

    /// The server refused the connection: no process listens there now (it stopped, or is
    /// starting). Certain evidence, unlike a timeout.
    pub fn is_refusal(self) -> bool {
        self == Failure::ConnectFailed(io::ErrorKind::ConnectionRefused)
    }

    /// Nothing of the request reached a server (connecting failed), so any request, whatever
    /// its method, may go to another one; after the rest, only an idempotent request may.
    pub fn reached_no_server(self) -> bool {
        matches!(
            self,
            Failure::ConnectFailed(_) | Failure::ConnectTimeout | Failure::ServerTls(_)
        )
    }

    /// True when the client caused it (logged at a lower level: it is not the operator's fault).
    pub fn is_client_side(self) -> bool {
        matches!(
            self,
            Failure::BadRequest(_)
                | Failure::HeadTooLarge
                | Failure::BodyTooLarge
                | Failure::HeadTimeout
                | Failure::BodyTooSlow
                | Failure::NotImplemented(_)
                | Failure::VersionNotSupported
                | Failure::ClientStalled
                | Failure::ClientGone
                | Failure::ReaderTooSlow
                | Failure::NotCached
                | Failure::Forbidden
                | Failure::Refused
        )
    }

    /// How an `access` rule's refusal is told.
    pub fn denied(refusal: Refusal) -> Failure {
        match refusal {
            Refusal::Forbidden => Failure::Forbidden,
            Refusal::Close => Failure::Refused,
        }
    }

    pub fn from_request_head(error: HeadError) -> Failure {
        match error {
            HeadError::TooLarge => Failure::HeadTooLarge,
            HeadError::Invalid(why) => Failure::BadRequest(why),
            HeadError::NotImplemented(why) => Failure::NotImplemented(why),
            HeadError::VersionNotSupported => Failure::VersionNotSupported,
            // Read as HTTP/1.1 by a caller that rewrites it; one that did not refuses it.
            HeadError::LaterMinorVersion { .. } => Failure::BadRequest("invalid HTTP version"),
        }
    }

    pub fn from_response_head(error: HeadError) -> Failure {
        match error {
            HeadError::TooLarge => Failure::BadResponse("response head too large"),
            HeadError::Invalid(why) | HeadError::NotImplemented(why) => Failure::BadResponse(why),
            // parse_response does not classify versions; kept for completeness.
            HeadError::VersionNotSupported | HeadError::LaterMinorVersion { .. } => {
                Failure::BadResponse("invalid HTTP version")
            }
        }
    }

    /// The TLS handshake with a server failed: why, in words an operator can act on.
    pub fn server_tls(failure: &HandshakeFailure) -> Failure {
        use rustls::{CertificateError, Error};
        Failure::ServerTls(match failure {
            HandshakeFailure::Refused(Error::InvalidCertificate(why)) => match why {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    "the server's certificate is not signed by a CA the pool trusts ([pool.tls] ca)"
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    "the server's certificate is not for the name asked ([pool.tls] sni)"
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the server's certificate has expired"
                }
                _ => "the server's certificate did not verify",
            },
            HandshakeFailure::Refused(Error::AlertReceived(_)) => {
                "the server refused the TLS handshake (does it want a client certificate?)"
            }
            HandshakeFailure::Refused(_)
            | HandshakeFailure::NotTls
            | HandshakeFailure::PlainHttp(_) => {
                "the TLS handshake with the server failed (does it speak TLS?)"
            }
            HandshakeFailure::Closed | HandshakeFailure::Io(_) => {
                "the server closed the connection during the TLS handshake"
            }
        })
    }

    /// The server side failed while reading or writing.
    pub fn server_io(error: &io::Error) -> Failure {
        match error.kind() {
            io::ErrorKind::UnexpectedEof => Failure::ServerClosed,
            kind => Failure::ServerIo(kind),
        }
    }
}
