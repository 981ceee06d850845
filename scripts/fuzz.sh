#!/usr/bin/env bash
# Runs every native Go fuzz target for FUZZTIME each (default 10s), one
# target per run, as Go requires. `make fuzz` calls it; see
# docs/operations.md, "Fuzzing and mutation". Adding a target is one line
# in TARGETS. A crash fails the run; the input is written under the
# package's testdata/fuzz/<target>/, where it stays as a regression seed.
#
# Each run is what `go test -run '^$' -fuzz '^T$' -fuzztime $FUZZTIME ./pkg`
# does, with the package's instrumented test binary built once (go test -c
# -fuzz) rather than linked again for each of its targets.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

# package target
TARGETS=(
	"./control/api FuzzResourceApply"
	"./control/api FuzzCheckJSON"
	"./control/api FuzzQueryParam"
	"./control/api FuzzLabelSelector"
	"./control/api FuzzBatchItems"
	"./control/store FuzzDecodeCursor"
	"./control/store FuzzCursorRoundTrip"
	"./control/model FuzzManifest"
	"./control/schema FuzzCompileValidate"
	"./control/schema FuzzDiffSound"
	"./dispatch/callback FuzzTokenRoundTrip"
	"./dispatch/callback FuzzTokenVerify"
	"./dispatch/callback FuzzOutcomeBody"
	"./dispatch/callback FuzzHeartbeatBody"
	"./dispatch/health FuzzReadiness"
	"./webhooksdk FuzzVerifyHeaders"
	"./webhooksdk FuzzSignVerify"
)

module=$($GO list -m)
cache=$($GO env GOCACHE)/fuzz
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

failed=()
summary=()
for t in "${TARGETS[@]}"; do
	read -r pkg name <<<"$t"
	exe="$bin/$(echo "$pkg" | tr -c 'a-z0-9\n' _).test"
	if [[ ! -x $exe ]]; then
		echo "== build $pkg"
		$GO test -c -fuzz "^${name}\$" -o "$exe" "$pkg"
	fi
	log=$(mktemp)
	# Go 1.26's fuzz coordinator can fail a target at the -fuzztime
	# deadline with a bare "context deadline exceeded" and no input written
	# (go.dev/issue/75804, fixed in Go 1.27); a loaded CI machine hit it.
	# Such a run found nothing, so it runs once more; a run that wrote an
	# input fails at once.
	for attempt in 1 2; do
		echo "== $name ($pkg, $FUZZTIME)"
		# The binary runs in its package's directory, as go test runs it, so
		# testdata/fuzz is the package's.
		if (cd "$pkg" && "$exe" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$FUZZTIME" \
			-test.fuzzcachedir "$cache/$module/${pkg#./}") 2>&1 | tee "$log" | grep -v '^fuzz: elapsed'; then :; fi
		if ((attempt == 2)) || grep -qx 'PASS' "$log" || grep -q 'Failing input written' "$log" ||
			! grep -q 'context deadline exceeded' "$log"; then
			break
		fi
		echo "fuzz: $name stopped at its deadline with no input written (go.dev/issue/75804); running it again"
	done
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	if grep -qx 'PASS' "$log"; then
		summary+=("$(printf '%-22s %-20s %10s execs  ok' "$name" "$pkg" "${execs:-0}")")
	else
		failed+=("$name")
		summary+=("$(printf '%-22s %-20s %10s execs  FAILED' "$name" "$pkg" "${execs:-0}")")
	fi
	rm -f "$log"
done
echo
echo "fuzz: ${#TARGETS[@]} targets, $FUZZTIME each"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
