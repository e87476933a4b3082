//! `Runner::run` against a stand-in agent-browser (a shell script that notes
//! its pid, then copies its stdin to a file), started like the real one but
//! through a stand-in trampoline that only execs it: this test binary cannot
//! be the trampoline, and the real one's confinement is proven by hardening's
//! tests and `tests/e2e`. The release check: the child starts while the
//! check is pending, gets its batch only once it passes, and is killed
//! without it when the check fails. Standbys: a session's next call is served by the process
//! spawned ahead of it, and one whose session ended is never used. And a
//! killed multi-threaded process (the daemon) counts as gone only once all
//! its threads are.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use audit::IntentSynced;

use super::{Bounds, Runner, RunnerConfig, Termination, Withheld, Withhold};
use crate::session_id::SessionId;

struct StandIn {
    _dir: tempfile::TempDir,
    /// Mints the proofs the gates hand over, as a call's intent would.
    audit: audit::Sink,
    runner: Runner,
    /// Where the stand-in copies its stdin; created as soon as it starts.
    received: PathBuf,
    /// One line per stand-in started: its pid.
    started: PathBuf,
}

fn stand_in() -> StandIn {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let sockets = dir.path().join("sock");
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&sockets).unwrap();
    let script = dir.path().join("agent-browser");
    std::fs::write(
        &script,
        "#!/bin/sh\necho $$ >> \"$HOME/started\"\nexec cat > \"$HOME/received\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Called as `trampoline POLICY PROGRAM ARGS…`.
    let trampoline = dir.path().join("trampoline");
    std::fs::write(&trampoline, "#!/bin/sh\nshift\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&trampoline, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut policy = hardening::Policy::default();
    policy.read_exec_paths = ["/usr", "/bin", "/lib", "/lib64"]
        .iter()
        .map(PathBuf::from)
        .chain([dir.path().to_owned()])
        .collect();
    policy.read_write_paths = vec![dir.path().to_owned()];
    policy.degraded = hardening::Degraded::Allow;
    let runner = Runner::new(RunnerConfig {
        agent_browser: script,
        cdp_port: 9,
        gate_port: 9,
        home_dir: home.clone(),
        socket_dir: crate::daemons::SocketDir::open(&sockets).unwrap(),
        config_file: dir.path().join("config.json"),
        output_dir: dir.path().join("out"),
        idle_timeout_ms: 1000,
        confinement: Arc::new(hardening::prepare(&policy).unwrap()),
        trampoline: hardening::Trampoline::new(trampoline, &policy).unwrap(),
        identities: Arc::default(),
    })
    .unwrap();
    let audit = audit::Sink::open(&dir.path().join("audit.jsonl"), None, None).unwrap();
    StandIn {
        audit,
        _dir: dir,
        runner,
        received: home.join("received"),
        started: home.join("started"),
    }
}

/// Wait until the stand-in has started (its output file exists).
async fn started(received: &Path) {
    for _ in 0..1000 {
        if received.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the stand-in never started");
}

fn batch() -> Vec<Vec<String>> {
    vec![vec!["get".to_owned(), "url".to_owned()]]
}

/// The stand-in received exactly the batch on its stdin.
fn assert_got_the_batch(s: &StandIn) {
    assert_eq!(
        std::fs::read(&s.received).unwrap(),
        serde_json::to_vec(&batch()).unwrap()
    );
}

/// A durable intent record, and its proof.
fn proof(s: &StandIn) -> IntentSynced {
    let event = audit::Event::new(audit::Phase::Intent, "test-call");
    s.audit.append_intent_synced(event).unwrap().1
}

/// Run the batch through the stand-in's runner, behind `release`.
async fn run(
    s: &StandIn,
    session: &SessionId,
    release: impl Future<Output = Result<IntentSynced, Withheld>>,
) -> super::RawOutcome {
    let cancel = CancellationToken::new();
    let bounds = Bounds {
        timeout: Duration::from_secs(30),
        cancel: &cancel,
    };
    s.runner
        .run(session, &batch(), bounds, false, release)
        .await
        .raw
}

#[tokio::test]
async fn the_child_starts_before_the_gate_opens_but_gets_its_batch_only_after() {
    let s = stand_in();
    let at_release = Arc::new(Mutex::new(None));
    let intent = proof(&s);
    let release = {
        let (received, at_release) = (s.received.clone(), Arc::clone(&at_release));
        async move {
            started(&received).await;
            // A child fed too early would have copied its batch by now.
            tokio::time::sleep(Duration::from_millis(100)).await;
            *at_release.lock().unwrap() = Some(std::fs::read(&received).unwrap());
            Ok(intent)
        }
    };
    let session = SessionId::parse("g1").unwrap();
    let raw = run(&s, &session, release).await;
    assert_eq!(raw.termination, Termination::Exited(0), "{raw:?}");
    assert_eq!(at_release.lock().unwrap().as_deref(), Some(&b""[..]));
    assert_got_the_batch(&s);
}

#[tokio::test]
async fn a_failed_gate_kills_the_child_without_its_batch() {
    let s = stand_in();
    let release = {
        let received = s.received.clone();
        async move {
            started(&received).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            Err(Withheld {
                why: Withhold::Audit("fdatasync: Invalid argument".to_owned()),
                intent: None,
            })
        }
    };
    let session = SessionId::parse("g2").unwrap();
    let raw = run(&s, &session, release).await;
    assert_eq!(
        raw.termination,
        Termination::Withheld(Withhold::Audit("fdatasync: Invalid argument".to_owned()))
    );
    // Killed, not finished: had it been fed, `cat` would have copied it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(std::fs::read(&s.received).unwrap(), b"");
}

#[tokio::test]
async fn a_trampoline_that_refuses_is_a_failed_spawn_and_agent_browser_never_starts() {
    let mut s = stand_in();
    let dir = s.runner.home_dir.parent().unwrap().to_owned();
    let refusing = dir.join("refusing-trampoline");
    std::fs::write(
        &refusing,
        format!(
            "#!/bin/sh\necho '{}cannot enforce Landlock: Operation not permitted' >&2\nexit {}\n",
            hardening::trampoline::STDERR_PREFIX,
            hardening::trampoline::EXIT_REFUSED
        ),
    )
    .unwrap();
    std::fs::set_permissions(&refusing, std::fs::Permissions::from_mode(0o755)).unwrap();
    s.runner.trampoline =
        hardening::Trampoline::new(&refusing, &hardening::Policy::default()).unwrap();
    let session = SessionId::parse("t1").unwrap();
    let raw = run(&s, &session, std::future::ready(Ok(proof(&s)))).await;
    assert_eq!(
        raw.termination,
        Termination::SpawnFailed("cannot enforce Landlock: Operation not permitted".to_owned()),
        "{raw:?}"
    );
    assert!(!s.started.exists(), "the stand-in agent-browser ran");
}

fn pids(started: &Path) -> Vec<String> {
    std::fs::read_to_string(started)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn until_started(s: &StandIn, count: usize) {
    for _ in 0..1000 {
        if pids(&s.started).len() >= count && s.received.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no stand-in started (want {count})");
}

fn is_running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next()),
            Some("Z" | "X")
        )
    })
}

#[tokio::test]
async fn a_sessions_next_call_is_served_by_its_standby() {
    let s = stand_in();
    let session = SessionId::parse("s1").unwrap();
    s.runner.prepare_standby(&session);
    until_started(&s, 1).await;
    // Started is not yet kept: wait until it is the session's standby.
    for _ in 0..1000 {
        if s.runner.standbys.is_ready(session.daemon_name()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let standby = pids(&s.started);
    let raw = run(&s, &session, std::future::ready(Ok(proof(&s)))).await;
    assert_eq!(raw.termination, Termination::Exited(0), "{raw:?}");
    // No second process: the standby got the batch.
    assert_eq!(pids(&s.started), standby);
    assert_got_the_batch(&s);
}

#[tokio::test]
async fn a_standby_whose_session_ended_is_killed_and_never_used() {
    let s = stand_in();
    let session = SessionId::parse("s2").unwrap();
    s.runner.prepare_standby(&session);
    until_started(&s, 1).await;
    let standby = pids(&s.started).remove(0);
    assert!(is_running(&standby));
    s.runner.standbys.discard(session.daemon_name());
    for _ in 0..500 {
        if !is_running(&standby) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !is_running(&standby),
        "the discarded standby {standby} still runs"
    );
    let raw = run(&s, &session, std::future::ready(Ok(proof(&s)))).await;
    assert_eq!(raw.termination, Termination::Exited(0), "{raw:?}");
    // A fresh child served the call.
    let started = pids(&s.started);
    assert_eq!(started.len(), 2, "{started:?}");
    assert_ne!(started[1], standby);
}

#[tokio::test]
async fn a_standby_spawned_after_its_session_ended_is_not_kept() {
    let s = stand_in();
    let session = SessionId::parse("s3").unwrap();
    s.runner.prepare_standby(&session);
    // Ended before the spawn (which waits `STANDBY_AFTER`) is done.
    s.runner.standbys.discard(session.daemon_name());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(s.runner.standbys.take(session.daemon_name()).is_none());
    for pid in pids(&s.started) {
        assert!(!is_running(&pid), "an unwanted standby {pid} still runs");
    }
}

#[test]
fn a_process_whose_main_thread_exited_is_alive_while_another_thread_runs() {
    // The daemon is multi-threaded: killed, its main thread can show as a
    // zombie while the others still hold its socket. Here the main thread
    // leaves (pthread_exit) and one thread keeps running for 2 s.
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            "import threading, time, ctypes\n\
             threading.Thread(target=time.sleep, args=(2,)).start()\n\
             ctypes.CDLL(None).pthread_exit(None)",
        ])
        .spawn()
        .expect("python3 runs");
    let pid = child.id();
    let status = || std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    for _ in 0..200 {
        if status().contains("zombie") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(status().contains("zombie"), "{}", status());
    assert!(
        super::daemon::is_alive(pid),
        "its other thread still runs: {}",
        status()
    );
    let _ = child.wait();
    assert!(!super::daemon::is_alive(pid));
}
