package embeddedpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries is returned (wrapped) by Start when no PostgreSQL server
// binaries can be found. Callers branch on it to fall back to another source of
// Postgres (DATABASE_URL, a container) instead of failing outright.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found")

// debianBinGlob is where Debian and Ubuntu install the server binaries: they
// are not on PATH there, which is the most common reason a lookup fails.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// binaries are the absolute paths of the server programs Start runs. initdb
// and postgres must come from the same directory so their versions match.
type binaries struct {
	dir      string
	initdb   string
	postgres string
	// basebackup is pg_basebackup beside them, which only a standby needs
	// (Config.StandbyOf).
	basebackup string
}

// findBinaries looks in PATH, then `pg_config --bindir`, then the newest
// directory matching versionedGlob (debianBinGlob outside tests). Each
// candidate directory must hold both initdb and postgres.
func findBinaries(ctx context.Context, versionedGlob string) (binaries, error) {
	var searched []string

	if p, err := exec.LookPath("initdb"); err == nil {
		if b, ok := binariesIn(filepath.Dir(p)); ok {
			return b, nil
		}
		// A lone initdb on PATH may be a symlink into the real bindir.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if b, ok := binariesIn(filepath.Dir(real)); ok {
				return b, nil
			}
		}
	}
	searched = append(searched, "$PATH")

	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		cancel()
		if err == nil {
			dir := strings.TrimSpace(string(out))
			if b, ok := binariesIn(dir); ok {
				return b, nil
			}
			searched = append(searched, "`pg_config --bindir` ("+dir+")")
		} else {
			searched = append(searched, "`pg_config --bindir` (failed: "+err.Error()+")")
		}
	} else {
		searched = append(searched, "`pg_config --bindir` (no pg_config on PATH)")
	}

	dirs, err := filepath.Glob(versionedGlob)
	if err != nil {
		return binaries{}, fmt.Errorf("bad pattern %q: %w", versionedGlob, err)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return versionOfDir(b) - versionOfDir(a) // newest first
	})
	for _, dir := range dirs {
		if b, ok := binariesIn(dir); ok {
			return b, nil
		}
	}
	searched = append(searched, versionedGlob)

	return binaries{}, fmt.Errorf("%w; searched %s; install them with `apt-get install postgresql` "+
		"(Debian/Ubuntu), `dnf install postgresql-server` (Fedora) or `brew install postgresql` (macOS), "+
		"or run scripts/ensure-postgres.sh", ErrNoBinaries, strings.Join(searched, ", "))
}

func binariesIn(dir string) (binaries, bool) {
	b := binaries{
		dir:        dir,
		initdb:     filepath.Join(dir, "initdb"),
		postgres:   filepath.Join(dir, "postgres"),
		basebackup: filepath.Join(dir, "pg_basebackup"),
	}
	if real, err := filepath.EvalSymlinks(b.postgres); err == nil && !isExecutable(b.basebackup) {
		// postgres linked into PATH (/usr/local/bin) from its bindir
		b.basebackup = filepath.Join(filepath.Dir(real), "pg_basebackup")
	}
	return b, isExecutable(b.initdb) && isExecutable(b.postgres)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// versionOfDir turns /usr/lib/postgresql/15/bin into 15 (9.6 into 9) so that
// directories sort by version, not lexically ("9" > "15").
func versionOfDir(dir string) int {
	v := filepath.Base(filepath.Dir(dir))
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return -1
	}
	return n
}

var serverVersionRE = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)`)

// majorVersion reports the server binary's major version ("15"), so that
// reusing a data dir written by another major version fails with an
// explanation instead of a bare "incompatible data directory" in the log.
func (b binaries) majorVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.postgres, "-V").Output()
	if err != nil {
		return "", fmt.Errorf("cannot run %s -V: %w", b.postgres, err)
	}
	m := serverVersionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("cannot parse version from %q", bytes.TrimSpace(out))
	}
	return string(m[1]), nil
}
