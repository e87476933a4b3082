//! The `browser-shell` binary: everything is in the library; see `cli`.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    browser_shell::main()
}
