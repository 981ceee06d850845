#!/usr/bin/env bash
# Lists the packages of the fast test tier (make test-unit): those whose
# tests need no PostgreSQL, no browser and no Lambda emulator, found from
# what their test binaries link. A package whose tests link one of the
# helpers that start those (internal/testkit/pgtest, internal/embeddedpg,
# internal/testkit/browsertest, dispatch/transport/lambdatest), or that is
# one of them, is left to make test.
set -euo pipefail
cd "$(dirname "$0")/.."

heavy='/(internal/embeddedpg|internal/testkit/(pgtest|browsertest)|dispatch/transport/lambdatest)$'
${GO:-go} list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... |
	awk -v heavy="$heavy" '{
		seen[$1] = 1
		if ($1 ~ heavy) slow[$1] = 1
		for (i = 2; i <= NF; i++) if ($i ~ heavy) slow[$1] = 1
	} END { for (p in seen) if (!slow[p]) print p }' | sort
