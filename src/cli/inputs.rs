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
                "read the key that redacts typed text, or replace it",
            ),
            Input::new(
                "the checkpoint key",
                &self.checkpoint_key_path(),
                "read or replace the key that signs the audit log's checkpoint",
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
#[path = "inputs_tests.rs"]
mod tests;
