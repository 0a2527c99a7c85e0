#!/bin/sh
# Every function the DOCA headers declare is exported by libzcstore-doca, and nothing but doca_*
# is: a DOCA program must link whatever it calls, and zcstore's own symbols stay inside.
#   check_exports.sh INCLUDE_DIR LIBRARY
set -eu
include_dir=$1
library=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A callback type returning a DOCA type (`typedef doca_error_t (*name)(...)`) declares no
# function: its return type is dropped before looking for `doca_name(`.
cat "$include_dir"/doca_*.h | tr '\n' ' ' | sed -E 's/typedef +doca_[a-z0-9_]+ *\(/typedef (/g' |
  grep -oE '\bdoca_[a-z0-9_]+ *\(' | sed 's/ *($//' | sort -u >"$tmp/declared"
nm -D --defined-only "$library" | awk '{print $3}' | sort -u >"$tmp/exported"
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
foreign=$(grep -v '^doca_' "$tmp/exported" || true)
status=0
if [ -n "$missing" ]; then
  echo "declared but not exported:"; echo "$missing"; status=1
fi
if [ -n "$foreign" ]; then
  echo "exported but not doca_*:"; echo "$foreign"; status=1
fi
[ $status -eq 0 ] && echo "$(wc -l <"$tmp/declared") declared functions, all exported"
exit $status
