#!/usr/bin/env bash
# The tree follows .clang-format: every tracked C, C++ and CUDA source and header, formatted, is unchanged.
# Lists the files that are not (fix one with `clang-format -i FILE`). The layout differs between
# clang-format's major versions, so the check runs with the version .clang-format names (14, Debian 12's)
# and says so and passes when only another one is installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
want=$(sed -n 's/^# clang-format \([0-9]*\).*/\1/p' .clang-format | head -1)
cf=""
for c in "clang-format-$want" clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q "version $want\."; then cf=$c; break; fi
done
if [[ -z $cf ]]; then
  echo "check_format.sh: clang-format $want not found ($(clang-format --version 2>/dev/null || echo none)): not checked"
  exit 0
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  "$cf" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if [[ ${#bad[@]} -ne 0 ]]; then
  printf 'check_format.sh: not formatted as .clang-format says: %s\n' "${bad[@]}"
  exit 1
fi
echo "check_format.sh: ${#files[@]} files follow .clang-format"
