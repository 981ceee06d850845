// Package migrations holds Converge's SQL schema, embedded in the binary, and
// applies it with goose.
//
// The .sql files in this directory are the only place the schema changes
// (plpgsql included). They are numbered, never edited once merged (Up
// records each applied file's sha256 and refuses a database whose record
// differs from the embedded file), and
// written in goose format: "-- +goose Up" / "-- +goose Down", with plpgsql
// bodies between "-- +goose StatementBegin" and "-- +goose StatementEnd".
//
// Every pod runs Up at boot. Up, Down and Status serialise on a session-level
// advisory lock in the target database, so when several pods start at once
// exactly one applies pending migrations while the others wait for it and then
// find nothing to do. Advisory locks are per database, so migrating different
// databases on one server (test templates) never contends.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// LockWaitDefault is how long Up and Down wait for another process that holds
// the migration lock, e.g. a pod applying a slow migration.
const LockWaitDefault = 10 * time.Minute

//go:embed *.sql
var files embed.FS // read-only: embedded at build time

// FS returns the embedded migration files, for tools that inspect them.
func FS() fs.FS { return files }

// Up applies every pending migration. log receives one line per migration
// applied; nil discards them. Concurrent callers against the same database
// are safe: one applies, the rest wait and then no-op.
func Up(ctx context.Context, dsn string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return withProvider(ctx, dsn, func(p *goose.Provider, db *sql.DB) error {
		sums, err := fileChecksums()
		if err != nil {
			return err
		}
		if ok, err := checksumsTable(ctx, db); err != nil {
			return err
		} else if ok {
			if err := verifyChecksums(ctx, db, sums); err != nil {
				return err
			}
		}
		results, err := p.Up(ctx)
		for _, r := range results {
			if r.Error == nil {
				log.InfoContext(ctx, "migration applied",
					"version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
			}
		}
		if err != nil {
			return fmt.Errorf("migrations: up: %w", err)
		}
		if len(results) == 0 {
			log.DebugContext(ctx, "schema up to date")
		}
		if ok, err := checksumsTable(ctx, db); err != nil || !ok {
			return err
		}
		return recordChecksums(ctx, db, sums)
	})
}

// Down rolls back the most recently applied migration, one step. It fails if
// nothing is applied.
func Down(ctx context.Context, dsn string) error {
	return withProvider(ctx, dsn, func(p *goose.Provider, db *sql.DB) error {
		r, err := p.Down(ctx)
		if err != nil {
			return fmt.Errorf("migrations: down: %w", err)
		}
		if ok, err := checksumsTable(ctx, db); err != nil || !ok {
			return err
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM converge_migration_checksums WHERE version = $1`, r.Source.Version); err != nil {
			return fmt.Errorf("migrations: down: forget the checksum of %s: %w", r.Source.Path, err)
		}
		return nil
	})
}

// Status writes one line per embedded migration to w: its version, whether it
// is applied (and when) or pending, and its file.
func Status(ctx context.Context, dsn string, w io.Writer) error {
	return withProvider(ctx, dsn, func(p *goose.Provider, _ *sql.DB) error {
		statuses, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("migrations: status: %w", err)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE") //nolint:errcheck // checked at Flush
		for _, s := range statuses {
			applied := "-"
			if s.State == goose.StateApplied {
				applied = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, applied, s.Source.Path) //nolint:errcheck
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("migrations: status: cannot write: %w", err)
		}
		return nil
	})
}

// Hash identifies the embedded migration set: it changes when any file is
// added, renamed or edited. Test helpers name template databases after it, so
// a schema change produces a fresh template instead of reusing a stale one.
func Hash() string {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		// The embedded FS root always exists; reaching this is a build defect.
		panic(fmt.Sprintf("migrations: cannot list embedded files: %v", err))
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(fmt.Sprintf("migrations: cannot read embedded %s: %v", name, err))
		}
		// Length prefixes keep "ab"+"c" and "a"+"bc" apart.
		h.Write([]byte(strconv.Itoa(len(name)) + ":" + name + strconv.Itoa(len(b)) + ":"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func withProvider(ctx context.Context, dsn string, fn func(*goose.Provider, *sql.DB) error) (retErr error) {
	connConfig, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrations: bad DSN: %w", err)
	}
	// stdlib.OpenDB rather than sql.Open("pgx"): no dependence on the
	// driver registry that package's init populates.
	db := stdlib.OpenDB(*connConfig)
	defer func() {
		if err := db.Close(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("migrations: cannot close database: %w", err))
		}
	}()

	// goose polls pg_try_advisory_lock; 1s is its shortest period, which
	// keeps waiting pods from lagging far behind the one migrating.
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockTimeout(1, uint64(LockWaitDefault/time.Second)),
	)
	if err != nil {
		return fmt.Errorf("migrations: cannot create locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithSessionLocker(locker),
		// Up logs results itself; goose's own log (verbose mode) echoes
		// every SQL statement.
		goose.WithSlog(slog.New(slog.DiscardHandler)),
		// Only the embedded SQL counts; ignore Go migrations that any
		// imported package may have registered globally with goose.
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrations: cannot create provider: %w", err)
	}
	return fn(p, db)
}

// checksum is an embedded migration's file name and sha256.
type checksum struct{ file, sha256 string }

// fileChecksums returns the checksum of every embedded migration by version.
func fileChecksums() (map[int64]checksum, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: cannot list embedded files: %w", err)
	}
	sums := map[int64]checksum{}
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			continue // not a migration
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: cannot read embedded %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(b)
		sums[v] = checksum{e.Name(), hex.EncodeToString(sum[:])}
	}
	return sums, nil
}

// checksumsTable reports whether converge_migration_checksums exists yet
// (migration 00007 creates it).
func checksumsTable(ctx context.Context, db *sql.DB) (bool, error) {
	var ok bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('converge_migration_checksums') IS NOT NULL`).Scan(&ok); err != nil {
		return false, fmt.Errorf("migrations: cannot look for the checksums table: %w", err)
	}
	return ok, nil
}

// verifyChecksums refuses to go on if an applied migration's recorded
// checksum differs from the embedded file: a merged migration was edited,
// and databases that already ran it never get the edit.
func verifyChecksums(ctx context.Context, db *sql.DB, sums map[int64]checksum) error {
	rows, err := db.QueryContext(ctx, `SELECT version, file, sha256 FROM converge_migration_checksums ORDER BY version`)
	if err != nil {
		return fmt.Errorf("migrations: cannot read checksums: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			v    int64
			then checksum
		)
		if err := rows.Scan(&v, &then.file, &then.sha256); err != nil {
			return fmt.Errorf("migrations: cannot read checksums: %w", err)
		}
		if now, ok := sums[v]; ok && now.sha256 != then.sha256 {
			return fmt.Errorf("migrations: %s (version %d) is not the file this database applied as %s "+
				"(sha256 %.12s then, %.12s now): a merged migration was edited, so databases that already ran it never see the change; "+
				"restore it and put the change in a new migration", now.file, v, then.file, then.sha256, now.sha256)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrations: cannot read checksums: %w", err)
	}
	return nil
}

// recordChecksums records, in one statement, the checksum of every applied
// migration that has none yet (those this Up applied, or applied before the
// table existed); ON CONFLICT keeps the first record.
func recordChecksums(ctx context.Context, db *sql.DB, sums map[int64]checksum) error {
	versions, names, shas := make([]int64, 0, len(sums)), make([]string, 0, len(sums)), make([]string, 0, len(sums))
	for v, c := range sums {
		versions, names, shas = append(versions, v), append(names, c.file), append(shas, c.sha256)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO converge_migration_checksums (version, file, sha256)
		SELECT m.version, m.file, m.sha256 FROM unnest($1::bigint[], $2::text[], $3::text[]) AS m(version, file, sha256)
		 WHERE EXISTS (SELECT 1 FROM goose_db_version g WHERE g.version_id = m.version AND g.is_applied)
		ON CONFLICT (version) DO NOTHING`, versions, names, shas); err != nil {
		return fmt.Errorf("migrations: cannot record checksums: %w", err)
	}
	return nil
}
