# Sourced by the sanitizer test scripts: run-time options for ASan, UBSan,
# LSan and TSan, with the suppressions beside this file. Every report goes to
# a file $SAN_LOGS/report.<pid> (log_path), not to stderr: a report from a CLI
# child process whose exit code a test expects to be nonzero is caught as
# well, and tests that compare stderr see only the program's own. The
# caller fails when any such file exists (san_reports).
san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${SAN_LOGS:?set SAN_LOGS to an empty folder}"
# Absolute: log_path is read in each process's own working folder (a test's
# is its build folder), so a relative one put the reports where san_reports
# does not look, and a run with reports passed as clean.
case $SAN_LOGS in /*) ;; *) SAN_LOGS=$PWD/$SAN_LOGS ;; esac
mkdir -p "$SAN_LOGS"
export ASAN_OPTIONS="log_path=$SAN_LOGS/report:detect_leaks=1:strict_init_order=1:check_initialization_order=1:suppressions=$san_dir/asan.supp"
export LSAN_OPTIONS="suppressions=$san_dir/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$SAN_LOGS/report:print_stacktrace=1:halt_on_error=1:suppressions=$san_dir/ubsan.supp"
# TSan: the Debian libraries (oneDNN, Open MPI, protobuf, Z3) are not
# instrumented; their own memory accesses are not what this run checks
# (ignore_noninstrumented_modules), our code's accesses are. OpenMP is
# clang's libomp, whose barriers TSan sees through the archer tool.
export TSAN_OPTIONS="log_path=$SAN_LOGS/report:halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$san_dir/tsan.supp"
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | tail -n 1)
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer || true)}
export TSAN_SYMBOLIZER_PATH=$ASAN_SYMBOLIZER_PATH

# Prints every report under $SAN_LOGS; returns 1 if there is one.
san_reports() {
  local found=0 f
  # One prefix for every sanitizer: the options they share (log_path) are
  # read from each of their variables, the last one read winning.
  for f in "$SAN_LOGS"/report.*; do
    [ -f "$f" ] || continue
    found=1
    echo "=== sanitizer report $f"
    head -n 80 "$f"
  done
  [ "$found" -eq 0 ]
}
