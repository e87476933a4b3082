# Sourced by the scripts that take no arguments: `--help` (or `-h`) prints the
# script's header comment and exits 0 having done nothing else; any other
# argument is refused (exit 2), so a typo never runs the script's job.
no_args_but_help() {
  local script=$1
  shift
  case "$#:${1-}" in
    0:) return 0 ;;
    1:-h | 1:--help)
      sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$script"
      exit 0
      ;;
    *)
      printf '%s: unknown argument %q: it takes none (see %s --help)\n' \
        "$(basename "$script")" "$1" "$script" >&2
      exit 2
      ;;
  esac
}
