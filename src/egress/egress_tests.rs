use std::{
    io,
    net::IpAddr,
    sync::atomic::{AtomicUsize, Ordering},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::{browser_refusals::BrowserRefusal, policy::resolve::BoxFuture, refusal::Rule};

/// Answers the allowed address first and the forbidden one after: the
/// rebinding attacker's DNS server.
struct Rebinding {
    asked: AtomicUsize,
}

impl Rebinding {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            asked: AtomicUsize::new(0),
        })
    }
}

impl Resolve for Rebinding {
    fn resolve<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let first = self.asked.fetch_add(1, Ordering::SeqCst) == 0;
        let ip: IpAddr = if first {
            [127, 0, 0, 1]
        } else {
            [127, 0, 0, 2]
        }
        .into();
        Box::pin(std::future::ready(Ok(vec![ip])))
    }
}

/// An egress for policy `policy`, with `resolver`; its refusals come out of
/// the receiver. The tempdir holds the policy file and audit key.
fn daemon(name: &str) -> DaemonName {
    DaemonName::checked(name).unwrap()
}

fn egress(
    policy: &str,
    resolver: Arc<dyn Resolve>,
) -> (
    Egress,
    tokio::sync::mpsc::Receiver<BrowserRefusal>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policy.json"), policy).expect("policy");
    let source = rules::Source {
        policy_file: dir.path().join("policy.json"),
        secrets_file: None,
        protected_ports: vec![],
        extra_secret_params: vec![],
        key: audit::Key::load_or_create(&dir.path().join("key")).expect("key"),
        subcommand_known: |_| true,
    };
    let rules = Arc::new(rules::Current::load(source).expect("rules"));
    let (reporter, refusals) = Reporter::channel();
    (Egress::new(rules, resolver, reporter), refusals, dir)
}

/// Listeners on 127.0.0.1:P and 127.0.0.2:P (one port, two addresses),
/// each counting the connections it accepts.
async fn twin_listeners() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    loop {
        let allowed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = allowed.local_addr().expect("addr").port();
        let Ok(forbidden) = TcpListener::bind(("127.0.0.2", port)).await else {
            continue;
        };
        let counts = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        for (listener, count) in [(allowed, &counts.0), (forbidden, &counts.1)] {
            let count = Arc::clone(count);
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = stream
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                }
            });
        }
        return (port, counts.0, counts.1);
    }
}

/// Send `head` to the proxy on `port`; the first line of its answer.
async fn ask(port: u16, head: &str) -> String {
    ask_and_keep(port, head).await.0
}

/// As [`ask`], and the connection, kept open.
async fn ask_and_keep(port: u16, head: &str) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("proxy");
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer in time")
        .expect("read");
    let line = String::from_utf8_lossy(&answer[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    (line, stream)
}

const ALLOW_127_0_0_1: &str = r#"{"open":{"allow_private_cidrs":["127.0.0.1/32"]}}"#;

#[tokio::test]
async fn a_rebinding_name_reaches_only_the_address_that_was_checked() {
    let resolver = Rebinding::new();
    let (egress, _refusals, _dir) = egress(ALLOW_127_0_0_1, Arc::clone(&resolver) as _);
    let proxy = egress.open(&daemon("s1")).expect("listener");
    let (port, allowed, forbidden) = twin_listeners().await;
    let first = ask(
        proxy,
        &format!("CONNECT rebind.test:{port} HTTP/1.1\r\nhost: rebind.test:{port}\r\n\r\n"),
    )
    .await;
    assert!(first.contains(" 200"), "{first}");
    // The tunnel is open to the address checked; nothing resolved it twice.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(resolver.asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        (
            allowed.load(Ordering::SeqCst),
            forbidden.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    // The name now points at the forbidden address: checked again, refused.
    let second = ask(
        proxy,
        &format!("CONNECT rebind.test:{port} HTTP/1.1\r\nhost: rebind.test:{port}\r\n\r\n"),
    )
    .await;
    assert!(second.contains(" 403"), "{second}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        forbidden.load(Ordering::SeqCst),
        0,
        "the forbidden address was never connected to"
    );
}

#[tokio::test]
async fn a_forbidden_connection_is_refused_reported_and_never_made() {
    let (egress, mut refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let proxy = egress.open(&daemon("s1")).expect("listener");
    let (port, _allowed, forbidden) = twin_listeners().await;
    for head in [
        format!("CONNECT 127.0.0.2:{port} HTTP/1.1\r\nhost: 127.0.0.2:{port}\r\n\r\n"),
        format!(
            "GET http://127.0.0.2:{port}/x?secret=1 HTTP/1.1\r\nhost: 127.0.0.2:{port}\r\n\r\n"
        ),
    ] {
        let answer = ask(proxy, &head).await;
        assert!(answer.contains(" 403"), "{answer}");
        let refusal = refusals.recv().await.expect("a refusal record");
        assert_eq!(
            (refusal.daemon.as_deref().unwrap_or_default(), refusal.rule),
            ("s1", Rule::RequestBlocked)
        );
        assert!(
            refusal.reason.contains(&format!("127.0.0.2:{port}")),
            "{}",
            refusal.reason
        );
        assert!(
            !refusal.reason.contains("secret=1"),
            "no query in the record: {}",
            refusal.reason
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(forbidden.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_allowed_absolute_form_request_is_sent_on_in_origin_form() {
    let (egress, _refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let proxy = egress.open(&daemon("s1")).expect("listener");
    let (port, allowed, _forbidden) = twin_listeners().await;
    let answer = ask(
        proxy,
        &format!("GET http://127.0.0.1:{port}/page HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nproxy-connection: keep-alive\r\n\r\n"),
    )
    .await;
    assert!(answer.contains(" 200"), "{answer}");
    assert_eq!(allowed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_page_cannot_reach_a_listener_of_the_proxy_in_any_address_form() {
    let (egress, mut refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let mine = egress.open(&daemon("a")).expect("listener");
    let theirs = egress.open(&daemon("b")).expect("listener");
    // Another session's listener (a page would borrow its name), and its
    // own (a tunnel to itself), as IPv4 and in the IPv4-mapped forms.
    for port in [theirs, mine] {
        for host in ["127.0.0.1", "[::ffff:7f00:1]", "[::ffff:127.0.0.1]"] {
            let answer = ask(mine, &format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n")).await;
            assert!(answer.contains(" 403"), "{host}:{port}: {answer}");
            let refusal = refusals.recv().await.expect("a refusal record");
            assert!(
                refusal.reason.contains("[port.protected]"),
                "{}",
                refusal.reason
            );
        }
    }
}

/// The `Host` a site is sent names the URL that was checked, not what the
/// page put in its request.
#[tokio::test]
async fn the_host_sent_on_is_the_checked_urls() {
    let (egress, _refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let proxy = egress.open(&daemon("s1")).expect("listener");
    let site = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = site.local_addr().expect("addr").port();
    let seen = tokio::spawn(async move {
        let (mut stream, _) = site.accept().await.expect("accept");
        let mut head = vec![0; 4096];
        let n = stream.read(&mut head).await.expect("read");
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        String::from_utf8_lossy(&head[..n]).to_ascii_lowercase()
    });
    let answer = ask(
        proxy,
        &format!("GET http://127.0.0.1:{port}/p HTTP/1.1\r\nhost: intranet.example:80\r\n\r\n"),
    )
    .await;
    assert!(answer.contains(" 200"), "{answer}");
    let head = seen.await.expect("the site's view");
    assert!(
        head.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
        "{head}"
    );
    assert!(!head.contains("intranet.example"), "{head}");
}

#[tokio::test]
async fn a_closed_sessions_listener_accepts_nothing() {
    let (egress, _refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let port = egress.open(&daemon("a")).expect("listener");
    assert_eq!(egress.open(&daemon("a")).expect("same listener"), port);
    egress.close("a");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
}

#[tokio::test]
async fn open_tunnels_are_capped_per_session_until_they_close() {
    let (egress, _refusals, _dir) = egress(ALLOW_127_0_0_1, Rebinding::new());
    let proxy = egress.open(&daemon("s1")).expect("listener");
    // A destination that holds every connection open, as a WebSocket server would.
    let held = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = held.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = held.accept().await {
            kept.push(stream);
        }
    });
    let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let mut open = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_SESSION {
        let (answer, stream) = ask_and_keep(proxy, &head).await;
        assert!(answer.contains(" 200"), "{answer}");
        open.push(stream);
    }
    let (over, _) = ask_and_keep(proxy, &head).await;
    assert!(over.contains(" 503"), "{over}");
    // One closes: its room is free again.
    drop(open.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (again, _) = ask_and_keep(proxy, &head).await;
    assert!(again.contains(" 200"), "{again}");
}
