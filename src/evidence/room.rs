//! Room in the image store: past its bound, the oldest images go, each
//! named first in a synced `images_dropped` record, so `audit verify` knows
//! a missing image was dropped and not taken. A record that cannot be
//! written deletes nothing (the new image is then not kept).

use serde_json::json;

use crate::obs::journal::Journal;

/// Why no room was made.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoRoom {
    #[error("the store cannot be listed: {0}")]
    Unlisted(std::io::Error),
    #[error("the record of the images to drop could not be written: {0}")]
    Unrecorded(audit::AuditError),
}

/// Free at least `bytes` in `store` by dropping its oldest images; the
/// bytes freed, or why nothing was.
pub(super) fn make_room(
    journal: &Journal,
    store: &audit::ImageStore,
    bytes: u64,
    bound: u64,
) -> Result<u64, NoRoom> {
    let victims = store.oldest(bytes).map_err(NoRoom::Unlisted)?;
    if victims.is_empty() {
        return Ok(0);
    }
    let mut record = audit::Event::new(audit::Phase::Lifecycle, crate::obs::journal::new_call_id());
    record.outcome = Some(audit::Outcome::ImagesDropped);
    record.reason = Some(format!(
        "the evidence store keeps at most {bound} bytes: its oldest images were dropped"
    ));
    record.evidence = Some(json!({
        "dropped": victims.iter().map(|(digest, _)| digest).collect::<Vec<_>>(),
    }));
    journal
        .append_unattached_synced(record)
        .map_err(NoRoom::Unrecorded)?;
    let mut freed = 0;
    for (digest, size) in victims {
        match store.remove(&digest) {
            Ok(()) => freed += size,
            // Recorded as dropped and still there: kept, and no alarm.
            Err(e) => tracing::warn!(error = %e, %digest, "a dropped image could not be deleted"),
        }
    }
    Ok(freed)
}

#[cfg(test)]
#[path = "room_tests.rs"]
mod tests;
