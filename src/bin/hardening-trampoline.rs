//! The confinement trampoline alone (see `hardening::trampoline`): a small
//! executable that confines itself and execs its program. The server starts
//! every agent-browser child as this one rather than as its own, larger
//! binary, so each spawn loads less before confinement begins
//! (docs/design.md, "The trampoline").
//!
//! `hardening-trampoline POLICY_JSON PROGRAM [ARGS…]`; exits 126 with one
//! line on stderr when it refuses.

#![forbid(unsafe_code)]

fn main() {
    hardening::trampoline::main();
}
