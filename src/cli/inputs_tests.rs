use std::{os::unix::fs::symlink, path::PathBuf};

use clap::Parser;

use super::writable_root_of;
use crate::cli::flags::ServeArgs;

/// A writable root and a directory outside it.
fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

fn root_of(path: &std::path::Path, root: &std::path::Path) -> Option<PathBuf> {
    writable_root_of(path, &[root.to_owned()]).map(|(_, root)| root)
}

#[test]
fn a_file_under_a_writable_root_is_found_under_that_root() {
    let (root, _) = dirs();
    let file = root.path().join("policy.json");
    std::fs::write(&file, "{}").unwrap();
    let canonical = root.path().canonicalize().unwrap();
    assert_eq!(root_of(&file, root.path()), Some(canonical));
}

#[test]
fn a_file_outside_every_writable_root_is_not_exposed() {
    let (root, outside) = dirs();
    let file = outside.path().join("policy.json");
    std::fs::write(&file, "{}").unwrap();
    assert_eq!(root_of(&file, root.path()), None);
}

#[test]
fn a_sibling_sharing_the_roots_name_as_a_prefix_is_not_under_it() {
    let (root, _) = dirs();
    let sibling = PathBuf::from(format!("{}-other/policy.json", root.path().display()));
    assert_eq!(root_of(&sibling, root.path()), None);
}

#[test]
fn a_path_whose_parent_does_not_exist_yet_is_judged_where_it_would_be_created() {
    let (root, outside) = dirs();
    let missing = root.path().join("not/yet/policy.json");
    assert!(root_of(&missing, root.path()).is_some());
    let elsewhere = outside.path().join("not/yet/policy.json");
    assert_eq!(root_of(&elsewhere, root.path()), None);
}

#[test]
fn a_symlink_outside_that_points_into_a_writable_root_is_exposed() {
    let (root, outside) = dirs();
    let real = root.path().join("agent-browser");
    std::fs::write(&real, "").unwrap();
    let link = outside.path().join("agent-browser");
    symlink(&real, &link).unwrap();
    let (entry, _) = writable_root_of(&link, &[root.path().to_owned()]).unwrap();
    assert_eq!(entry, real.canonicalize().unwrap());
}

#[test]
fn a_symlink_inside_a_writable_root_is_exposed_wherever_it_points() {
    // The child cannot change the target, but it can replace the link.
    let (root, outside) = dirs();
    let real = outside.path().join("policy.json");
    std::fs::write(&real, "{}").unwrap();
    let link = root.path().join("policy.json");
    symlink(&real, &link).unwrap();
    assert!(root_of(&link, root.path()).is_some());
}

#[test]
fn a_directory_symlink_on_the_way_inside_a_writable_root_is_exposed() {
    let (root, outside) = dirs();
    std::fs::write(outside.path().join("policy.json"), "{}").unwrap();
    symlink(outside.path(), root.path().join("etc")).unwrap();
    let through = root.path().join("etc/policy.json");
    assert!(root_of(&through, root.path()).is_some());
}

#[test]
fn dot_dot_after_a_symlink_is_taken_from_where_the_link_leads() {
    // Lexically `outside/link/../policy.json` is `outside/policy.json`;
    // the kernel opens `root/policy.json`.
    let (root, outside) = dirs();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    symlink(root.path().join("sub"), outside.path().join("link")).unwrap();
    let path = outside.path().join("link/../policy.json");
    let (entry, _) = writable_root_of(&path, &[root.path().to_owned()]).unwrap();
    assert_eq!(
        entry,
        root.path().canonicalize().unwrap().join("policy.json")
    );
}

#[test]
fn a_writable_root_given_through_a_symlink_covers_where_it_leads() {
    let (root, outside) = dirs();
    let link_to_root = outside.path().join("state");
    symlink(root.path(), &link_to_root).unwrap();
    let file = root.path().join("policy.json");
    assert!(root_of(&file, &link_to_root).is_some());
}

#[test]
fn a_symlink_loop_ends_the_walk_instead_of_hanging() {
    let (root, outside) = dirs();
    let a = outside.path().join("a");
    let b = outside.path().join("b");
    symlink(&b, &a).unwrap();
    symlink(&a, &b).unwrap();
    assert_eq!(root_of(&a, root.path()), None);
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn args(extra: &[&str]) -> ServeArgs {
    let argv = ["browser-shell"].iter().chain(extra);
    Cli::try_parse_from(argv).unwrap().serve
}

#[test]
fn the_refusal_names_each_file_its_root_the_risk_and_the_flag() {
    let (root, outside) = dirs();
    let policy = root.path().join("policy.json");
    let key = outside.path().join("audit.key");
    let (policy_arg, key_arg) = (policy.display().to_string(), key.display().to_string());
    let roots = [root.path().to_owned()];
    let refused = args(&["--policy", &policy_arg, "--audit-key", &key_arg])
        .check_inputs_outside(&roots)
        .unwrap_err()
        .to_string();
    for needle in [
        &format!("the policy file {policy_arg}"),
        &format!(
            "lies under {}",
            root.path().canonicalize().unwrap().display()
        ),
        "steer the server",
        "--allow-child-writable-inputs",
    ] {
        assert!(refused.contains(needle), "{needle:?} missing in: {refused}");
    }
    assert!(!refused.contains(&key_arg), "{refused}");
}

#[test]
fn the_operator_flag_lets_a_child_writable_input_through() {
    let (root, _) = dirs();
    let policy = root.path().join("policy.json").display().to_string();
    let roots = [root.path().to_owned()];
    let allowed = args(&["--policy", &policy, "--allow-child-writable-inputs"]);
    allowed.check_inputs_outside(&roots).unwrap();
    let report = allowed.inputs_report(&roots).unwrap();
    let line = report.iter().find(|l| l.contains(&policy)).unwrap();
    assert!(
        line.contains("UNDER") && line.contains("accepted"),
        "{line}"
    );
}
