//! A binary search over the denylist's syscall numbers, in front of
//! seccompiler's program: a native syscall is decided after a handful of
//! comparisons instead of one per denied syscall.
//!
//! seccompiler compiles a rule map into one linear chain of four
//! instructions per syscall. The kernel runs the program on every syscall
//! number when the filter is attached (to build its action cache), and
//! converts and JITs every instruction, so a long chain is paid on every
//! confined spawn (docs/benchmarks.md, "A shorter seccomp path"). The
//! search answers what that chain would: "allow" for a number the denylist
//! does not list, the denial for one it lists without conditions, and it
//! sends the rest — numbers whose arguments decide, other arches — into
//! seccompiler's program, which holds only the rules with conditions.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, sock_filter};

// The classic BPF this crate builds by hand (here and in seccomp.rs's
// prefix), from include/uapi/linux/{filter,audit,seccomp}.h.
#[cfg(target_arch = "x86_64")]
pub(crate) const NATIVE_ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
pub(crate) const NATIVE_ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
pub(crate) const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(crate) const JA: u16 = 0x05; // BPF_JMP | BPF_JA
pub(crate) const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub(crate) const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub(crate) const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// At most this many numbers are compared one by one at a leaf.
const LEAF: usize = 3;

/// What the search does with a listed syscall number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    /// Denied whatever its arguments: the search returns the denial.
    Denied,
    /// Its arguments decide: on into seccompiler's program.
    Conditional,
}

/// The verdicts the search returns itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verdicts {
    pub(crate) allow: u32,
    pub(crate) deny: u32,
}

/// One instruction, or a jump to the end of the search (the start of the
/// program after it), whose offset is known once the search is laid out.
enum Slot {
    Op(sock_filter),
    ToNext,
}

fn op(code: u16, jt: u8, jf: u8, k: u32) -> Slot {
    Slot::Op(sock_filter { code, jt, jf, k })
}

/// The search over `listed` (syscall number → what to do with it; a map,
/// so the numbers come sorted and once each). It returns, or falls off its
/// end into the program that follows it for a conditional number or
/// another arch. It makes no assumption about the accumulator on entry.
pub(crate) fn search(listed: &BTreeMap<u32, Listed>, verdicts: Verdicts) -> BpfProgram {
    let listed: Vec<(u32, Listed)> = listed.iter().map(|(nr, what)| (*nr, *what)).collect();
    let mut slots = vec![
        op(LD_W_ABS, 0, 0, 4), // A = seccomp_data.arch
        op(JEQ_K, 1, 0, NATIVE_ARCH),
        Slot::ToNext,          // another arch: the next program's arch check decides
        op(LD_W_ABS, 0, 0, 0), // A = seccomp_data.nr
    ];
    subtree(&listed, verdicts, &mut slots);
    let end = slots.len();
    slots
        .into_iter()
        .enumerate()
        .map(|(at, slot)| match slot {
            Slot::Op(op) => op,
            // Forward and 32-bit: a JA reaches any distance.
            Slot::ToNext => sock_filter {
                code: JA,
                jt: 0,
                jf: 0,
                k: u32::try_from(end - at - 1).unwrap_or(u32::MAX),
            },
        })
        .collect()
}

/// The search over the sorted `keys`, with A = the syscall number.
fn subtree(keys: &[(u32, Listed)], verdicts: Verdicts, out: &mut Vec<Slot>) {
    if keys.len() <= LEAF {
        for (nr, listed) in keys {
            out.push(op(JEQ_K, 0, 1, *nr)); // this number → the next slot
            out.push(match listed {
                Listed::Denied => op(RET_K, 0, 0, verdicts.deny),
                Listed::Conditional => Slot::ToNext,
            });
        }
        out.push(op(RET_K, 0, 0, verdicts.allow));
        return;
    }
    let mid = keys.len() / 2;
    let mut low = Vec::new();
    subtree(&keys[..mid], verdicts, &mut low);
    // A conditional jump reaches 255 instructions at most: the upper half
    // is reached through a JA, which reaches any distance.
    out.push(op(JGE_K, 0, 1, keys[mid].0));
    out.push(op(JA, 0, 0, u32::try_from(low.len()).unwrap_or(u32::MAX)));
    out.extend(low);
    subtree(&keys[mid..], verdicts, out);
}
