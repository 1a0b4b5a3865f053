# Shell functions for tests/real_outputs_more.py: noise of several kinds (pip, pytest,
# npm) with words that fool a keyword scan, and two CI framings (GitHub Actions steps with
# timestamps, Travis folds).
pipnoise() {
  for i in $(seq 1 "$1"); do
    printf 'Collecting package-%04d>=1.%d\n' "$i" "$((i % 9))"
    printf '  Downloading package_%04d-1.%d.0-py3-none-any.whl (%d kB)\n' "$i" "$((i % 9))" "$((i * 7 % 900))"
    if [ $((i % 61)) -eq 0 ]; then
      printf "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError': /simple/package-%04d/\n" "$i"
    fi
    if [ $((i % 83)) -eq 0 ]; then
      printf 'DEPRECATION: package-%04d is being installed using the legacy setup.py install method\n' "$i"
    fi
  done
  printf 'Successfully installed %d packages\n' "$1"
}
testnoise() {
  for i in $(seq 1 "$1"); do
    printf 'tests/unit/test_module_%03d.py::test_case_%04d PASSED [%3d%%]\n' "$((i % 40))" "$i" "$((i * 100 / $1))"
    if [ $((i % 157)) -eq 0 ]; then
      printf 'tests/unit/test_errors.py::test_raises_value_error_on_bad_input PASSED\n'
      printf '  /usr/lib/python3/site-packages/attr/_make.py:918: DeprecationWarning: the error attribute is deprecated\n'
    fi
  done
}
npmnoise() {
  for i in $(seq 1 "$1"); do
    printf 'npm WARN deprecated pkg-%03d@0.%d.0: this package is no longer supported\n' "$i" "$((i % 7))"
    printf 'added %d packages, and audited %d packages in %ds\n' "$i" "$((i * 3))" "$((i % 13))"
  done
}
gha_step() {
  local name="$1"; shift
  printf '##[group]Run %s\n%s\nshell: /usr/bin/bash -e {0}\n##[endgroup]\n' "$name" "$name"
  "$@" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then printf '##[error]Process completed with exit code %d.\n' "$rc"; fi
  return "$rc"
}
gha_post() {
  printf 'Post job cleanup.\n[command]/usr/bin/git version\ngit version 2.43.0\n'
  for i in $(seq 1 "$1"); do
    printf "[command]/usr/bin/git config --local --name-only --get-regexp core\\\\.sshCommand\n"
    printf "[command]/usr/bin/git submodule foreach --recursive sh -c \"git config --local --name-only --get-regexp 'core\\\\.sshCommand' && git config --local --unset-all 'core.sshCommand' || :\"\n"
  done
  printf 'Cleaning up orphan processes\n'
}
stamp() {
  awk '{ printf "2024-05-01T10:%02d:%02d.%07dZ %s\n", int(NR / 3600) % 60, int(NR / 60) % 60, (NR * 7919) % 10000000, $0 }'
}
travis_cmd() {
  printf 'travis_time:start:%08x\r\033[0K$ %s\n' "$RANDOM" "$*"
  "$@" 2>&1
  local rc=$?
  printf '\ntravis_time:end:%08x:start=1564425631313206562,finish=1564425632464117084,duration=1141811741\r\033[0K\n' "$RANDOM"
  if [ "$rc" -ne 0 ]; then printf '\033[31;1mThe command "%s" exited with %d.\033[0m\n' "$*" "$rc"; fi
  return 0
}
