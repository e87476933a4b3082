//! Where files written for an agent (screenshots) go.
//!
//! agent-browser writes wherever it is told, relative paths resolve against the
//! daemon's cwd, and `../` is not checked. So browser-shell always passes an
//! absolute path it chose or vetted: under `<output-dir>/<daemon-name>/`, with
//! no `..`, no symlink on the way, and an image extension.

use std::{
    fs,
    os::unix::fs::DirBuilderExt,
    path::{Component, Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

use crate::{
    refusal::{Refusal, Rule},
    session_id::SessionId,
};

/// Resolve the screenshot target for `session`, creating its directory.
///
/// `requested` is a name relative to the session's directory (`shot.png`,
/// `run1/shot.png`) or an absolute path inside it; `None` generates a name.
pub(crate) fn resolve(
    root: &Path,
    session: &SessionId,
    requested: Option<&str>,
) -> Result<PathBuf, Refusal> {
    let dir = root.join(session.daemon_name());
    let relative = match requested {
        None => PathBuf::from(generated_name()),
        Some(name) => relative_inside(&dir, name)?,
    };
    let target = dir.join(&relative);
    let parent = target.parent().unwrap_or(&dir);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(|e| {
            Refusal::new(
                Rule::OutputPath,
                format!("cannot create the output directory: {e}"),
            )
        })?;
    // Every component from the root down must be a real directory: a symlink
    // planted in the output tree must not redirect the write elsewhere.
    let canonical_root = root
        .canonicalize()
        .map_err(|e| Refusal::new(Rule::OutputPath, format!("output dir unusable: {e}")))?;
    let canonical_parent = parent
        .canonicalize()
        .map_err(|e| Refusal::new(Rule::OutputPath, format!("output dir unusable: {e}")))?;
    if !canonical_parent.starts_with(canonical_root.join(session.daemon_name())) {
        return Err(Refusal::new(
            Rule::OutputPath,
            "the output path leaves the session's output directory (symlink?)",
        ));
    }
    match fs::symlink_metadata(&target) {
        Ok(meta) if !meta.file_type().is_file() => {
            return Err(Refusal::new(
                Rule::OutputPath,
                "the output path exists and is not a regular file",
            ));
        }
        _ => {}
    }
    Ok(canonical_parent.join(target.file_name().unwrap_or_default()))
}

/// Bytes of screenshots a session, and all sessions together, may keep.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quota {
    pub per_session: u64,
    pub total: u64,
    /// The largest file one call can write (the child's RLIMIT_FSIZE).
    pub max_file: u64,
}

/// Can the quotas hold one more file of up to `max_file` bytes at all (with
/// everything older deleted)? If not, the write is refused before it runs.
pub(crate) fn check_room(quota: &Quota) -> Result<(), Refusal> {
    let too_small = |which: &str, limit: u64| {
        Refusal::new(
            Rule::OutputQuota,
            format!(
                "the {which} output quota ({limit} bytes) cannot hold one more screenshot of up to {} bytes",
                quota.max_file
            ),
        )
    };
    if quota.max_file > quota.per_session {
        return Err(too_small("per-session", quota.per_session));
    }
    if quota.max_file > quota.total {
        return Err(too_small("total", quota.total));
    }
    Ok(())
}

/// Make room for one more file in `session_dir` before it is written (on a
/// quota [`check_room`] accepted): the oldest files go first, in the session
/// and then across all sessions, until a file of `max_file` bytes fits both
/// quotas. Returns how many were deleted. The pipeline calls it only once
/// the call's intent is durable: deleting is a side effect of the call.
pub(crate) fn make_room(root: &Path, session_dir: &Path, quota: &Quota) -> usize {
    let per_session = quota.per_session.saturating_sub(quota.max_file);
    let total = quota.total.saturating_sub(quota.max_file);
    prune(session_dir, per_session) + prune(root, total)
}

/// Delete the oldest regular files under `dir` until at most `keep` bytes
/// remain; returns how many were deleted. Symlinks are neither followed nor
/// counted.
fn prune(dir: &Path, keep: u64) -> usize {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                let modified = meta.modified().unwrap_or(UNIX_EPOCH);
                files.push((modified, meta.len(), entry.path()));
            }
        }
    }
    let mut used: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    let mut removed = 0;
    for (_, len, path) in files {
        if used <= keep {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            used = used.saturating_sub(len);
            removed += 1;
        }
    }
    removed
}

fn relative_inside(dir: &Path, name: &str) -> Result<PathBuf, Refusal> {
    let path = Path::new(name);
    let relative = if path.is_absolute() {
        path.strip_prefix(dir).map_err(|_| {
            Refusal::new(
                Rule::OutputPath,
                format!(
                    "screenshots are saved under {}; give a file name or a path inside it",
                    dir.display()
                ),
            )
        })?
    } else {
        path
    };
    let mut clean = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::new(
                    Rule::OutputPath,
                    "`..` is not allowed in output paths",
                ));
            }
        }
    }
    let lower = clean.to_string_lossy().to_ascii_lowercase();
    if !lower.ends_with(".png") {
        return Err(Refusal::new(
            Rule::OutputPath,
            "screenshot files must end in .png (agent-browser always writes PNG)",
        ));
    }
    Ok(clean)
}

fn generated_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("screenshot-{ms}-{}-{n}.png", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> SessionId {
        SessionId::parse(id).unwrap()
    }

    #[test]
    fn generated_and_named_files_land_in_the_session_dir() {
        let root = tempfile::tempdir().unwrap();
        let s = session("u1");
        let dir = root.path().canonicalize().unwrap().join("u1");
        let generated = resolve(root.path(), &s, None).unwrap();
        assert_eq!(generated.parent().unwrap(), dir);
        assert!(generated.to_string_lossy().ends_with(".png"));
        assert_eq!(
            resolve(root.path(), &s, Some("a/b.png")).unwrap(),
            dir.join("a/b.png")
        );
        let abs = root.path().join("u1/c.png");
        assert_eq!(
            resolve(root.path(), &s, abs.to_str()).unwrap(),
            dir.join("c.png")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let s = session("u1");
        for bad in [
            "../x.png",
            "a/../../x.png",
            "/etc/x.png",
            "x.txt",
            "/tmp/x.png",
        ] {
            assert_eq!(
                resolve(root.path(), &s, Some(bad)).unwrap_err().rule,
                "output.path",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_planted_symlink_cannot_redirect_the_write() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let s = session("u1");
        fs::create_dir_all(root.path().join("u1")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.path().join("u1/link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("u1/p.png")).unwrap();
        assert_eq!(
            resolve(root.path(), &s, Some("link/x.png"))
                .unwrap_err()
                .rule,
            "output.path"
        );
        assert_eq!(
            resolve(root.path(), &s, Some("p.png")).unwrap_err().rule,
            "output.path"
        );
    }

    #[test]
    fn the_oldest_files_go_first_until_one_more_fits() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("s1");
        fs::create_dir_all(&dir).unwrap();
        for i in 0..5 {
            fs::write(dir.join(format!("{i}.png")), vec![0u8; 100]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(15));
        }
        let quota = Quota {
            per_session: 350,
            total: 10_000,
            max_file: 100,
        };
        check_room(&quota).unwrap();
        assert_eq!(make_room(root.path(), &dir, &quota), 3);
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["3.png", "4.png"]);
    }

    #[test]
    fn a_quota_smaller_than_one_file_refuses_before_the_write() {
        let quota = Quota {
            per_session: 50,
            total: 10_000,
            max_file: 100,
        };
        let err = check_room(&quota).unwrap_err();
        assert_eq!(err.rule, "limits.output_quota");
    }

    #[test]
    fn a_dotted_session_id_cannot_climb_out() {
        let root = tempfile::tempdir().unwrap();
        let path = resolve(root.path(), &session(".."), None).unwrap();
        assert!(path.starts_with(root.path().canonicalize().unwrap()));
    }
}
