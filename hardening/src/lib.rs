//! Confinement of a child process, prepared in the parent and applied
//! between fork and exec.
//!
//! This crate is the only place in browser-shell that issues raw syscalls. It
//! knows nothing about MCP or agent-browser: it takes a policy as data and
//! applies it to a process.
//!
//! Today it provides process-group control; Landlock, capabilities,
//! no_new_privs and seccomp land here next (see the project's hardening issue).

#![deny(missing_docs)]

mod process_group;

pub use process_group::{kill_process, kill_process_group};
