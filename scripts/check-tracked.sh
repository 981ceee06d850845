#!/usr/bin/env bash
# Fails when the repository tracks a build output: an executable binary
# (ELF, Mach-O, PE), or any file over 1 MiB outside testdata/ directories
# that scripts/large-files.allow does not name. `make lint` runs it, so CI
# does too. Binaries are recognised by their first bytes, not by `file`,
# which not every machine has.
set -euo pipefail
cd "$(dirname "$0")/.."

limit=$((1 << 20))
allow=scripts/large-files.allow
# The allowlist: one path a line, then # and why it may be large.
mapfile -t allowed < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$allow" | grep -v '^$' || true)

bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted in the work tree, not yet committed
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cafebabe | feedface | feedfacf | cefaedfe | cffaedfe | 4d5a*)
		echo "check-tracked: $f is an executable binary: delete it (git rm --cached) and ignore where it is built" >&2
		bad=1
		continue
		;;
	esac
	size=$(wc -c <"$f")
	if [ "$size" -gt "$limit" ]; then
		case "/$f" in */testdata/*) continue ;; esac
		if ! printf '%s\n' "${allowed[@]}" | grep -qxF -- "$f"; then
			echo "check-tracked: $f is $size bytes, over 1 MiB: keep it out of the repository, or name it in $allow with the reason" >&2
			bad=1
		fi
	fi
done < <(git ls-files -z)
exit $bad
