#!/usr/bin/env bash
# Fails when a code comment carries a measured figure. A comment says why the
# code is shaped so; what a benchmark or a profile measured one day belongs in
# docs/performance.md (today's figures) or docs/performance-history.md (the
# earlier ones), where it can be kept current. `make lint` runs it, so CI does
# too.
#
# It reads the comment lines of the Go and TypeScript sources and of the
# engine's SQL (migrations/engine; a numbered migration is never edited once
# merged) and refuses the forms such figures take:
#   - a before/after pair, a figure with a unit beside -> or → ("590 -> 210 ms");
#   - a measurement cited as such: "(measured", "measured:", "Measured,";
#   - a share of a profile: "4.5 % of a batched benchmark's CPU";
#   - a rate in thousands: "4,648/s".
# A default, a limit, a timeout or a protocol value takes none of these forms.
set -euo pipefail
cd "$(dirname "$0")/.."

unit='(ms|µs|us|ns|s|%|/s|×)'
forms=(
	"[0-9] ?$unit ?(->|→)|(->|→) ?[0-9][0-9,./]* ?$unit"
	'\(measured|[Mm]easured[:,]'
	'[0-9] ?% of [^.]*(CPU|profile)'
	'[0-9],[0-9]{3}/s'
)
bad=0
for form in "${forms[@]}"; do
	if git grep -nE -e "^[[:space:]]*(//|--|/?\*).*($form)" -- '*.go' '*.ts' '*.tsx' 'migrations/engine/*.sql'; then
		bad=1
	fi
done
if [ "$bad" = 1 ]; then
	echo "check-comment-figures: the comments above carry measured figures: say why the code is shaped so, and put the figures in docs/performance.md" >&2
fi
exit $bad
