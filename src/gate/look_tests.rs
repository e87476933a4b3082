use serde_json::json;

use super::*;

/// A DOM snapshot shaped like Chromium's: a form with a filled field, a
/// textarea, some text, and a frame whose document is elsewhere.
fn snapshot() -> Value {
    json!({
        "strings": ["http://127.0.0.1/form", "Form page", "#text", "INPUT", "hunter2", "Query",
                    "TEXTAREA", "notes", "IFRAME"],
        "documents": [{
            "documentURL": 0, "title": 1,
            "nodes": {
                "nodeName": [2, 3, 6, 8],
                "inputValue": {"index": [1], "value": [4]},
                "textValue": {"index": [2], "value": [7]},
                "contentDocumentIndex": {"index": [], "value": []}
            },
            "layout": {
                "nodeIndex": [0, 1, 2],
                "bounds": [[8, 80, 40, 17], [48, 80, 177, 21], [8, 120, 200, 40]],
                "text": [5, -1, -1]
            }
        }]
    })
}

#[test]
fn a_look_names_the_current_history_entry() {
    let history = json!({"currentIndex": 1, "entries": [
        {"url": "http://127.0.0.1/form", "title": "Form page"},
        {"url": "http://127.0.0.1/submit?q=x", "title": "Submitted"},
    ]});
    let look = current_entry(&history).unwrap();
    assert_eq!(
        (look.url.as_str(), look.title.as_str()),
        ("http://127.0.0.1/submit?q=x", "Submitted")
    );
    assert!(current_entry(&json!({"currentIndex": 2, "entries": []})).is_none());
}

#[test]
fn fields_are_placed_in_the_scrolled_viewport() {
    let read = read_dom(&snapshot(), (0.0, 50.0));
    assert_eq!(
        read.fields,
        vec![
            Field {
                value: "hunter2".into(),
                rect: Some([48.0, 30.0, 177.0, 21.0])
            },
            Field {
                value: "notes".into(),
                rect: Some([8.0, 70.0, 200.0, 40.0])
            },
        ]
    );
    assert_eq!(read.texts, vec!["Query".to_owned()]);
}

#[test]
fn a_frame_without_its_document_is_unseen() {
    assert_eq!(read_dom(&snapshot(), (0.0, 0.0)).unseen_frames, 1);
    let mut loaded = snapshot();
    loaded["documents"][0]["nodes"]["contentDocumentIndex"] = json!({"index": [3], "value": [1]});
    assert_eq!(read_dom(&loaded, (0.0, 0.0)).unseen_frames, 0);
}

#[test]
fn a_field_in_a_framed_document_has_no_place() {
    let mut two = snapshot();
    let main = two["documents"][0].clone();
    two["documents"] = json!([main.clone(), main]);
    let read = read_dom(&two, (0.0, 0.0));
    assert_eq!(read.fields.len(), 4);
    assert!(read.fields[2].rect.is_none() && read.fields[3].rect.is_none());
}

#[test]
fn a_malformed_snapshot_reads_as_nothing() {
    assert_eq!(
        read_dom(&json!({"documents": "x"}), (0.0, 0.0)),
        DomRead::default()
    );
}
