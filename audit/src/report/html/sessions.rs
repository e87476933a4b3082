//! One section per session: its counts (as `counts` defines them, so they
//! add up to the summary's), where it went, and a button that shows its
//! rows in the timeline (rows are listed once, there).

use std::{collections::BTreeMap, fmt::Write as _};

use super::esc;
use crate::report::{Destinations, Report, SessionSummary, short_time};

impl Report {
    pub(super) fn sessions_html(&self, o: &mut String) {
        o.push_str("<h2 id=\"sessions\">Sessions</h2>");
        for (session, s) in &self.sessions {
            let name = if session.is_empty() {
                "(none)".into()
            } else {
                esc(session)
            };
            let _ = write!(
                o,
                "<details class=\"session\" open data-session=\"{}\"><summary><h3 class=\"inline\">session {name}</h3> \
                 <span class=\"muted\">",
                esc(session),
            );
            counts(o, s);
            let _ = write!(
                o,
                "; {} alert(s), {} warning(s); {} .. {}</span></summary>",
                s.alerts,
                s.warnings,
                esc(&short_time(&s.first)),
                esc(&short_time(&s.last)),
            );
            destinations(o, &s.destinations, session);
            self.replay(o, session);
            let _ = write!(
                o,
                "<div class=\"pick\"><button type=\"button\" data-pick=\"{}\">show its rows in the timeline</button></div>",
                esc(session)
            );
            o.push_str("</details>");
        }
    }
}

/// `N call(s): A allowed, D denied; R refused while running; G gate
/// refusal(s); refusals N`, each number tagged with what it counts.
fn counts(o: &mut String, s: &SessionSummary) {
    let _ = write!(
        o,
        "<span data-count=\"calls\">{}</span> call(s): <span data-count=\"allowed\">{}</span> allowed, \
         <span data-count=\"denied\">{}</span> denied; <span data-count=\"refused\">{}</span> refused while running; \
         <span data-count=\"gate_refusals\">{}</span> gate refusal(s); refusals <span data-count=\"refusals\">{}</span>",
        s.calls, s.allowed, s.denied, s.refused, s.gate_refusals, s.refusals
    );
}

/// The origins reached and refused, each with its count. `of` names whose
/// they are (a session, or `all`), for the page's tests and filters.
pub(super) fn destinations(o: &mut String, d: &Destinations, of: &str) {
    let _ = write!(o, "<div class=\"where\" data-of=\"{}\">", esc(of));
    for (which, map) in [("reached", &d.reached), ("refused", &d.refused)] {
        let n: u64 = map.values().sum();
        let _ = write!(
            o,
            "<div class=\"{which}\" data-where=\"{which}\"><span class=\"label\">destinations {which}</span> \
             <span class=\"n\" data-count=\"{which}\">{n}</span>"
        );
        list(o, map);
        o.push_str("</div>");
    }
    o.push_str("</div>");
}

fn list(o: &mut String, map: &BTreeMap<String, u64>) {
    if map.is_empty() {
        o.push_str(" <span class=\"muted\">none</span>");
        return;
    }
    o.push_str("<ul>");
    for (origin, n) in map {
        let _ = write!(
            o,
            "<li data-origin=\"{0}\" data-count=\"{n}\"><code class=\"wrap\">{0}</code> <span class=\"muted\">×{n}</span></li>",
            esc(origin)
        );
    }
    o.push_str("</ul>");
}
