//! Screenshot paths and quotas, and the server's own file operations in the
//! output dir against a child that plants or swaps symlinks there.

use std::{
    fs,
    os::unix::fs::symlink,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use rustix::fs::{RenameFlags, renameat_with};

use super::*;

fn session(id: &str) -> SessionId {
    SessionId::parse(id).unwrap()
}

/// A 100-byte file older than anything a test writes after it.
fn old_file(path: &Path) {
    fs::write(path, [0u8; 100]).unwrap();
    let file = fs::File::options().write(true).open(path).unwrap();
    file.set_modified(UNIX_EPOCH + Duration::from_secs(1_000))
        .unwrap();
}

/// Both quotas force every file found to go.
const PRUNE_ALL: Quota = Quota {
    per_session: 100,
    total: 100,
    max_file: 100,
};

/// Only the total quota forces deletions.
const TOTAL_ONLY: Quota = Quota {
    per_session: 10_000,
    total: 100,
    max_file: 100,
};

#[test]
fn generated_and_named_files_land_in_the_session_dir() {
    let root = tempfile::tempdir().unwrap();
    let s = session("u1");
    let dir = root.path().canonicalize().unwrap().join("u1");
    let generated = resolve(root.path(), &s, None).unwrap().path;
    assert_eq!(generated.parent().unwrap(), dir);
    assert!(generated.to_string_lossy().ends_with(".png"));
    assert_eq!(
        resolve(root.path(), &s, Some("a/b.png")).unwrap().path,
        dir.join("a/b.png")
    );
    assert!(dir.join("a").is_dir());
    let abs = root.path().join("u1/c.png");
    assert_eq!(
        resolve(root.path(), &s, abs.to_str()).unwrap().path,
        dir.join("c.png")
    );
    let deepest = format!("{}x.png", "d/".repeat(MAX_SUBDIRS));
    assert_eq!(
        resolve(root.path(), &s, Some(&deepest)).unwrap().path,
        dir.join(&deepest)
    );
}

#[test]
fn escapes_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let s = session("u1");
    let too_deep = format!("{}x.png", "d/".repeat(MAX_SUBDIRS + 1));
    for bad in [
        "../x.png",
        "a/../../x.png",
        "/etc/x.png",
        "x.txt",
        "/tmp/x.png",
        &too_deep,
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
    symlink(elsewhere.path(), root.path().join("u1/link")).unwrap();
    symlink("/etc/passwd", root.path().join("u1/p.png")).unwrap();
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

/// The session's directories are created one no-follow level at a time: a
/// planted symlink cannot make the server create directories elsewhere.
#[test]
fn a_planted_symlink_cannot_make_directories_outside() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(root.path().join("u1")).unwrap();
    symlink(outside.path(), root.path().join("u1/a")).unwrap();
    assert_eq!(
        resolve(root.path(), &session("u1"), Some("a/b/x.png"))
            .unwrap_err()
            .rule,
        "output.path"
    );
    assert!(!outside.path().join("b").exists());
    // The session dir itself swapped for a symlink.
    symlink(outside.path(), root.path().join("u2")).unwrap();
    assert_eq!(
        resolve(root.path(), &session("u2"), Some("c/x.png"))
            .unwrap_err()
            .rule,
        "output.path"
    );
    assert!(!outside.path().join("c").exists());
}

#[test]
fn the_oldest_files_go_first_until_one_more_fits() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("s1");
    fs::create_dir_all(&dir).unwrap();
    for i in 0..5 {
        fs::write(dir.join(format!("{i}.png")), vec![0u8; 100]).unwrap();
        std::thread::sleep(Duration::from_millis(15));
    }
    let quota = Quota {
        per_session: 350,
        total: 10_000,
        max_file: 100,
    };
    check_room(&quota).unwrap();
    assert_eq!(make_room(root.path(), "s1", &quota), 3);
    let mut left: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, vec!["3.png", "4.png"]);
}

/// The session quota is the whole session's directory, subdirectories down
/// to the deepest a screenshot path may go included.
#[test]
fn the_session_quota_counts_its_subdirectories() {
    let root = tempfile::tempdir().unwrap();
    let deep = root.path().join("s1").join("d/".repeat(MAX_SUBDIRS));
    fs::create_dir_all(&deep).unwrap();
    old_file(&deep.join("old.png"));
    fs::write(root.path().join("s1/new.png"), [0u8; 100]).unwrap();
    let quota = Quota {
        per_session: 200,
        total: 10_000,
        max_file: 100,
    };
    assert_eq!(make_room(root.path(), "s1", &quota), 1);
    assert!(!deep.join("old.png").exists());
    assert!(root.path().join("s1/new.png").exists());
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
    let path = resolve(root.path(), &session(".."), None).unwrap().path;
    assert!(path.starts_with(root.path().canonicalize().unwrap()));
}

/// A session dir that is a symlink to a directory outside is not pruned
/// through.
#[test]
fn a_session_dir_symlink_is_not_followed_when_pruning() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    old_file(&outside.path().join("victim.png"));
    symlink(outside.path(), root.path().join("s1")).unwrap();
    assert_eq!(make_room(root.path(), "s1", &PRUNE_ALL), 0);
    assert!(outside.path().join("victim.png").exists());
    assert!(root.path().join("s1").is_symlink());
}

/// Symlinks inside a session (to a directory or a file outside) are neither
/// followed, nor counted, nor deleted; regular files are.
#[test]
fn symlinks_inside_a_session_are_skipped_when_pruning() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    old_file(&outside.path().join("victim.png"));
    fs::create_dir(root.path().join("s1")).unwrap();
    symlink(outside.path(), root.path().join("s1/dir")).unwrap();
    symlink(
        outside.path().join("victim.png"),
        root.path().join("s1/file.png"),
    )
    .unwrap();
    old_file(&root.path().join("s1/real.png"));
    assert_eq!(make_room(root.path(), "s1", &PRUNE_ALL), 1);
    assert!(outside.path().join("victim.png").exists());
    assert!(root.path().join("s1/dir").is_symlink());
    assert!(root.path().join("s1/file.png").is_symlink());
    assert!(!root.path().join("s1/real.png").exists());
}

/// The red-team race: the child swaps a real session dir and a symlink to
/// outside (`renameat2(RENAME_EXCHANGE)`) in a loop while the server prunes.
/// A path-based prune stats the real dir, then lists and unlinks through the
/// symlink; the fd-relative one never leaves the tree.
#[test]
fn a_session_dir_swapped_for_a_symlink_mid_prune_is_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.png");
    old_file(&victim);
    fs::create_dir(root.path().join("s0")).unwrap();
    fs::create_dir(root.path().join("s1")).unwrap();
    symlink(outside.path(), root.path().join("swap")).unwrap();
    // Files go into the real dir through its fd, whichever name it has.
    let real = open_dir(CWD, root.path().join("s1")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, dir) = (stop.clone(), root.path().to_owned());
        std::thread::spawn(move || {
            let dir = fs::File::open(dir).unwrap();
            while !stop.load(Ordering::Relaxed) {
                renameat_with(&dir, "s1", &dir, "swap", RenameFlags::EXCHANGE).unwrap();
            }
        })
    };
    let mut removed = 0;
    for _ in 0..2_000 {
        let file = openat(
            &real,
            "a.png",
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        rustix::io::write(&file, &[0u8; 100]).unwrap();
        // Another session's call prunes the whole root; then this one's.
        removed += make_room(root.path(), "s0", &TOTAL_ONLY);
        removed += make_room(root.path(), "s1", &PRUNE_ALL);
        if !victim.exists() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        victim.exists(),
        "prune deleted a file outside the output dir"
    );
    assert!(removed > 0, "prune never deleted the real dir's file");
}

/// A blocked page's screenshot is deleted, but not through a session dir
/// swapped for a symlink after the write.
#[test]
fn removing_a_screenshot_never_goes_through_a_symlink() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let s = session("u1");
    let target = resolve(root.path(), &s, Some("run/x.png")).unwrap();
    fs::write(&target.path, [0u8; 10]).unwrap();
    assert!(remove(root.path(), &target));
    assert!(!target.path.exists());

    fs::write(&target.path, [0u8; 10]).unwrap();
    fs::create_dir(outside.path().join("run")).unwrap();
    let victim = outside.path().join("run/x.png");
    fs::write(&victim, [0u8; 10]).unwrap();
    fs::rename(root.path().join("u1"), root.path().join("moved")).unwrap();
    symlink(outside.path(), root.path().join("u1")).unwrap();
    assert!(!remove(root.path(), &target));
    assert!(victim.exists());
    // Nor a symlink in the file's place.
    fs::remove_file(root.path().join("u1")).unwrap();
    fs::rename(root.path().join("moved"), root.path().join("u1")).unwrap();
    fs::remove_file(&target.path).unwrap();
    symlink(&victim, &target.path).unwrap();
    assert!(!remove(root.path(), &target));
    assert!(victim.exists());
}

#[test]
fn reading_a_screenshot_back_opens_only_the_regular_file_the_call_named() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let s = session("u1");
    let target = resolve(root.path(), &s, Some("run/x.png")).unwrap();
    fs::write(&target.path, [7u8; 10]).unwrap();
    let (mut file, size) = open_written(root.path(), &target).unwrap();
    assert_eq!(size, 10);
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut read).unwrap();
    assert_eq!(read, [7u8; 10]);

    // A symlink in the file's place is not followed.
    let victim = outside.path().join("secret.png");
    fs::write(&victim, b"secret").unwrap();
    fs::remove_file(&target.path).unwrap();
    symlink(&victim, &target.path).unwrap();
    assert_eq!(
        open_written(root.path(), &target).unwrap_err(),
        OutputFileError::Symlink
    );

    // Nor a symlinked directory on the way.
    fs::remove_file(&target.path).unwrap();
    fs::create_dir(outside.path().join("run")).unwrap();
    fs::write(outside.path().join("run/x.png"), b"secret").unwrap();
    fs::remove_dir(root.path().join("u1/run")).unwrap();
    symlink(outside.path().join("run"), root.path().join("u1/run")).unwrap();
    assert!(open_written(root.path(), &target).is_err());

    // A FIFO planted there is refused without waiting for a writer.
    fs::remove_file(root.path().join("u1/run")).unwrap();
    fs::create_dir(root.path().join("u1/run")).unwrap();
    rustix::fs::mknodat(
        CWD,
        &target.path,
        FileType::Fifo,
        Mode::RUSR | Mode::WUSR,
        0,
    )
    .unwrap();
    assert_eq!(
        open_written(root.path(), &target).unwrap_err(),
        OutputFileError::NotRegular
    );
}
