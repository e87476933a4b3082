//! `serve`: check the flags and prepare the parts (the self-test runs
//! meanwhile), then hand them to `crate::boot`, which runs the server on
//! stdio until EOF or SIGTERM.

use std::time::Duration;

use super::flags::ServeArgs;
use crate::boot::Boot;

pub(super) fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let starting = args.start()?;
    // Built while the self-test runs: neither needs anything from the other.
    let boot = Boot::new()?;
    let parts = starting.finish()?;
    if let Some(gate) = &parts.gate {
        crate::boot::assemble::remember_gate_port(&parts.runner.state_dir(), gate.port())?;
    }
    let pid_file = super::reload::PidFile::write(&args.audit_log, &args.policy)?;
    let served = boot.run(parts, Duration::from_secs(args.shutdown_grace_sec));
    pid_file.remove();
    served
}
