//! The embedded demo behind `herdsman demo`: three small backends in this process, each
//! answering with its own name, and the proxy in front of them.

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::config::Config;
use crate::http1::relay::BodyRelay;
use crate::http1::{header_slots, parse_request};
use crate::transport::Buffer;

/// The demo backends' names.
pub const BACKENDS: [&str; 3] = ["a", "b", "c"];

/// Starts the demo backends on 127.0.0.1 (ports chosen by the kernel) on a thread of their
/// own, and returns their names and addresses.
pub fn start_backends() -> io::Result<Vec<(String, SocketAddr)>> {
    let mut listeners = Vec::new();
    for name in BACKENDS {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        listeners.push((name.to_string(), listener));
    }
    let addrs = listeners
        .iter()
        .map(|(name, l)| Ok((name.clone(), l.local_addr()?)))
        .collect::<io::Result<Vec<_>>>()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("herdsman-demo-backends".into())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                let mut serving = Vec::new();
                for (name, listener) in listeners {
                    let listener = TcpListener::from_std(listener).expect("register demo listener");
                    serving.push(tokio::task::spawn_local(serve_backend(name, listener)));
                }
                for task in serving {
                    let _ = task.await;
                }
            });
        })?;
    Ok(addrs)
}

/// The demo's config: one listener on `listen`, one round-robin pool of the backends, and the
/// admin API on `admin` (loopback, so no token is needed).
pub fn config(listen: SocketAddr, admin: SocketAddr, backends: &[(String, SocketAddr)]) -> Config {
    let servers: Vec<String> = backends
        .iter()
        .map(|(name, addr)| format!("{{ name = \"{name}\", addr = \"{addr}\" }}"))
        .collect();
    let text = format!(
        "workers = \"auto\"\n\n[[listener]]\nname = \"demo\"\nbind = \"{listen}\"\npool = \"demo\"\n\n[[pool]]\nname = \"demo\"\nbalance = \"round-robin\"\nservers = [{}]\n\n[admin]\nbind = \"{admin}\"\n",
        servers.join(", ")
    );
    Config::from_toml(&text, "<demo>").expect("the demo config is valid")
}

/// What `herdsman demo` prints once the proxy listens.
pub fn banner(proxy: SocketAddr, admin: Option<SocketAddr>) -> String {
    let admin = admin.map_or(String::new(), |admin| {
        format!(
            "  curl http://{admin}/api/workers                      # each worker's counters\n  \
             herdsman ctl --admin {admin} servers               # servers, states, requests\n  \
             herdsman ctl --admin {admin} drain demo/a          # a takes no new requests\n"
        )
    });
    format!(
        "herdsman demo: three backends (a, b, c) behind the proxy at http://{proxy}\n\
         try:\n  \
         curl http://{proxy}/                                   # answered by a, b, c in turn\n  \
         for i in 1 2 3 4 5 6; do curl -s http://{proxy}/; done\n  \
         curl -i http://{proxy}/anything                        # the whole response\n  \
         curl -s -d 'a body' http://{proxy}/upload              # a request with a body\n\
         {admin}\
         stop with Ctrl-C\n"
    )
}

async fn serve_backend(name: String, listener: TcpListener) {
    let body = format!("hello from {name}\n");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let body = body.clone();
        tokio::task::spawn_local(async move {
            let _ = serve_backend_connection(stream, body.as_bytes()).await;
        });
    }
}

/// A keep-alive HTTP/1.1 server that answers every request with `body`.
async fn serve_backend_connection(mut stream: TcpStream, body: &[u8]) -> io::Result<()> {
    let mut buffer = Buffer::new();
    let response = [
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
        body,
    ]
    .concat();
    loop {
        let (request_body, keep_alive, head_len) = loop {
            let mut headers = header_slots();
            if let Ok(Some(request)) = parse_request(buffer.data(), &mut headers, 65536) {
                break (request.body, request.keep_alive, request.head_len);
            }
            if buffer.read_from(&mut stream, 4096, 65536).await? == 0 {
                return Ok(());
            }
        };
        buffer.consume(head_len);
        let mut discard = BodyRelay::new(request_body, true, 0);
        let wait = std::time::Duration::from_secs(60);
        discard
            .relay(&mut stream, &mut buffer, &mut tokio::io::sink(), wait, wait)
            .await
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        stream.write_all(&response).await?;
        if !keep_alive {
            return Ok(());
        }
    }
}
