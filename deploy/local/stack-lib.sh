# Sourced by deploy/local/up, down, vnc-url and chromium (not a program of its own):
# where a stack's run dir is, and how the scripts find a running stack again.
#
# The run dir holds the audit log, the browser-shell launcher the hub executes,
# the hub's and nginx's config and the API key. None of it may be writable by
# the confined agent-browser, which may write /tmp (browser-shell refuses an
# audit log there), so a run dir is never under /tmp or /dev/shm:
#
#   - STACK_RUN_DIR when it is set (refused under /tmp, /dev/shm);
#   - else deploy/local/.run in the checkout;
#   - else, for a checkout under /tmp or /dev/shm, a per-checkout directory
#     ${XDG_STATE_HOME:-$HOME/.local/state}/browser-shell/stack-<hash of the checkout path>.
#
# Every stack `up` starts is recorded in the registry,
# ${XDG_STATE_HOME:-$HOME/.local/state}/browser-shell/stacks/<hash of its run dir>
# (two lines: run=<run dir>, checkout=<checkout>), so that `down` and `vnc-url`
# find a stack started with a custom STACK_RUN_DIR without being told.

# under_tmp PATH: PATH (absolute, symlinks resolved) is /tmp, /dev/shm or below them.
under_tmp() {
  case $1/ in
    /tmp/* | /dev/shm/*) return 0 ;;
  esac
  return 1
}

# physical PATH: absolute, symlinks resolved; PATH need not exist. Nothing for an empty PATH.
physical() { [ -z "$1" ] || realpath -m -- "$1"; }

# outside_tmp DIR PROGRAM: PROGRAM, or when it lies under /tmp or /dev/shm (as spelled, or
# where its symlinks lead) a copy of it in DIR, which must be outside them; prints the path
# to run. DIR holds the copy alone: agent-browser's directory is all its child may execute.
outside_tmp() {
  local dir=$1 program=$2 copy
  if ! under_tmp "$program" && ! under_tmp "$(physical "$program")"; then
    printf '%s\n' "$program"
    return 0
  fi
  copy=$dir/${program##*/}
  mkdir -p "$dir"
  cmp -s -- "$program" "$copy" || install -m 0755 -- "$program" "$copy"
  printf '%s\n' "$copy"
}

short_hash() { printf '%s' "$1" | sha256sum | cut -c1-"${2:-12}"; }

# state_home: $XDG_STATE_HOME if absolute (as the XDG spec says), else $HOME/.local/state;
# nothing when neither is usable (unset, relative, or under /tmp).
state_home() {
  local home=
  if [[ ${XDG_STATE_HOME:-} == /* ]]; then
    home=$XDG_STATE_HOME
  elif [[ ${HOME:-} == /* ]]; then
    home=$HOME/.local/state
  fi
  [ -n "$home" ] || return 0
  home=$(physical "$home")
  under_tmp "$home" || printf '%s\n' "$home"
}

# default_run_dir ROOT: the run dir when STACK_RUN_DIR is not set; nothing when there is none.
default_run_dir() {
  local home
  if ! under_tmp "$1"; then
    printf '%s\n' "$1/deploy/local/.run"
    return 0
  fi
  home=$(state_home)
  [ -z "$home" ] || printf '%s\n' "$home/browser-shell/stack-$(short_hash "$1")"
}

# valid_run_dir DIR: what up accepts as a run dir (also what down accepts from the registry).
valid_run_dir() { [[ $1 =~ ^/[A-Za-z0-9_./-]+$ ]] && ! under_tmp "$(physical "$1")"; }

registry_dir() {
  local home
  home=$(state_home)
  [ -z "$home" ] || printf '%s\n' "$home/browser-shell/stacks"
}

# register_stack RUN ROOT: record a stack (fails quietly when there is no usable registry).
register_stack() {
  local reg
  reg=$(registry_dir)
  [ -n "$reg" ] || return 1
  (umask 077 && mkdir -p "$reg" && printf 'run=%s\ncheckout=%s\n' "$1" "$2" >"$reg/$(short_hash "$1")") 2>/dev/null
}

unregister_stack() {
  local reg
  reg=$(registry_dir)
  [ -z "$reg" ] || rm -f -- "$reg/$(short_hash "$1")"
}

# registered_stacks ROOT: run dirs of stacks started from this checkout that still have a pids
# file, one a line. Entries whose stack is gone are removed.
registered_stacks() {
  local reg f run checkout
  reg=$(registry_dir)
  [ -n "$reg" ] && [ -d "$reg" ] || return 0
  for f in "$reg"/*; do
    [ -f "$f" ] || continue
    run=$(sed -n 's/^run=//p' "$f")
    checkout=$(sed -n 's/^checkout=//p' "$f")
    [ "$checkout" = "$1" ] || continue
    if valid_run_dir "$run" && [ -f "$run/pids" ]; then
      printf '%s\n' "$run"
    else
      rm -f -- "$f"
    fi
  done
}

# running_auth_run_dirs ROOT: run dirs of this checkout's auth stand-ins that are running, found
# by their command line (python3 ROOT/deploy/local/auth-service.py ... --key-file RUN/api-key):
# a stack the registry does not know (an older up, a lost registry) is still seen.
running_auth_run_dirs() {
  local c args key
  for c in /proc/[0-9]*/cmdline; do
    args=$( { tr '\0' '\n' <"$c"; } 2>/dev/null) || continue
    grep -qxF "$1/deploy/local/auth-service.py" <<<"$args" || continue
    key=$(awk 'p { print; exit } $0 == "--key-file" { p = 1 }' <<<"$args")
    [ -n "$key" ] && printf '%s\n' "${key%/*}"
  done
}

# known_stacks ROOT: every stack of this checkout that is running or recorded, one run dir a line.
known_stacks() {
  { registered_stacks "$1"; running_auth_run_dirs "$1"; } | awk 'NF && !seen[$0]++'
}

# allow_entries URL...: the URL policy's allow_private_cidrs entries that let the agent open
# these origins, one per line ("none" adds nothing). Only http(s) URLs on an IP literal or
# localhost (which resolves to both 127.0.0.1 and ::1): a name would need a policy file.
allow_entries() {
  python3 - "$@" <<'PY'
import ipaddress, sys, urllib.parse

entries = []
for raw in sys.argv[1:]:
    if raw == "none":
        continue
    url = urllib.parse.urlsplit(raw)
    def fail(why: str) -> None:
        sys.exit(f"--allow {raw}: {why}")
    if url.scheme not in ("http", "https") or not url.hostname:
        fail("give an http:// or https:// URL, e.g. --allow http://127.0.0.1:8765")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        fail("the port is not a number from 1 to 65535")
    if url.hostname == "localhost":
        entries += [f"127.0.0.1:{port}", f"[::1]:{port}"]
        continue
    try:
        ip = ipaddress.ip_address(url.hostname)
    except ValueError:
        fail("only IP literals and localhost; for a host name write a policy file "
             "(deploy/policy/) and pass it as BROWSER_SHELL_POLICY_FILE")
    if ip.is_global:
        fail("a public address needs no --allow: the policy allows public addresses")
    entries.append(f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}")
print("\n".join(entries))
PY
}

# compose_policy RUN URL...: RUN/policy.json = RUN/policy.base plus the --allow origins,
# written whole (rename), so a server reading it never sees half a file.
compose_policy() {
  local run=$1 entries
  shift
  entries=$(allow_entries "$@") || return 1
  python3 - "$run/policy.base" "$run/policy.json" "$entries" <<'PY' || return 1
import json, os, sys

base_path, out_path, entries = sys.argv[1], sys.argv[2], sys.argv[3].split()
policy = json.load(open(base_path, encoding="utf-8"))
if entries:
    section = policy.setdefault("open", {})
    cidrs = section.setdefault("allow_private_cidrs", [])
    cidrs += [e for e in entries if e not in cidrs]
tmp = out_path + ".tmp"
with open(tmp, "w", encoding="utf-8") as fh:
    json.dump(policy, fh, indent=2)
    fh.write("\n")
os.chmod(tmp, 0o644)
os.replace(tmp, out_path)
PY
  printf '%s\n' "$entries" >"$run/allowed-origins"
}

# chromium_flags: the flags every Chromium that browser-shell's scripts start gets
# (deploy/browser-flags.sh, also copied into the AIO image).
# shellcheck source=deploy/browser-flags.sh
. "$(dirname "${BASH_SOURCE[0]}")/../browser-flags.sh"

# chromium_profile DIR: a profile in which no page may download (a download is a
# write of the page's choosing by an unconfined process). browser-shell denies
# downloads over CDP too; this preference holds when its connection is down.
chromium_profile() {
  mkdir -p "$1/Default"
  printf '{"download_restrictions": 3}\n' >"$1/Default/Preferences"
}
