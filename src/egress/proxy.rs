//! One session's listener: an HTTP/1.1 forward proxy speaking hyper.
//! `CONNECT host:port` (https, and WebSockets of either scheme) becomes a
//! tunnel to the checked address; an absolute-form request (`GET http://…`)
//! is sent on to it. Nothing else is served.

use std::{convert::Infallible, net::IpAddr, sync::Arc};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{
    Method, Request, Response, StatusCode,
    body::Incoming,
    header::{self, HeaderMap, HeaderName, HeaderValue},
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use url::Url;

use tokio::sync::Semaphore;

use super::{CONNECT_TIMEOUT, Egress, MAX_CONNECTIONS_PER_SESSION};
use crate::{
    browser_refusals::{BrowserRefusal, Destination, Requester},
    policy::{address::canonical, url_policy::shown},
    refusal::{Refusal, Rule},
    session_id::DaemonName,
};

type Body = BoxBody<Bytes, hyper::Error>;

/// What every connection of one session's listener shares.
pub(super) struct Room {
    pub(super) session: DaemonName,
    pub(super) egress: Egress,
    /// Room for more connections ([`MAX_CONNECTIONS_PER_SESSION`]).
    pub(super) connections: Arc<Semaphore>,
    /// Room for more open tunnels, held until each closes: a tunnel goes
    /// on after hyper has handed over its connection.
    pub(super) tunnels: Arc<Semaphore>,
}

/// Accept connections until `stop`; each is served until it ends or `stop`.
pub(super) async fn listen(listener: TcpListener, room: Arc<Room>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "the egress proxy could not accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&room.connections).try_acquire_owned() else {
            tracing::debug!(session = %room.session, "the egress proxy is at its connection cap for a session; one more was closed");
            continue;
        };
        let (room, stop) = (Arc::clone(&room), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            let serve = {
                let (room, stop) = (Arc::clone(&room), stop.clone());
                hyper::service::service_fn(move |request| {
                    handle(request, Arc::clone(&room), stop.clone())
                })
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), serve)
                .with_upgrades();
            tokio::select! {
                () = stop.cancelled() => {}
                served = connection => if let Err(e) = served {
                    tracing::debug!(error = %e, "an egress proxy connection ended");
                },
            }
        });
    }
}

async fn handle(
    request: Request<Incoming>,
    room: Arc<Room>,
    stop: CancellationToken,
) -> Result<Response<Body>, Infallible> {
    Ok(if request.method() == Method::CONNECT {
        tunnel(request, &room, stop).await
    } else {
        forward(request, &room).await
    })
}

/// `CONNECT host:port`: decided on host, port and addresses (the scheme is
/// inside the tunnel), then bytes both ways to the address checked.
async fn tunnel(
    request: Request<Incoming>,
    room: &Room,
    stop: CancellationToken,
) -> Response<Body> {
    let Some((host, port)) = request
        .uri()
        .authority()
        .and_then(|a| Some((a.host().to_owned(), a.port_u16()?)))
    else {
        return plain(StatusCode::BAD_REQUEST, "CONNECT needs host:port\n");
    };
    let target = format!("{host}:{port}");
    let Ok(open) = Arc::clone(&room.tunnels).try_acquire_owned() else {
        tracing::debug!(session = %room.session, "the egress proxy is at its tunnel cap for a session");
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("this session already has {MAX_CONNECTIONS_PER_SESSION} open tunnels\n"),
        );
    };
    let rules = room.egress.inner.rules.get();
    let checked = rules
        .url
        .check_tunnel(&host, port, room.egress.inner.resolver.as_ref())
        .await;
    let upstream = match decided(checked, port, room) {
        Ok(addresses) => match connect(&addresses, port).await {
            Ok(upstream) => upstream,
            Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("{target}: {e}\n")),
        },
        Err(refusal) => {
            let destination = Destination::of_authority(&host, port);
            return refuse(room, "connection", &target, destination, &refusal);
        }
    };
    tokio::spawn(async move {
        let _open = open;
        let mut upstream = upstream;
        let joined = async {
            let upgraded = hyper::upgrade::on(request).await?;
            let (mut from_page, mut to_page) = tokio::io::split(TokioIo::new(upgraded));
            let (mut from_site, mut to_site) = upstream.split();
            // Either side closing ends the tunnel: a page's socket that is
            // gone must not keep a connection (and its room) open because
            // the far side never closes its own.
            tokio::select! {
                done = tokio::io::copy(&mut from_page, &mut to_site) => done?,
                done = tokio::io::copy(&mut from_site, &mut to_page) => done?,
            };
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        };
        tokio::select! {
            () = stop.cancelled() => {}
            done = joined => if let Err(e) = done {
                tracing::debug!(error = %e, "an egress tunnel ended");
            },
        }
    });
    Response::new(empty())
}

/// An absolute-form request (`GET http://host/path`): decided as a page's
/// subresource, then sent on, in origin form, to the address checked.
async fn forward(mut request: Request<Incoming>, room: &Room) -> Response<Body> {
    let raw = request.uri().to_string();
    let Some(url) = Url::parse(&raw)
        .ok()
        .filter(|u| request.uri().authority().is_some() && u.has_host())
    else {
        return plain(
            StatusCode::BAD_REQUEST,
            "this is browser-shell's egress proxy: it serves CONNECT and absolute-form requests only\n",
        );
    };
    let port = url.port_or_known_default().unwrap_or(0);
    let rules = room.egress.inner.rules.get();
    let checked = rules
        .url
        .check_subresource(&url, room.egress.inner.resolver.as_ref())
        .await;
    let addresses = match decided(checked, port, room) {
        Ok(addresses) => addresses,
        Err(refusal) => {
            let destination = Destination::of_url(&url);
            return refuse(room, "request", &shown(&raw), destination, &refusal);
        }
    };
    let upstream = match connect(&addresses, port).await {
        Ok(upstream) => upstream,
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("{}: {e}\n", shown(&raw))),
    };
    let origin_form = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .unwrap_or_default();
    *request.uri_mut() = origin_form;
    drop_hop_by_hop(request.headers_mut());
    // The site is told the host that was checked, never the page's own
    // `Host` (which could name a virtual host the policy never saw).
    request.headers_mut().remove(header::HOST);
    if let Some(host) = url
        .host_str()
        .and_then(|h| HeaderValue::from_str(&host_header(h, url.port())).ok())
    {
        request.headers_mut().insert(header::HOST, host);
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("{}: {e}\n", shown(&raw))),
        };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "an egress upstream connection ended");
        }
    });
    match sender.send_request(request).await {
        Ok(mut response) => {
            drop_hop_by_hop(response.headers_mut());
            response.map(BodyExt::boxed)
        }
        Err(e) => plain(StatusCode::BAD_GATEWAY, &format!("{}: {e}\n", shown(&raw))),
    }
}

/// The policy's answer, plus the proxy's own rule: none of its listeners
/// is a destination (a page would borrow another session's name).
fn decided(
    checked: Result<crate::policy::url_policy::Checked, Refusal>,
    port: u16,
    room: &Room,
) -> Result<Vec<IpAddr>, Refusal> {
    let addresses = checked?.resolved;
    let loopback = |ip: &IpAddr| canonical(*ip).is_loopback();
    if addresses.iter().any(loopback) && room.egress.is_own_port(port) {
        return Err(Refusal::new(
            Rule::PortProtected,
            format!("port {port} is browser-shell's egress proxy"),
        ));
    }
    Ok(addresses)
}

/// A connection to the first of `addresses` that answers, within the
/// timeout: only addresses the policy checked, never a new lookup.
async fn connect(addresses: &[IpAddr], port: u16) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address to connect to");
    for address in addresses {
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((*address, port)));
        match attempt.await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}

/// Refused: an audited record naming the session, and a 403 for Chromium
/// (the page sees a failed request). Who asked is not known here: a page's
/// word that its load failed confirms it when the record is written.
fn refuse(
    room: &Room,
    what: &str,
    target: &str,
    destination: Option<Destination>,
    refusal: &Refusal,
) -> Response<Body> {
    let reason = format!(
        "a {what} to {target} was refused by the egress proxy: [{}] {}",
        refusal.rule, refusal.message
    );
    // Not the target: a page may put a typed secret in a URL, and only the
    // audit record's copy of the reason passes through the scrubber.
    tracing::info!(session = %room.session, rule = %refusal.rule, what, "the egress proxy refused; the audit record names the target");
    room.egress.inner.reporter.report(
        BrowserRefusal::new(
            Some(room.session.clone()),
            Rule::RequestBlocked,
            reason,
            Requester::Unconfirmed {
                at: std::time::Instant::now(),
            },
        )
        .to(destination),
    );
    plain(
        StatusCode::FORBIDDEN,
        &format!(
            "browser-shell refused [{}]: {}\n",
            refusal.rule, refusal.message
        ),
    )
}

/// Headers that describe one hop, not the message: never passed on.
fn drop_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        "connection",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

fn host_header(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// A body of `bytes`, known whole.
fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn empty() -> Body {
    full(Bytes::new())
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
