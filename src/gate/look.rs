//! A look at a session's tab, for the evidence of what its actions did
//! (`crate::evidence`): the document's URL and title and, when asked, a
//! screenshot with what the page showed around it.
//!
//! Everything is read on the warden's own connection, through the DOM
//! snapshot and the screenshot Chromium takes itself: no script runs in the
//! page, so the page cannot hide a field's value from the look or notice
//! it. A look ([`look`]) waits for a navigation the action started to
//! commit (`loading`), for a few seconds at most, so "after" is where the
//! action went, and reads the tab's current history entry (its cost does
//! not grow with the page). The screenshot ([`shoot`]) reads the DOM just
//! before and just after it, so a field that moves meanwhile is masked
//! where it was and where it went.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};

use super::{GateError, Shared};
use crate::{
    chromium_ids::TargetId,
    daemons::{DomRead, Field, Named, PageLook, Shot},
    session_id::DaemonName,
};

/// How long a look waits for a navigation or load the action started.
const SETTLE_WITHIN: Duration = Duration::from_secs(3);

/// How often, and how far apart, a look asks again for a tab between two
/// documents (a commit swaps them in a few milliseconds).
const BETWEEN_DOCUMENTS_TRIES: u32 = 20;
const BETWEEN_DOCUMENTS_PAUSE: Duration = Duration::from_millis(5);

/// How long the screenshot may take: past it, no image is kept.
const SHOT_WITHIN: Duration = Duration::from_secs(1);

/// Most elements of one role and name placed by a look.
const MAX_PLACES: usize = 16;

/// One command to `target` on the warden's connection.
async fn call(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
    method: &'static str,
    params: Value,
) -> Result<Value, GateError> {
    shared
        .warden
        .page_call(shared, target, daemon, method, params)
        .await
}

/// The DOM of `target`, its fields placed in the viewport as it is now.
async fn read(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
) -> Result<(DomRead, f64), GateError> {
    let snapshot = call(
        shared,
        daemon,
        target,
        "DOMSnapshot.captureSnapshot",
        json!({"computedStyles": []}),
    );
    let metrics = call(shared, daemon, target, "Page.getLayoutMetrics", json!({}));
    let (snapshot, metrics) = tokio::try_join!(snapshot, metrics)?;
    let viewport = metrics
        .get("cssVisualViewport")
        .ok_or("Chromium gave no viewport")?;
    let number = |key: &str| viewport.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let read = read_dom(&snapshot, (number("pageX"), number("pageY")));
    Ok((read, number("clientWidth")))
}

/// Look at `target` (a tab of `daemon`'s) once a navigation the action
/// started has committed (or the wait is over): its current history entry,
/// whatever the page's size.
pub(super) async fn look(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
    element: Option<Named<'_>>,
) -> Result<PageLook, GateError> {
    let _ = shared.warden.quiet(shared, target, SETTLE_WITHIN).await?;
    let history = history(shared, daemon, target).await?;
    let mut look = current_entry(&history)
        .ok_or_else(|| GateError::from("the tab has no current history entry"))?;
    if let Some(element) = element {
        look.places = places(shared, daemon, target, element).await?;
    }
    Ok(look)
}

/// `target`'s navigation history, asked again while the commit that ended
/// the wait for quiet is still swapping the tab's document.
async fn history(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
) -> Result<Value, GateError> {
    let mut tries = 0;
    loop {
        let method = "Page.getNavigationHistory";
        match call(shared, daemon, target, method, json!({})).await {
            Err(e) if e.is_between_documents() && tries < BETWEEN_DOCUMENTS_TRIES => {
                tries += 1;
                tokio::time::sleep(BETWEEN_DOCUMENTS_PAUSE).await;
            }
            answer => return answer,
        }
    }
}

/// Where the elements of `role` named `name` are: found through Chromium's
/// accessibility tree (as the snapshot named them), placed by their border
/// box, in document order.
async fn places(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
    (role, name): Named<'_>,
) -> Result<Vec<[i64; 4]>, GateError> {
    let document = call(
        shared,
        daemon,
        target,
        "DOM.getDocument",
        json!({"depth": 0}),
    )
    .await?;
    let root = document
        .pointer("/root/backendNodeId")
        .and_then(Value::as_i64)
        .ok_or("Chromium gave no document")?;
    let query = json!({"backendNodeId": root, "accessibleName": name, "role": role});
    let found = call(shared, daemon, target, "Accessibility.queryAXTree", query).await?;
    let nodes = found.get("nodes").and_then(Value::as_array);
    let mut places = Vec::new();
    for node in nodes.into_iter().flatten().take(MAX_PLACES) {
        let Some(id) = node.get("backendDOMNodeId").and_then(Value::as_i64) else {
            continue;
        };
        // An element that is not rendered has no box: it is nowhere.
        let Ok(model) = call(
            shared,
            daemon,
            target,
            "DOM.getBoxModel",
            json!({"backendNodeId": id}),
        )
        .await
        else {
            continue;
        };
        let quad: Vec<f64> = model
            .pointer("/model/border")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .collect();
        if let Some(place) = bounds(&quad) {
            places.push(place);
        }
    }
    Ok(places)
}

/// The rounded bounding box (x, y, width, height) of a quad's four points.
fn bounds(quad: &[f64]) -> Option<[i64; 4]> {
    if quad.len() != 8 {
        return None;
    }
    let xs = || quad.iter().step_by(2).copied();
    let ys = || quad.iter().skip(1).step_by(2).copied();
    let (left, top) = (xs().fold(f64::MAX, f64::min), ys().fold(f64::MAX, f64::min));
    let (right, bottom) = (xs().fold(f64::MIN, f64::max), ys().fold(f64::MIN, f64::max));
    let round = |v: f64| v.round() as i64;
    Some([
        round(left),
        round(top),
        round(right - left),
        round(bottom - top),
    ])
}

/// A screenshot of `target`'s viewport, and its DOM read just before and
/// just after.
pub(super) async fn shoot(
    shared: &Arc<Shared>,
    daemon: &DaemonName,
    target: &TargetId,
) -> Result<Shot, GateError> {
    let (before, _) = read(shared, daemon, target).await?;
    let capture = call(
        shared,
        daemon,
        target,
        "Page.captureScreenshot",
        // Less of Chromium's CPU for a larger PNG, which the server decodes
        // and shrinks anyway (docs/benchmarks.md, "Evidence per action").
        // Not a clipped, scaled capture: Chromium may draw that at the old
        // scale, and the masks would miss.
        json!({"format": "png", "optimizeForSpeed": true}),
    );
    let taken = tokio::time::timeout(SHOT_WITHIN, capture)
        .await
        .map_err(|_| GateError::Failed(format!("no screenshot within {SHOT_WITHIN:?}")))??;
    let (after, css_width) = read(shared, daemon, target).await?;
    let png = taken
        .get("data")
        .and_then(Value::as_str)
        .ok_or("the screenshot has no data")?;
    let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, png)
        .map_err(|e| GateError::Failed(format!("the screenshot is not base64: {e}")))?;
    Ok(Shot {
        png,
        css_width,
        reads: [before, after],
    })
}

/// The URL and title of a navigation history's current entry.
fn current_entry(history: &Value) -> Option<PageLook> {
    let index = usize::try_from(history.get("currentIndex")?.as_i64()?).ok()?;
    let entry = history.get("entries")?.as_array()?.get(index)?;
    let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::to_owned);
    Some(PageLook {
        url: text("url")?,
        title: text("title").unwrap_or_default(),
        places: Vec::new(),
    })
}

/// The fields, texts and unseen frames of a DOM snapshot; the main
/// document's fields placed in the viewport scrolled by `scroll`.
pub(super) fn read_dom(snapshot: &Value, scroll: (f64, f64)) -> DomRead {
    let empty = Vec::new();
    let strings = snapshot
        .get("strings")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let string = |index: &Value| {
        let index = usize::try_from(index.as_i64()?).ok()?;
        strings.get(index)?.as_str()
    };
    let mut read = DomRead::default();
    let documents = snapshot.get("documents").and_then(Value::as_array);
    for (number, document) in documents.into_iter().flatten().enumerate() {
        let nodes = document.get("nodes").unwrap_or(&Value::Null);
        let layout = document.get("layout").unwrap_or(&Value::Null);
        let column = |table: &Value, key: &str| -> Vec<Value> {
            table
                .get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (laid_out, bounds, texts) = (
            column(layout, "nodeIndex"),
            column(layout, "bounds"),
            column(layout, "text"),
        );
        read.texts
            .extend(texts.iter().filter_map(string).map(str::to_owned));
        let rect_of = |node: i64| {
            let at = laid_out.iter().position(|n| n.as_i64() == Some(node))?;
            let b: Vec<f64> = bounds
                .get(at)?
                .as_array()?
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            (b.len() == 4 && number == 0).then(|| [b[0] - scroll.0, b[1] - scroll.1, b[2], b[3]])
        };
        for key in ["inputValue", "textValue"] {
            let table = nodes.get(key).unwrap_or(&Value::Null);
            let pairs = column(table, "index")
                .into_iter()
                .zip(column(table, "value"));
            for (node, value) in pairs {
                let Some(value) = string(&value).filter(|v| !v.is_empty()) else {
                    continue;
                };
                read.fields.push(Field {
                    value: value.to_owned(),
                    rect: node.as_i64().and_then(rect_of),
                });
            }
        }
        let names = column(nodes, "nodeName");
        let loaded = column(
            nodes.get("contentDocumentIndex").unwrap_or(&Value::Null),
            "index",
        );
        read.unseen_frames += names
            .iter()
            .enumerate()
            .filter(|(_, name)| matches!(string(name), Some("IFRAME" | "FRAME")))
            .filter(|(i, _)| !loaded.iter().any(|l| l.as_u64() == Some(*i as u64)))
            .count();
    }
    read
}

#[cfg(test)]
#[path = "look_tests.rs"]
mod tests;
