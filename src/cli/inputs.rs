//! The files the unconfined server trusts — the programs it runs, the policy
//! it enforces, the key that authenticates its audit log — must lie where the
//! confined agent-browser cannot write: a child that could replace one would
//! steer the server, at once or at its next start.

use std::{
    ffi::OsString,
    fs,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, bail};

use super::flags::ServeArgs;

/// A file the server trusts, and what the child could do by replacing it.
struct Input {
    what: &'static str,
    path: PathBuf,
    risk: &'static str,
}

/// A trusted file that lies under a child-writable root.
struct Exposed<'a> {
    input: &'a Input,
    /// The entry on the way to the file that lies under `root` (the file
    /// itself, or a symlink or directory the path goes through).
    entry: PathBuf,
    root: PathBuf,
}

impl ServeArgs {
    /// Every file the unconfined server trusts. A new one (the secrets file,
    /// say) is one more line here.
    fn trusted_inputs(&self) -> anyhow::Result<Vec<Input>> {
        let me = std::env::current_exe()
            .context("cannot locate browser-shell's own binary (/proc/self/exe)")?;
        let mut inputs = vec![
            Input::new(
                "the agent-browser binary",
                &self.agent_browser,
                "replace the program every later call runs, in every session",
            ),
            Input::new(
                "browser-shell's own binary",
                &me,
                "replace the server that its next start runs unconfined",
            ),
            Input::new(
                "the policy file",
                &self.policy,
                "rewrite (or create) the URL policy the server enforces from its next start",
            ),
            Input::new(
                "the audit key",
                &self.audit_key_path(),
                "read or replace the key that authenticates the audit log",
            ),
        ];
        if let Some(trampoline) = self.trampoline_file()? {
            inputs.push(Input::new(
                "the confinement trampoline",
                &trampoline,
                "replace the program every child starts as, unconfined, from the next start",
            ));
        }
        if let Some(secrets) = &self.secrets {
            inputs.push(Input::new(
                "the secrets file",
                secrets,
                "read the secrets, or rebind them to hosts it controls, from the next reload",
            ));
        }
        Ok(inputs)
    }

    /// Refuse to start when a trusted file lies under one of `roots` (the
    /// child's writable dirs), unless `--allow-child-writable-inputs` says
    /// the operator accepts it; then warn, once per file, on stderr.
    pub(crate) fn check_inputs_outside(&self, roots: &[PathBuf]) -> anyhow::Result<()> {
        let inputs = self.trusted_inputs()?;
        let exposed = exposed(&inputs, roots);
        if exposed.is_empty() {
            return Ok(());
        }
        if !self.allow_child_writable_inputs {
            bail!(refusal(&exposed, roots));
        }
        for e in &exposed {
            tracing::warn!(
                file = %e.input.path.display(),
                root = %e.root.display(),
                "{} lies where the confined agent-browser may write: it could {} \
                 (accepted by --allow-child-writable-inputs)",
                e.input.what,
                e.input.risk
            );
        }
        Ok(())
    }

    /// One line per trusted file for `hardening check`: where it is, and
    /// `ok` or the child-writable root it lies under.
    pub(crate) fn inputs_report(&self, roots: &[PathBuf]) -> anyhow::Result<Vec<String>> {
        let inputs = self.trusted_inputs()?;
        let exposed = exposed(&inputs, roots);
        let accepted = if self.allow_child_writable_inputs {
            "accepted by --allow-child-writable-inputs"
        } else {
            "refused at start"
        };
        Ok(inputs
            .iter()
            .map(|input| {
                let status = exposed
                    .iter()
                    .find(|e| std::ptr::eq(e.input, input))
                    .map_or_else(
                        || "ok".to_owned(),
                        |e| format!("UNDER {} ({accepted})", e.root.display()),
                    );
                format!("{} {}: {status}", input.what, input.path.display())
            })
            .collect())
    }
}

impl Input {
    fn new(what: &'static str, path: &Path, risk: &'static str) -> Self {
        Self {
            what,
            path: path.to_owned(),
            risk,
        }
    }
}

fn exposed<'a>(inputs: &'a [Input], roots: &[PathBuf]) -> Vec<Exposed<'a>> {
    inputs
        .iter()
        .filter_map(|input| {
            let (entry, root) = writable_root_of(&input.path, roots)?;
            Some(Exposed { input, entry, root })
        })
        .collect()
}

/// The error that stops the start: each file, the root it lies under, why
/// it matters, and what to do.
fn refusal(exposed: &[Exposed<'_>], roots: &[PathBuf]) -> String {
    let mut text = String::from(
        "refusing to start: files the unconfined server trusts lie where the confined \
         agent-browser may write, so it could change them and steer the server:",
    );
    for e in exposed {
        let spelled = std::path::absolute(&e.input.path).unwrap_or_else(|_| e.input.path.clone());
        let via = if e.entry == spelled {
            String::new()
        } else {
            format!(" (through {})", e.entry.display())
        };
        text.push_str(&format!(
            "\n  - {} {}{via} lies under {}: the child could {}",
            e.input.what,
            e.input.path.display(),
            e.root.display(),
            e.input.risk
        ));
    }
    // /dev/null is a writable root too, but no place to move a file from.
    let dirs: Vec<String> = roots
        .iter()
        .filter(|root| root.is_dir())
        .map(|root| root.display().to_string())
        .collect();
    text.push_str(&format!(
        "\nMove each file out of the child's writable dirs ({}), e.g. under /usr/local/lib or \
         /etc, or pass --allow-child-writable-inputs (BROWSER_SHELL_ALLOW_CHILD_WRITABLE_INPUTS=true) \
         to accept the risk",
        dirs.join(", ")
    ));
    text
}

/// The first child-writable root that `path` lies under, with the entry on
/// the way that lies there. Symlinks are followed, and every entry the path
/// goes through counts, not only where it leads: a symlink (or directory)
/// under a writable root can be replaced to point elsewhere. A path that
/// does not exist (yet) is judged by where it would be created.
fn writable_root_of(path: &Path, roots: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    let roots: Vec<PathBuf> = roots.iter().map(|root| walk(root).target).collect();
    let walked = walk(path);
    // Deepest first: the file itself is the clearest entry to name.
    std::iter::once(walked.target)
        .chain(walked.entries.into_iter().rev())
        .find_map(|entry| {
            let root = roots.iter().find(|root| entry.starts_with(root))?.clone();
            Some((entry, root))
        })
}

/// Most symlinks followed while resolving one path (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

/// Where a path leads, and every directory entry on the way there.
struct Walk {
    target: PathBuf,
    entries: Vec<PathBuf>,
}

/// One step of a path still to resolve.
enum Part {
    Root,
    Up,
    Name(OsString),
}

/// Resolve `path` as the kernel would (symlinks followed, `..` taken from
/// the resolved directory, not the spelling), recording each entry's
/// location in its resolved parent. A missing component, and whatever
/// follows it, is taken as spelled.
fn walk(path: &Path) -> Walk {
    let start = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut todo: Vec<Part> = parts(&start).rev().collect();
    let mut here = PathBuf::from("/");
    let mut entries = Vec::new();
    let mut hops = 0;
    while let Some(part) = todo.pop() {
        match part {
            Part::Root => here = PathBuf::from("/"),
            Part::Up => {
                here.pop();
            }
            Part::Name(name) => {
                let entry = here.join(name);
                entries.push(entry.clone());
                match fs::read_link(&entry) {
                    Ok(target) if hops < MAX_SYMLINKS => {
                        hops += 1;
                        todo.extend(parts(&target).rev());
                    }
                    _ => here = entry,
                }
            }
        }
    }
    Walk {
        target: here,
        entries,
    }
}

fn parts(path: &Path) -> impl DoubleEndedIterator<Item = Part> + '_ {
    path.components().filter_map(|c| match c {
        Component::Prefix(_) | Component::RootDir => Some(Part::Root),
        Component::CurDir => None,
        Component::ParentDir => Some(Part::Up),
        Component::Normal(name) => Some(Part::Name(name.to_owned())),
    })
}

#[cfg(test)]
mod tests {
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
}
