#!/bin/sh
# ensure-postgres.sh makes sure the PostgreSQL server binaries (initdb and
# postgres) are installed, because `converge dev` and the tests run a real
# PostgreSQL from them (internal/embeddedpg) instead of needing Docker.
#
# It looks where embeddedpg looks: $PATH, `pg_config --bindir`, then the newest
# /usr/lib/postgresql/*/bin (Debian and Ubuntu keep the server off $PATH).
# If nothing is found and we are root on a Debian-like system, it installs the
# `postgresql` package non-interactively and checks again; otherwise it prints
# how to install and exits 1.
#
# Exit status: 0 when the binaries are available (their directory is printed).
set -eu

# has_server DIR: DIR holds both programs embeddedpg runs.
has_server() {
	[ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/postgres" ]
}

# find_bindir prints the directory of the server binaries, or fails.
find_bindir() {
	if p=$(command -v initdb 2>/dev/null); then
		d=$(dirname "$p")
		if has_server "$d"; then echo "$d"; return 0; fi
		# A symlink on $PATH may point into the real bindir.
		if r=$(readlink -f "$p" 2>/dev/null) && has_server "$(dirname "$r")"; then
			dirname "$r"; return 0
		fi
	fi
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if has_server "$d"; then echo "$d"; return 0; fi
	fi
	best="" best_major=-1
	for d in /usr/lib/postgresql/*/bin; do
		has_server "$d" || continue
		v=${d#/usr/lib/postgresql/}
		v=${v%/bin}
		major=${v%%.*}
		case $major in '' | *[!0-9]*) continue ;; esac
		if [ "$major" -gt "$best_major" ]; then best=$d best_major=$major; fi
	done
	if [ -n "$best" ]; then echo "$best"; return 0; fi
	return 1
}

how_to_install() {
	cat >&2 <<'MSG'
PostgreSQL server binaries (initdb, postgres) not found.
Searched: $PATH, `pg_config --bindir`, /usr/lib/postgresql/*/bin.
Install them with one of:
  sudo apt-get install postgresql        # Debian/Ubuntu (or run this script as root)
  sudo dnf install postgresql-server     # Fedora/RHEL
  brew install postgresql@16             # macOS
or point DATABASE_URL at an existing server where the role may create databases.
MSG
}

if dir=$(find_bindir); then
	echo "$dir"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	how_to_install
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-postgres: running as root but apt-get is not available; install the server by hand." >&2
	how_to_install
	exit 1
fi

echo "ensure-postgres: installing the postgresql package with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	postgresql

if dir=$(find_bindir); then
	echo "$dir"
	exit 0
fi
echo "ensure-postgres: installed postgresql but still cannot find initdb and postgres" >&2
how_to_install
exit 1
