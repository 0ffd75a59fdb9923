#!/usr/bin/env bash
# The real-Slurm suites' binaries, listed once and run without cargo (a cargo command
# waits for the build folder's lock while another one runs its tests). Used by
# scripts/test.sh (Slurm 22.05 on the host) and tests/slurm/slurm-root.sh (24.11 in a
# root).
#
#   suites.sh list
#       reads `cargo test -p colloc-slurm-tests --tests --no-run --message-format=json`
#       on standard input; prints "NAME PATH" for each suite and for the harness's own
#       unit tests (named colloc_slurm_tests).
#   suites.sh run LIST RELEASE [NAME...] [-- RUNNER...]
#       runs the suites of file LIST (every one when no NAME is given) one after the
#       other, each as `RUNNER... PATH --test-threads=1`, with the environment given;
#       exit status 0 when every one passed, 1 otherwise or when no suite was named.
set -uo pipefail

list() {
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and {"test", "lib"} & set(m["target"]["kind"]):
        print(m["target"]["name"], m["executable"])'
}

run() {
  local file=$1 release=$2
  shift 2
  local names=() runner=()
  while (($#)); do
    [[ $1 == -- ]] && { shift; runner=("$@"); break; }
    names+=("$1")
    shift
  done
  local lines line name exe t want rc=0 ran=0
  mapfile -t lines <"$file" || return 1
  for line in "${lines[@]}"; do
    read -r name exe <<<"$line"
    if ((${#names[@]})); then
      want=0
      for t in "${names[@]}"; do [[ $t == "$name" ]] && want=1; done
      ((want)) || continue
    fi
    ran=$((ran + 1))
    printf '\n-- %s on Slurm %s (%s profile)\n' "$name" "$release" "${COLLOC_CLUSTER_PROFILE:-simple}"
    "${runner[@]}" "$exe" --test-threads=1 || rc=1
  done
  ((ran > 0)) || { echo "suites.sh: no suite named ${names[*]} in $file" >&2; return 1; }
  return "$rc"
}

case ${1:-} in
  list) list ;;
  run) (($# >= 3)) || { echo "usage: suites.sh run LIST RELEASE [NAME...] [-- RUNNER...]" >&2; exit 2; }
    shift; run "$@" ;;
  *) echo "usage: suites.sh list | suites.sh run LIST RELEASE [NAME...] [-- RUNNER...]" >&2; exit 2 ;;
esac
