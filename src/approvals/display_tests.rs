use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use x11rb::{connection::Connection, protocol::xproto::*, rust_connection::RustConnection};

use super::{Button, DIALOG_MARK, Display, dialog, name_as_dialog, takes_anyone, wrap};

#[test]
fn wrapping_breaks_at_spaces_and_cuts_only_words_longer_than_a_line() {
    assert_eq!(wrap("one two three", 7), ["one two", "three"]);
    assert_eq!(wrap("a\nb c", 80), ["a", "b c"]);
    assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    assert_eq!(wrap("Pay 12 €", 80), ["Pay 12 €"]);
}

#[test]
fn a_click_counts_only_inside_the_button() {
    let button = Button {
        x: 10,
        y: 20,
        width: 30,
        height: 5,
    };
    assert!(button.holds(10, 20) && button.holds(39, 24));
    assert!(!button.holds(40, 20) && !button.holds(10, 25) && !button.holds(9, 22));
}

/// A throwaway X server for the display tests: Xvfb picks a free display
/// number itself (`-displayfd`) and goes with the test.
struct Xvfb {
    child: std::process::Child,
    name: String,
}

impl Xvfb {
    /// `None` (the test says why and passes) where Xvfb is not installed,
    /// unless `BROWSER_SHELL_REQUIRE_XVFB` is set: the full test run sets it.
    fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// As `start`, with more arguments for Xvfb.
    fn start_with(more: &[&str]) -> Option<Self> {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let spawned = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .args(more)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let why = format!("Xvfb could not start ({e}): the display tests need it");
                assert!(
                    std::env::var_os("BROWSER_SHELL_REQUIRE_XVFB").is_none(),
                    "{why}, and BROWSER_SHELL_REQUIRE_XVFB is set"
                );
                eprintln!("{why}; skipped");
                return None;
            }
        };
        let mut number = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut number)
            .expect("Xvfb names its display");
        let name = format!(":{}", number.trim());
        Some(Self { child, name })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The root's viewable children, bottom to top, and which are dialogs
/// (marked as the dialog marks its window; the name is a page's to choose).
fn stacking(conn: &RustConnection) -> Vec<(Window, bool)> {
    let root = conn.setup().roots[0].root;
    let mark = conn
        .intern_atom(false, DIALOG_MARK)
        .unwrap()
        .reply()
        .unwrap()
        .atom;
    let children = conn.query_tree(root).unwrap().reply().unwrap().children;
    let viewable = |w: Window| {
        let attributes = conn.get_window_attributes(w).unwrap().reply();
        attributes.is_ok_and(|a| a.map_state == MapState::VIEWABLE)
    };
    let marked = |w: Window| {
        let property = conn
            .get_property(false, w, mark, AtomEnum::ANY, 0, 1)
            .unwrap();
        property
            .reply()
            .is_ok_and(|p| p.type_ != Atom::from(AtomEnum::NONE))
    };
    (children.into_iter().filter(|w| viewable(*w)))
        .map(|w| (w, marked(w)))
        .collect()
}

/// A dialog shown on `display` until `stop`.
fn show(display: &str, slot: usize, stop: &Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let (display, stop) = (display.to_owned(), Arc::clone(stop));
    thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let answer = dialog(&display, "Pay 12 €?", (deadline, &stop), slot);
        assert!(matches!(answer, Ok(None)), "{answer:?}");
    })
}

/// A plain window the size of the screen, mapped on top, as a browser
/// window opens where no window manager places it, and named as a dialog
/// is (a page picks its window's title): the name makes no window a dialog.
fn cover(conn: &RustConnection) -> Window {
    let screen = &conn.setup().roots[0];
    let window = conn.generate_id().unwrap();
    conn.create_window(
        screen.root_depth,
        window,
        screen.root,
        0,
        0,
        screen.width_in_pixels,
        screen.height_in_pixels,
        0,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new().override_redirect(1),
    )
    .unwrap();
    name_as_dialog(conn, window).unwrap();
    conn.map_window(window).unwrap();
    conn.flush().unwrap();
    window
}

/// Polls `stacking` until `holds`, for up to 10 s.
fn until(conn: &RustConnection, holds: impl Fn(&[(Window, bool)]) -> bool) -> Vec<(Window, bool)> {
    let start = Instant::now();
    loop {
        let now = stacking(conn);
        if holds(&now) || start.elapsed() > Duration::from_secs(10) {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_window_shown_over_the_dialogs_goes_under_them_and_they_keep_their_order() {
    let Some(xvfb) = Xvfb::start() else { return };
    let (conn, _) = x11rb::connect(Some(&xvfb.name)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let shown = [show(&xvfb.name, 0, &stop), show(&xvfb.name, 1, &stop)];
    let both_up = |s: &[(Window, bool)]| s.iter().filter(|(_, dialog)| *dialog).count() == 2;
    assert!(both_up(&until(&conn, both_up)), "two dialogs never came up");

    let covering = cover(&conn);
    let dialogs_on_top = |s: &[(Window, bool)]| {
        let under = s.iter().position(|(w, _)| *w == covering);
        under.is_some_and(|i| s[i + 1..].iter().filter(|(_, dialog)| *dialog).count() == 2)
    };
    let settled = until(&conn, dialogs_on_top);
    assert!(
        dialogs_on_top(&settled),
        "the window stayed over a dialog: {settled:?}"
    );

    // Each dialog looks for windows over it twice a second: for three of
    // those rounds, neither may rise over the other.
    let order = |s: &[(Window, bool)]| {
        s.iter()
            .filter(|(_, d)| *d)
            .map(|(w, _)| *w)
            .collect::<Vec<_>>()
    };
    let first = order(&settled);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1600) {
        assert_eq!(order(&stacking(&conn)), first, "the dialogs traded places");
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    for dialog in shown {
        dialog.join().unwrap();
    }
}

#[test]
fn a_display_that_lets_in_clients_without_a_cookie_is_refused_at_start() {
    let Some(open) = Xvfb::start() else { return };
    // A client stays connected, as the browser does: an X server with none
    // left resets itself, and drops a connection made meanwhile.
    let (_browser, _) = x11rb::connect(Some(&open.name)).unwrap();
    assert!(takes_anyone(&open.name).unwrap());
    let refused = Display::open(&open.name).unwrap_err().to_string();
    assert!(
        refused.contains("show no cookie") && refused.contains("XAUTHORITY"),
        "{refused}"
    );

    let dir = std::env::temp_dir().join(format!("display-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cookie = dir.join("xauthority");
    // One FamilyWild entry, any display, MIT-MAGIC-COOKIE-1 and 16 bytes.
    let field = |b: &[u8]| [&u16::try_from(b.len()).unwrap().to_be_bytes()[..], b].concat();
    let entry = [
        &0xffff_u16.to_be_bytes()[..],
        &field(b""),
        &field(b""),
        &field(b"MIT-MAGIC-COOKIE-1"),
        &field(&[7; 16]),
    ]
    .concat();
    std::fs::write(&cookie, entry).unwrap();
    let guarded = Xvfb::start_with(&["-auth", cookie.to_str().unwrap()]).unwrap();
    assert!(
        !takes_anyone(&guarded.name).unwrap(),
        "a display with a cookie let in a client without one"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
