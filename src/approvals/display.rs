//! The person watching the browser's display as an approvals channel: a
//! dialog drawn on the X display the browser is shown on (over VNC, on
//! the stack), outside any page the agent drives. The agent acts over CDP,
//! which reaches into pages, never onto the display, and a page cannot
//! press another window's buttons; nothing of the question is rendered in
//! the browser. Only a click on "Approve" is a yes: no key approves, so a
//! stray Enter cannot. Who may click is whoever may send input to the
//! display: on the stack, a VNC client that knows the control password,
//! which the gateway's API key does not give (docs/design.md, "Approvals").

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use x11rb::{
    connection::Connection,
    protocol::{Event, xproto::*},
    rust_connection::{ConnectError, ConnectionError, DefaultStream, RustConnection},
    wrapper::ConnectionExt as _,
};

use super::Answer;

/// The Approve button's colour, and the Deny button's: plain to a person,
/// and to a test that finds the button on the screen as a person does.
pub(crate) const APPROVE_RGB: u32 = 0x1a_7f_37;
const DENY_RGB: u32 = 0xb4_23_18;
const BACKGROUND_RGB: u32 = 0xf6_f8_fa;
const TEXT_RGB: u32 = 0x24_29_2f;
const BORDER: u16 = 4;
const COLUMNS: usize = 96;
/// How often the dialog looks for a click and for a window over it.
const TICK: Duration = Duration::from_millis(25);
/// How often the dialog looks for a window over it unprompted: a dialog
/// already partly under another dialog gets no new visibility event when
/// a browser window covers it further.
const RAISE_EVERY: u32 = 20;
/// The dialog window's name, for people and tools that list windows.
const DIALOG_NAME: &[u8] = b"browser-shell approval";
/// The property that marks a window as a dialog, this server's or
/// another's on the display: a page names its window (its title) as it
/// likes, but cannot set a window property.
const DIALOG_MARK: &[u8] = b"_BROWSER_SHELL_APPROVAL_DIALOG";

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// Why the display cannot carry dialogs.
#[derive(Debug)]
pub(crate) struct DisplayError {
    display: String,
    why: Failure,
}

impl std::fmt::Display for DisplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "X display {}: {}", self.display, self.why)
    }
}

impl std::error::Error for DisplayError {}

/// The X display approval dialogs are drawn on.
#[derive(Debug)]
pub(crate) struct Display {
    name: String,
    /// Dialogs up now: each new one is drawn below the last.
    showing: Arc<AtomicUsize>,
}

impl Display {
    /// The display `name` (e.g. `:99`), reached once now, so that a wrong
    /// name, or a display anyone may click on, stops the start instead of
    /// the first approval.
    pub(crate) fn open(name: &str) -> Result<Self, DisplayError> {
        let failed = |why: Failure| DisplayError {
            display: name.to_owned(),
            why,
        };
        // Held through the check: an X server with no client left resets
        // itself, and a connection made meanwhile is dropped.
        let _held = x11rb::connect(Some(name))
            .map_err(|e| failed(format!("{e}; start its X server first").into()))?;
        if takes_anyone(name).map_err(failed)? {
            return Err(failed(
                "it lets in clients that show no cookie, so any local process, a confined \
                 agent-browser included, could click Approve: start its X server with a cookie \
                 (`Xvfb -auth FILE`) and give browser-shell the same file in XAUTHORITY"
                    .into(),
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            showing: Arc::default(),
        })
    }

    fn by(&self) -> Value {
        json!({"channel": "display", "display": self.name})
    }

    /// Show `message` with Approve and Deny until a click, `within`, or
    /// `cancel`; the dialog is gone when this returns.
    pub(crate) async fn answer(
        &self,
        message: String,
        within: Duration,
        cancel: &CancellationToken,
    ) -> Answer {
        let stop = Arc::new(AtomicBool::new(false));
        let (name, showing) = (self.name.clone(), Arc::clone(&self.showing));
        let stopped = Arc::clone(&stop);
        let shown = tokio::task::spawn_blocking(move || {
            let slot = showing.fetch_add(1, Ordering::SeqCst);
            let clicked = dialog(&name, &message, (Instant::now() + within, &stopped), slot);
            showing.fetch_sub(1, Ordering::SeqCst);
            clicked
        });
        let by = self.by();
        let clicked = tokio::select! {
            clicked = shown => clicked,
            () = cancel.cancelled() => {
                // The dialog sees this within a tick and takes itself down.
                stop.store(true, Ordering::SeqCst);
                return Answer::Cancelled;
            }
        };
        match clicked {
            Ok(Ok(Some(true))) => Answer::Yes { by },
            Ok(Ok(Some(false))) => Answer::No {
                by,
                why: "the person at the display clicked Deny".into(),
            },
            Ok(Ok(None)) => Answer::None,
            Ok(Err(e)) => Answer::No {
                by,
                why: format!("the dialog could not be shown on {}: {e}", self.name),
            },
            Err(e) => Answer::No {
                by,
                why: format!("the dialog on {} failed: {e}", self.name),
            },
        }
    }
}

/// Does the display let in a client that shows no cookie? A confined
/// agent-browser may open unix sockets, and Landlock does not govern
/// connecting to one by its path, so such a display is its to click on.
fn takes_anyone(name: &str) -> Result<bool, Failure> {
    let parsed = x11rb::reexports::x11rb_protocol::parse_display::parse_display(Some(name))?;
    let mut unreachable = None;
    for address in parsed.connect_instruction() {
        match DefaultStream::connect(&address) {
            Ok((stream, _)) => {
                let screen = usize::from(parsed.screen);
                return match RustConnection::connect_to_stream(stream, screen) {
                    Ok(_) => Ok(true),
                    Err(ConnectError::SetupAuthenticate(_) | ConnectError::SetupFailed(_)) => {
                        Ok(false)
                    }
                    Err(e) => Err(e.into()),
                };
            }
            Err(e) => unreachable = Some(e),
        }
    }
    Err(unreachable.map_or_else(|| "it names no way to reach it".into(), Into::into))
}

/// Where a button is, in the window.
#[derive(Debug, Clone, Copy)]
struct Button {
    x: i16,
    y: i16,
    width: u16,
    height: u16,
}

impl Button {
    fn holds(self, x: i16, y: i16) -> bool {
        let (right, bottom) = (
            i32::from(self.x) + i32::from(self.width),
            i32::from(self.y) + i32::from(self.height),
        );
        x >= self.x && y >= self.y && i32::from(x) < right && i32::from(y) < bottom
    }
}

/// A font's cell, and whether it draws Unicode (else Latin-1).
struct Font {
    id: u32,
    width: i16,
    ascent: i16,
    line: i16,
    unicode: bool,
}

/// Where everything goes in the dialog.
struct Layout {
    lines: Vec<String>,
    width: u16,
    height: u16,
    deny: Button,
    approve: Button,
}

impl Layout {
    fn of(font: &Font, message: &str) -> Self {
        let mut lines = vec![
            "browser-shell: a person's approval is needed".to_owned(),
            String::new(),
        ];
        lines.extend(wrap(message, COLUMNS));
        let pad = font.width * 2;
        let columns = i16::try_from(COLUMNS).unwrap_or(i16::MAX);
        let width = u16::try_from(font.width * columns + 2 * pad).unwrap_or(640);
        let rows = i16::try_from(lines.len()).unwrap_or(i16::MAX);
        let button_height = u16::try_from(font.line * 2).unwrap_or(26);
        let text_bottom = pad + font.line * rows;
        let height = u16::try_from(text_bottom + pad * 2).unwrap_or(400) + button_height;
        let button_width = u16::try_from(font.width * 14).unwrap_or(100);
        let y = text_bottom + pad;
        let approve_x = i16::try_from(width).unwrap_or(640) - pad - font.width * 14;
        let button = |x| Button {
            x,
            y,
            width: button_width,
            height: button_height,
        };
        Self {
            lines,
            width,
            height,
            deny: button(pad),
            approve: button(approve_x),
        }
    }
}

/// The dialog, from first draw to its answer: `Some(true)` for Approve,
/// `Some(false)` for Deny, `None` past the deadline or when stopped.
fn dialog(
    name: &str,
    message: &str,
    (deadline, stop): (Instant, &AtomicBool),
    slot: usize,
) -> Result<Option<bool>, Failure> {
    let (conn, screen) = x11rb::connect(Some(name))?;
    let screen =
        (conn.setup().roots.get(screen).cloned()).ok_or("the display has no such screen")?;
    let font = font(&conn)?;
    let layout = Layout::of(&font, message);
    let colours = Colours::of(&conn, &screen)?;
    let mark = conn.intern_atom(false, DIALOG_MARK)?.reply()?.atom;
    let window = open_window(&conn, &screen, (&layout, &colours, mark), slot)?;
    let gc = conn.generate_id()?;
    conn.create_gc(gc, window, &CreateGCAux::new().font(font.id))?;
    conn.map_window(window)?;
    conn.flush()?;
    let drawing = Drawing {
        conn: &conn,
        window,
        gc,
        font: &font,
        colours: &colours,
    };
    let mut ticks = 0u32;
    loop {
        while let Some(event) = conn.poll_for_event()? {
            match event {
                Event::Expose(e) if e.count == 0 => drawing.draw(&layout)?,
                // A window mapped or raised over the dialog (a session's
                // new window, a tab brought forward) would take the click
                // meant for it: rise over it at once.
                Event::VisibilityNotify(e) if e.state != Visibility::UNOBSCURED => {
                    rise_over_others(&conn, screen.root, (window, mark))?;
                }
                Event::ButtonPress(e) if e.detail == 1 => {
                    if layout.approve.holds(e.event_x, e.event_y) {
                        return Ok(Some(true));
                    }
                    if layout.deny.holds(e.event_x, e.event_y) {
                        return Ok(Some(false));
                    }
                }
                _ => {}
            }
        }
        if stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
            return Ok(None);
        }
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(RAISE_EVERY) {
            rise_over_others(&conn, screen.root, (window, mark))?;
        }
        thread::sleep(TICK);
    }
}

/// Put `window` on top if a window shown above it is not a dialog (has no
/// `mark`): dialogs rise over other windows, never over each other, so two
/// of them (even two servers' on one display) do not keep trading places.
fn rise_over_others(
    conn: &RustConnection,
    root: Window,
    (window, mark): (Window, Atom),
) -> Result<(), Failure> {
    // Children come bottom to top.
    let stack = conn.query_tree(root)?.reply()?.children;
    let above: Vec<Window> = stack
        .into_iter()
        .skip_while(|w| *w != window)
        .skip(1)
        .collect();
    let asked = (above.iter())
        .map(|w| {
            let shown = conn.get_window_attributes(*w)?;
            let marked = conn.get_property(false, *w, mark, AtomEnum::ANY, 0, 1)?;
            Ok((shown, marked))
        })
        .collect::<Result<Vec<_>, ConnectionError>>()?;
    let mut covered = false;
    for (shown, marked) in asked {
        // A window gone meanwhile answers with an error: it covers nothing.
        let viewable = shown
            .reply()
            .is_ok_and(|a| a.map_state == MapState::VIEWABLE);
        let none = Atom::from(AtomEnum::NONE);
        let dialog = marked.reply().is_ok_and(|p| p.type_ != none);
        covered |= viewable && !dialog;
    }
    if covered {
        let on_top = ConfigureWindowAux::new().stack_mode(StackMode::ABOVE);
        conn.configure_window(window, &on_top)?;
        conn.flush()?;
    }
    Ok(())
}

/// The dialog's window, centred across the top of the screen (each one up
/// at once a little lower), above every other and placed by no window
/// manager.
fn open_window(
    conn: &RustConnection,
    screen: &Screen,
    (layout, colours, mark): (&Layout, &Colours, Atom),
    slot: usize,
) -> Result<Window, Failure> {
    let x = (i32::from(screen.width_in_pixels) - i32::from(layout.width)) / 2;
    let y = 48 + 32 * i32::try_from(slot % 8).unwrap_or(0);
    let window = conn.generate_id()?;
    conn.create_window(
        screen.root_depth,
        window,
        screen.root,
        i16::try_from(x.max(0)).unwrap_or(0),
        i16::try_from(y).unwrap_or(48),
        layout.width,
        layout.height,
        BORDER,
        WindowClass::INPUT_OUTPUT,
        0,
        &CreateWindowAux::new()
            .background_pixel(colours.background)
            .border_pixel(colours.text)
            .override_redirect(1)
            .event_mask(
                EventMask::EXPOSURE | EventMask::BUTTON_PRESS | EventMask::VISIBILITY_CHANGE,
            ),
    )?;
    name_as_dialog(conn, window)?;
    conn.change_property32(PropMode::REPLACE, window, mark, AtomEnum::CARDINAL, &[1])?;
    Ok(window)
}

/// Give `window` the dialog's name, the one window lists show.
fn name_as_dialog(conn: &RustConnection, window: Window) -> Result<(), ConnectionError> {
    let (name, string) = (AtomEnum::WM_NAME, AtomEnum::STRING);
    conn.change_property8(PropMode::REPLACE, window, name, string, DIALOG_NAME)?;
    Ok(())
}

/// A Unicode fixed font where the server has one, else the core `fixed`.
fn font(conn: &RustConnection) -> Result<Font, Failure> {
    let unicode = b"-misc-fixed-medium-r-normal--13-120-75-75-c-70-iso10646-1";
    for (name, is_unicode) in [(&unicode[..], true), (&b"fixed"[..], false)] {
        let id = conn.generate_id()?;
        if conn.open_font(id, name)?.check().is_err() {
            continue;
        }
        let info = conn.query_font(id)?.reply()?;
        return Ok(Font {
            id,
            width: info.max_bounds.character_width.max(1),
            ascent: info.font_ascent,
            line: info.font_ascent + info.font_descent + 2,
            unicode: is_unicode,
        });
    }
    Err("the X server has neither a Unicode fixed font nor `fixed`".into())
}

struct Colours {
    background: u32,
    text: u32,
    approve: u32,
    deny: u32,
}

impl Colours {
    fn of(conn: &RustConnection, screen: &Screen) -> Result<Self, Failure> {
        let pixel = |rgb: u32| -> Result<u32, Failure> {
            let channel = |shift: u32| u16::try_from((rgb >> shift) & 0xff).unwrap_or(0) * 257;
            let colour =
                conn.alloc_color(screen.default_colormap, channel(16), channel(8), channel(0))?;
            Ok(colour.reply()?.pixel)
        };
        Ok(Self {
            background: pixel(BACKGROUND_RGB)?,
            text: pixel(TEXT_RGB)?,
            approve: pixel(APPROVE_RGB)?,
            deny: pixel(DENY_RGB)?,
        })
    }
}

struct Drawing<'a> {
    conn: &'a RustConnection,
    window: u32,
    gc: u32,
    font: &'a Font,
    colours: &'a Colours,
}

impl Drawing<'_> {
    fn draw(&self, layout: &Layout) -> Result<(), Failure> {
        let pad = self.font.width * 2;
        let mut y = pad + self.font.ascent;
        for line in &layout.lines {
            self.text(pad, y, line, (self.colours.text, self.colours.background))?;
            y += self.font.line;
        }
        for (button, label, fill) in [
            (layout.deny, "Deny", self.colours.deny),
            (layout.approve, "Approve", self.colours.approve),
        ] {
            let filled = ChangeGCAux::new().foreground(fill);
            self.conn.change_gc(self.gc, &filled)?;
            let rect = Rectangle {
                x: button.x,
                y: button.y,
                width: button.width,
                height: button.height,
            };
            self.conn
                .poly_fill_rectangle(self.window, self.gc, &[rect])?;
            let label_width = self.font.width * i16::try_from(label.len()).unwrap_or(8);
            let x = button.x + (i16::try_from(button.width).unwrap_or(0) - label_width) / 2;
            let y = button.y + i16::try_from(button.height).unwrap_or(0) / 2 + self.font.ascent / 2;
            self.text(x, y, label, (self.colours.background, fill))?;
        }
        self.conn.flush()?;
        Ok(())
    }

    fn text(&self, x: i16, y: i16, line: &str, (fg, bg): (u32, u32)) -> Result<(), Failure> {
        let colours = ChangeGCAux::new().foreground(fg).background(bg);
        self.conn.change_gc(self.gc, &colours)?;
        if self.font.unicode {
            let chars: Vec<Char2b> = line
                .chars()
                .map(|c| u16::try_from(u32::from(c)).unwrap_or(u16::from(b'?')))
                .map(|c| Char2b {
                    byte1: (c >> 8) as u8,
                    byte2: (c & 0xff) as u8,
                })
                .collect();
            self.conn.image_text16(self.window, self.gc, x, y, &chars)?;
        } else {
            let bytes: Vec<u8> = line
                .chars()
                .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                .collect();
            self.conn.image_text8(self.window, self.gc, x, y, &bytes)?;
        }
        Ok(())
    }
}

/// `message` in lines of at most `columns` characters, broken at spaces
/// where a line has one.
fn wrap(message: &str, columns: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in message.lines() {
        let mut line = String::new();
        for word in paragraph.split(' ') {
            let fits = line.chars().count() + 1 + word.chars().count() <= columns;
            if !line.is_empty() && !fits {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
            while line.chars().count() > columns {
                let rest: String = line.chars().skip(columns).collect();
                lines.push(line.chars().take(columns).collect());
                line = rest;
            }
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
#[path = "display_tests.rs"]
mod tests;
