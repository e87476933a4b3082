//! The plain-text report: the verdict first, then files, time range,
//! servers, policies, the timeline, each session, totals. Every value from
//! the log goes through [`printable`], so none can start a line of its own.

use std::{borrow::Cow, collections::BTreeMap, fmt::Write as _};

use super::{
    Report, Row, SessionSummary, Trust, arg_text, build::short, model::Server, printable,
    short_time,
};

impl Report {
    /// A plain-text report.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let p = |s: &str| printable(s).into_owned();
        self.integrity_lines(&mut out);
        for s in &self.sources {
            let _ = writeln!(
                out,
                "file: {} ({} bytes, sha256 {})",
                p(&s.file),
                s.bytes,
                s.sha256
            );
        }
        if let Some((first, last)) = &self.time_range {
            let _ = writeln!(
                out,
                "time range: {} .. {}",
                p(&short_time(first)),
                p(&short_time(last))
            );
        }
        let _ = writeln!(out, "servers:");
        for s in &self.servers {
            let _ = writeln!(out, "  {}", p(&server_line(s)));
        }
        self.policy_lines(&mut out);
        // Each session's summary, then every row once, in log order (`--session`
        // selects one session's rows).
        for session in self.sessions.keys() {
            let name = if session.is_empty() {
                Cow::Borrowed("(none)")
            } else {
                printable(session)
            };
            let _ = writeln!(out, "\nsession {name}");
            if let Some(summary) = self.sessions.get(session) {
                session_summary(&mut out, summary);
            }
        }
        let _ = writeln!(out, "\ntimeline (all sessions, log order):");
        header(&mut out);
        for row in &self.timeline {
            self.row(&mut out, row);
        }
        self.totals_lines(&mut out);
        out
    }

    /// What verification found, and what the reader may trust.
    fn integrity_lines(&self, out: &mut String) {
        let p = |s: &str| printable(s).into_owned();
        match &self.integrity {
            Some(i) => {
                let _ = writeln!(out, "verification: {}", p(&i.headline()));
                for line in &i.lines {
                    let _ = writeln!(out, "  {}", p(line));
                }
                match i.trust {
                    Trust::NotIntact => {
                        let _ = writeln!(
                            out,
                            "  THE LOG IS NOT INTACT: rows marked UNVERIFIED are at or after the break"
                        );
                    }
                    Trust::Unvouched => {
                        let _ = writeln!(
                            out,
                            "  THE LOG'S END IS UNVOUCHED: records may have been removed from the end"
                        );
                    }
                    Trust::Intact => {}
                }
            }
            None => {
                let _ = writeln!(out, "verification: NOT VERIFIED");
            }
        }
    }

    /// Every policy that decided a call, where it came from, and how many.
    fn policy_lines(&self, out: &mut String) {
        let p = |s: &str| printable(s).into_owned();
        let _ = writeln!(out, "policies:");
        for policy in &self.policies {
            let source = match (&policy.file, &policy.source) {
                (Some(file), _) => format!(
                    "file {file} (file sha256 {})",
                    policy.file_sha256.as_deref().unwrap_or("-")
                ),
                (None, Some(source)) => source.clone(),
                (None, None) => "content not in these files".into(),
            };
            let _ = writeln!(
                out,
                "  {}: {}; decided {} call(s)/refusal(s)",
                p(&policy.sha256),
                p(&source),
                policy.decided
            );
            for event in &policy.events {
                let _ = writeln!(out, "    {}", p(event));
            }
        }
    }

    /// The totals, the refusals by rule and where every session went.
    fn totals_lines(&self, out: &mut String) {
        let ms = |d: Option<f64>| d.map_or_else(|| "-".into(), |d| format!("{d:.1}"));
        let _ = writeln!(out, "\ntotals: {}", pairs(&self.totals));
        let _ = writeln!(
            out,
            "refusals by rule ({} = {} denied + {} refused while running + {} by the gate): {}",
            self.total("refusals"),
            self.total("denied"),
            self.total("refused"),
            self.total("gate_refusals"),
            pairs(&self.refusals_by_rule)
        );
        let _ = writeln!(
            out,
            "destinations: {} reached {}; {} refused {}",
            self.total("reached"),
            origins(&self.destinations.reached),
            self.total("refused_destinations"),
            origins(&self.destinations.refused)
        );
        let _ = writeln!(
            out,
            "allowed-call duration: p50 {} ms, p95 {} ms",
            ms(self.p50_ms),
            ms(self.p95_ms)
        );
    }

    fn row(&self, out: &mut String, r: &Row) {
        let p = |s: &str| printable(s).into_owned();
        let seq = r.seq.map_or_else(|| "-".into(), |s| s.to_string());
        let result = match &r.flag {
            Some(flag) => flag.label.clone(),
            None => match (r.kind.as_str(), &r.outcome) {
                ("call", Some(o)) => format!("{} {o}", r.verdict),
                (_, Some(o)) => o.clone(),
                _ => r.verdict.clone(),
            },
        };
        let result = if self.unverified(r) {
            format!("UNVERIFIED {result}")
        } else {
            result
        };
        let exit = r.exit_code.map_or_else(|| "-".into(), |e| e.to_string());
        let ms = r
            .duration_ms
            .map_or_else(|| "-".into(), |d| format!("{d:.1}"));
        // `arg_text` is printable already.
        let command = match r.kind.as_str() {
            "server" | "session" | "rotation" => format!("[{} {}]", p(&r.kind), p(&r.subcommand)),
            _ if r.argv.is_empty() => format!("[{}]", p(&r.kind)),
            _ => r.argv.iter().map(arg_text).collect::<Vec<_>>().join(" "),
        };
        let _ = writeln!(
            out,
            "  {seq:>6} {:<24} {:<14} {:<22} {exit:>4} {ms:>9}  {command}",
            p(&short_time(&r.time)),
            p(if r.session.is_empty() {
                "-"
            } else {
                &r.session
            }),
            p(&result),
        );
        let pad = "         ";
        if r.rule.is_some() || r.reason.is_some() {
            let _ = writeln!(
                out,
                "{pad}{}{}",
                r.rule
                    .as_deref()
                    .map_or_else(String::new, |rule| format!("[{}] ", p(rule))),
                p(r.reason.as_deref().unwrap_or(""))
            );
        }
        if let Some(page) = &r.page_url {
            let _ = writeln!(out, "{pad}page after: {}", p(page));
        }
        let digests: Vec<String> = digests(r)
            .into_iter()
            .map(|(label, value, note)| {
                let value = if label == "policy" {
                    short(&value)
                } else {
                    value
                };
                format!("{label} {value}{note}")
            })
            .collect();
        if !digests.is_empty() {
            let _ = writeln!(out, "{pad}{}", p(&digests.join("  ")));
        }
    }
}

impl Report {
    /// A total, 0 when none was counted.
    pub(super) fn total(&self, key: &str) -> u64 {
        self.totals.get(key).copied().unwrap_or(0)
    }
}

/// A session's counts and where it went, under its heading.
fn session_summary(out: &mut String, s: &SessionSummary) {
    let _ = writeln!(
        out,
        "  {} call(s): {} allowed, {} denied; {} refused while running; {} gate refusal(s); \
         refusals {}; {} alert(s), {} warning(s)",
        s.calls, s.allowed, s.denied, s.refused, s.gate_refusals, s.refusals, s.alerts, s.warnings
    );
    let reached: u64 = s.destinations.reached.values().sum();
    let refused: u64 = s.destinations.refused.values().sum();
    let _ = writeln!(
        out,
        "  reached {reached}: {}",
        origins(&s.destinations.reached)
    );
    let _ = writeln!(
        out,
        "  refused {refused}: {}",
        origins(&s.destinations.refused)
    );
}

/// `origin ×n, origin ×n`, or `-`.
fn origins(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(origin, n)| format!("{} ×{n}", printable(origin)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn header(out: &mut String) {
    let _ = writeln!(
        out,
        "  {:>6} {:<24} {:<14} {:<22} {:>4} {:>9}  command",
        "seq", "time", "session", "result", "exit", "ms"
    );
}

/// The row's digests: (label, digest, note), e.g. (`stdout sha256`,
/// hex, ` (450 B)`), `image attached sha256`, `argv_mac`, `policy`.
pub(super) fn digests(r: &Row) -> Vec<(String, String, String)> {
    let bytes = |b: Option<u64>| b.map_or_else(String::new, |b| format!(" ({b} B)"));
    let mut out = Vec::new();
    if let Some(sha) = &r.reply_stdout_sha256 {
        out.push((
            "stdout sha256".into(),
            sha.clone(),
            bytes(r.reply_stdout_bytes),
        ));
    }
    if let Some(action) = &r.image_action {
        out.push((
            format!("image {action} sha256"),
            r.image_sha256.clone().unwrap_or_else(|| "-".into()),
            bytes(r.image_bytes),
        ));
    }
    if let Some(mac) = &r.argv_mac {
        out.push(("argv_mac".into(), mac.clone(), String::new()));
    }
    if let Some(policy) = &r.policy_sha256 {
        out.push(("policy".into(), policy.clone(), String::new()));
    }
    out
}

fn server_line(s: &Server) -> String {
    let mut line = format!(
        "pid {} on {}: {}",
        s.pid.map_or_else(|| "?".into(), |p| p.to_string()),
        s.host,
        s.producer.as_deref().unwrap_or("?")
    );
    if let Some(sha) = &s.sha256 {
        let _ = write!(line, " (sha256 {sha})");
    }
    if let Some(v) = &s.agent_browser_version {
        let _ = write!(
            line,
            "; {v} at {} (sha256 {})",
            s.agent_browser_path.as_deref().unwrap_or("?"),
            s.agent_browser_sha256.as_deref().unwrap_or("?")
        );
    }
    if let Some(t) = &s.trampoline_path {
        let _ = write!(
            line,
            "; trampoline {t} (sha256 {})",
            s.trampoline_sha256.as_deref().unwrap_or("?")
        );
    }
    if let Some(c) = &s.confinement {
        let _ = write!(line, "; {c}");
    }
    if let Some(otlp) = s.otlp {
        let _ = write!(line, "; otlp {}", if otlp { "on" } else { "off" });
    }
    match &s.started {
        Some(t) => {
            let _ = write!(line, "; started {}", short_time(t));
        }
        None => {
            let _ = write!(
                line,
                "; no start record (first record {})",
                short_time(&s.first)
            );
        }
    }
    match &s.stopped {
        Some(t) => {
            let _ = write!(
                line,
                "; stopped {} ({}), {} call(s) served",
                short_time(t),
                s.stop_reason.as_deref().unwrap_or("-"),
                s.calls_served.map_or_else(|| "?".into(), |c| c.to_string())
            );
        }
        None => {
            let _ = write!(
                line,
                "; no stop record (last record {})",
                short_time(&s.last)
            );
        }
    }
    line
}

/// `key=value key=value …`.
fn pairs(map: &BTreeMap<String, u64>) -> String {
    map.iter()
        .map(|(k, v)| format!("{}={v}", printable(k)))
        .collect::<Vec<_>>()
        .join(" ")
}
