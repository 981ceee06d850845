// Package migrations holds Converge's SQL, embedded in the binary, and
// applies it. README.md in this directory says where each kind of change
// goes, and why.
//
// There are two kinds of file:
//
//   - Numbered migrations (NNNNN_name.sql, this directory) carry the DDL:
//     tables, columns, constraints, indexes, types, and the DROP FUNCTION a
//     signature change needs. goose applies each once, in order. They are
//     never edited once merged: Up records each applied file's sha256 and
//     refuses a database whose record differs from the embedded file. They
//     are written in goose format ("-- +goose Up" / "-- +goose Down").
//   - Engine files (engine/*.sql) hold every plpgsql function and its
//     trigger, one file per concern, written CREATE OR REPLACE: the live
//     text, in one place. After the numbered migrations Up applies each
//     engine file whose sha256 differs from the one recorded in
//     converge_engine_checksums (what Flyway calls repeatable migrations),
//     in lexical order, with check_function_bodies off, all in one
//     transaction that also records the new checksums.
//
// Every pod runs Up at boot. Up, Down and Status hold one session-level
// advisory lock in the target database for the whole run, numbered
// migrations and engine alike, so when several pods start at once exactly
// one applies while the others wait for it and then find nothing to do, and
// no pod starts on new tables with old functions. Advisory locks are per
// database, so migrating different databases on one server (test templates)
// never contends.
//
// 00012_engine_home.sql collapsed the released history (00001-00011) into
// one migration that upgrades a database at 00011 in place; Up refuses a
// database that applied only part of that history.
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// LockWaitDefault is how long Up, Down and Status wait for another process
// that holds the migration lock, e.g. a pod applying a slow migration.
const LockWaitDefault = 10 * time.Minute

// lockID keys the migration lock. It is the key goose's session locker
// used, which released binaries still take: a pod of an older release and
// one of this release migrating the same database at once still exclude
// each other.
const lockID = lock.DefaultLockID

const (
	// lastReleased is the last numbered migration released before
	// collapseFile replaced the history; the only earlier state that
	// collapseFile upgrades.
	lastReleased = 11
	collapseFile = "00012_engine_home.sql"
	engineDir    = "engine"
)

//go:embed *.sql engine/*.sql
var files embed.FS // read-only: embedded at build time

// FS returns the embedded files, for tools that inspect them: the numbered
// migrations at the root, the engine under engine/.
func FS() fs.FS { return files }

// Up applies every pending numbered migration, then every engine file that
// changed. log receives one line per migration and per engine file applied;
// nil discards them. Concurrent callers against the same database are safe:
// one applies, the rest wait and then no-op. opts configure the connection
// (stdlib.OptionBeforeConnect sets a per-connection password, e.g. an RDS
// IAM token).
func Up(ctx context.Context, dsn string, log *slog.Logger, opts ...stdlib.OptionOpenDB) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return withLock(ctx, dsn, opts, func(db *sql.DB, conn *sql.Conn) error {
		if err := refusePartialHistory(ctx, conn); err != nil {
			return err
		}
		sums, err := fileChecksums()
		if err != nil {
			return err
		}
		if ok, err := checksumsTable(ctx, conn); err != nil {
			return err
		} else if ok {
			if err := verifyChecksums(ctx, conn, sums); err != nil {
				return err
			}
		}
		p, err := newProvider(db)
		if err != nil {
			return err
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
			log.DebugContext(ctx, "numbered migrations up to date")
		}
		if ok, err := checksumsTable(ctx, conn); err != nil {
			return err
		} else if ok {
			if err := recordChecksums(ctx, conn, sums); err != nil {
				return err
			}
		}
		return applyEngine(ctx, conn, log)
	})
}

// Down rolls back the most recently applied numbered migration, one step. It
// fails if nothing is applied. It does not apply the engine, but forgets the
// engine's checksums: a migration's Down may drop engine objects (a function
// and its triggers), and the next Up, of this release or an older one,
// applies every engine file again.
func Down(ctx context.Context, dsn string) error {
	return withLock(ctx, dsn, nil, func(db *sql.DB, conn *sql.Conn) error {
		p, err := newProvider(db)
		if err != nil {
			return err
		}
		r, err := p.Down(ctx)
		if err != nil {
			return fmt.Errorf("migrations: down: %w", err)
		}
		if ok, err := checksumsTable(ctx, conn); err != nil || !ok {
			return err
		}
		if _, err := conn.ExecContext(ctx, `DELETE FROM converge_migration_checksums WHERE version = $1`, r.Source.Version); err != nil {
			return fmt.Errorf("migrations: down: forget the checksum of %s: %w", r.Source.Path, err)
		}
		// The rolled-back migration may have dropped what an engine file
		// defines (a function, a trigger): forget every engine file's
		// checksum, so the next Up applies the whole engine.
		if ok, err := exists(ctx, conn, "converge_engine_checksums"); err != nil || !ok {
			return err
		}
		if _, err := conn.ExecContext(ctx, `DELETE FROM converge_engine_checksums`); err != nil {
			return fmt.Errorf("migrations: down: forget the engine's checksums: %w", err)
		}
		return nil
	})
}

// Status writes the state of the schema to w: one line per numbered
// migration (its version, whether it is applied, and when, or pending, and
// its file; released versions collapsed into 00012 appear with no file),
// then one line per engine file: applied (the recorded checksum is the
// embedded file's), changed (recorded, but the file differs: the next Up
// re-applies it) or pending (never applied).
func Status(ctx context.Context, dsn string, w io.Writer) error {
	return withLock(ctx, dsn, nil, func(db *sql.DB, conn *sql.Conn) error {
		p, err := newProvider(db)
		if err != nil {
			return err
		}
		statuses, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("migrations: status: %w", err)
		}
		history, err := collapsedHistory(ctx, conn, statuses)
		if err != nil {
			return err
		}
		engine, err := engineStatus(ctx, conn)
		if err != nil {
			return err
		}

		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE") // checked at Flush
		for _, h := range history {
			fmt.Fprintf(tw, "%d\tapplied\t%s\t(released; collapsed into %s)\n",
				h.version, h.appliedAt.UTC().Format(time.RFC3339), collapseFile)
		}
		for _, s := range statuses {
			applied := "-"
			if s.State == goose.StateApplied {
				applied = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, applied, s.Source.Path)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("migrations: status: cannot write: %w", err)
		}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nENGINE FILE\tSTATE\tAPPLIED AT")
		for _, e := range engine {
			applied := "-"
			if !e.appliedAt.IsZero() {
				applied = e.appliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", e.file, e.state, applied)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("migrations: status: cannot write: %w", err)
		}
		return nil
	})
}

// Hash identifies the embedded SQL, numbered migrations and engine alike: it
// changes when any file is added, renamed or edited. Test helpers name
// template databases after it, so a schema or engine change produces a fresh
// template instead of reusing a stale one.
func Hash() string {
	var names []string
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		// The embedded FS always reads; reaching this is a build defect.
		panic(fmt.Sprintf("migrations: cannot list embedded files: %v", err))
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

// withLock runs fn holding the migration lock: a session-level advisory lock
// taken on conn, a connection pinned for the whole run. db is for goose,
// which takes connections of its own.
func withLock(ctx context.Context, dsn string, opts []stdlib.OptionOpenDB, fn func(db *sql.DB, conn *sql.Conn) error) (retErr error) {
	// pgxpool's parser: DATABASE_URL may carry the pool's settings
	// (pool_max_conns and the like), which pgx's own would send the server
	// as parameters it refuses.
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrations: bad DSN: %w", err)
	}
	// stdlib.OpenDB rather than sql.Open("pgx"): no dependence on the
	// driver registry that package's init populates.
	db := stdlib.OpenDB(*pcfg.ConnConfig, opts...)
	defer func() {
		if err := db.Close(); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("migrations: cannot close database: %w", err))
		}
	}()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: cannot connect: %w", err)
	}
	defer conn.Close() // db.Close reports; closing the session releases the lock anyway

	wait, cancel := context.WithTimeout(ctx, LockWaitDefault)
	defer cancel()
	if _, err := conn.ExecContext(wait, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		if ctx.Err() == nil && errors.Is(wait.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("migrations: another process has held the migration lock for %s "+
				"(a pod applying a slow migration?); giving up: %w", LockWaitDefault, err)
		}
		return fmt.Errorf("migrations: cannot take the migration lock: %w", err)
	}
	defer func() {
		// Detached: the run's context may be done, and the lock must go.
		// If the unlock fails, closing the session (db.Close) releases it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lockID); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("migrations: cannot release the migration lock: %w", err))
		}
	}()
	return fn(db, conn)
}

// newProvider returns goose over the numbered migrations. goose reads the
// root of the FS only ("*.sql"), so it never sees engine/. It takes no lock
// of its own: withLock holds ours around the whole run.
func newProvider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		// Up logs results itself; goose's own log (verbose mode) echoes
		// every SQL statement.
		goose.WithSlog(slog.New(slog.DiscardHandler)),
		// Only the embedded SQL counts; ignore Go migrations that any
		// imported package may have registered globally with goose.
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: cannot create provider: %w", err)
	}
	return p, nil
}

// querier is what this package asks of a connection.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// exists reports whether the relation named exists.
func exists(ctx context.Context, q querier, relation string) (bool, error) {
	var ok bool
	if err := q.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, relation).Scan(&ok); err != nil {
		return false, fmt.Errorf("migrations: cannot look for %s: %w", relation, err)
	}
	return ok, nil
}

// refusePartialHistory refuses a database that applied some of the released
// history but not its last migration: collapseFile upgrades only a database
// at lastReleased, so an older one must first be brought there by a release
// that still carries 00001-00011.
func refusePartialHistory(ctx context.Context, q querier) error {
	if ok, err := exists(ctx, q, "goose_db_version"); err != nil || !ok {
		return err
	}
	var latest int64
	if err := q.QueryRowContext(ctx,
		`SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied AND version_id > 0`).Scan(&latest); err != nil {
		return fmt.Errorf("migrations: cannot read the applied versions: %w", err)
	}
	if latest > 0 && latest < lastReleased {
		return fmt.Errorf("migrations: this database is at migration %d, and this release upgrades only a database at %d "+
			"(or an empty one): %s replaced migrations 00001-%05d. Upgrade the database first with a release that "+
			"still carries them (any release before the collapse), then run this one",
			latest, lastReleased, collapseFile, lastReleased)
	}
	return nil
}

// checksum is an embedded migration's file name and sha256.
type checksum struct{ file, sha256 string }

// fileChecksums returns the checksum of every embedded numbered migration by
// version.
func fileChecksums() (map[int64]checksum, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: cannot list embedded files: %w", err)
	}
	sums := map[int64]checksum{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			continue // not a migration
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: cannot read embedded %s: %w", e.Name(), err)
		}
		sums[v] = checksum{e.Name(), sha256Hex(b)}
	}
	return sums, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// checksumsTable reports whether converge_migration_checksums exists yet.
func checksumsTable(ctx context.Context, q querier) (bool, error) {
	return exists(ctx, q, "converge_migration_checksums")
}

// verifyChecksums refuses to go on if an applied migration's recorded
// checksum differs from the embedded file: a merged migration was edited,
// and databases that already ran it never get the edit. Released versions
// no longer embedded (collapsed into 00012) are not compared.
func verifyChecksums(ctx context.Context, q querier, sums map[int64]checksum) error {
	rows, err := q.QueryContext(ctx, `SELECT version, file, sha256 FROM converge_migration_checksums ORDER BY version`)
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
func recordChecksums(ctx context.Context, q querier, sums map[int64]checksum) error {
	versions, names, shas := make([]int64, 0, len(sums)), make([]string, 0, len(sums)), make([]string, 0, len(sums))
	for v, c := range sums {
		versions, names, shas = append(versions, v), append(names, c.file), append(shas, c.sha256)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO converge_migration_checksums (version, file, sha256)
		SELECT m.version, m.file, m.sha256 FROM unnest($1::bigint[], $2::text[], $3::text[]) AS m(version, file, sha256)
		 WHERE EXISTS (SELECT 1 FROM goose_db_version g WHERE g.version_id = m.version AND g.is_applied)
		ON CONFLICT (version) DO NOTHING`, versions, names, shas); err != nil {
		return fmt.Errorf("migrations: cannot record checksums: %w", err)
	}
	return nil
}

// history is an applied version with no embedded file: released, and
// collapsed into collapseFile since.
type history struct {
	version   int64
	appliedAt time.Time
}

// collapsedHistory lists the applied versions that statuses (the embedded
// migrations) do not cover, ascending.
func collapsedHistory(ctx context.Context, q querier, statuses []*goose.MigrationStatus) ([]history, error) {
	embedded := map[int64]bool{}
	for _, s := range statuses {
		embedded[s.Source.Version] = true
	}
	rows, err := q.QueryContext(ctx, `SELECT version_id, max(tstamp) FROM goose_db_version
		WHERE is_applied AND version_id > 0 GROUP BY version_id ORDER BY version_id`)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: cannot read the applied versions: %w", err)
	}
	defer rows.Close()
	var out []history
	for rows.Next() {
		var h history
		if err := rows.Scan(&h.version, &h.appliedAt); err != nil {
			return nil, fmt.Errorf("migrations: status: cannot read the applied versions: %w", err)
		}
		if !embedded[h.version] {
			out = append(out, h)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: status: cannot read the applied versions: %w", err)
	}
	return out, nil
}

// engineFile is one embedded engine file.
type engineFile struct {
	name   string // "engine/claims.sql", as recorded
	sha256 string
	body   []byte
}

// engineFiles returns the embedded engine files in the order they are
// applied: lexical.
func engineFiles() ([]engineFile, error) {
	names, err := fs.Glob(files, engineDir+"/*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: cannot list the engine files: %w", err)
	}
	slices.Sort(names) // Glob sorts already; the order is the contract
	out := make([]engineFile, 0, len(names))
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("migrations: cannot read embedded %s: %w", name, err)
		}
		out = append(out, engineFile{name: name, sha256: sha256Hex(b), body: b})
	}
	return out, nil
}

// recordedEngine is an engine file's row in converge_engine_checksums.
type recordedEngine struct {
	sha256    string
	appliedAt time.Time
}

// readEngineChecksums returns the recorded engine checksums by file, or none
// if the table does not exist yet.
func readEngineChecksums(ctx context.Context, q querier) (map[string]recordedEngine, error) {
	recorded := map[string]recordedEngine{}
	if ok, err := exists(ctx, q, "converge_engine_checksums"); err != nil || !ok {
		return recorded, err
	}
	rows, err := q.QueryContext(ctx, `SELECT file, sha256, applied_at FROM converge_engine_checksums`)
	if err != nil {
		return nil, fmt.Errorf("migrations: cannot read the engine checksums: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			file string
			r    recordedEngine
		)
		if err := rows.Scan(&file, &r.sha256, &r.appliedAt); err != nil {
			return nil, fmt.Errorf("migrations: cannot read the engine checksums: %w", err)
		}
		recorded[file] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: cannot read the engine checksums: %w", err)
	}
	return recorded, nil
}

// applyEngine applies, in one transaction, every engine file whose checksum
// differs from the recorded one, in lexical order, and records the new
// checksums in the same transaction. check_function_bodies is off, as in a
// pg_dump restore: a function may name one defined in a later file, and
// bodies are checked when they first run. Records of files no longer
// embedded are forgotten, so a file that comes back is applied again.
func applyEngine(ctx context.Context, conn *sql.Conn, log *slog.Logger) error {
	engine, err := engineFiles()
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: engine: cannot begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SET LOCAL check_function_bodies = off`); err != nil {
		return fmt.Errorf("migrations: engine: %w", err)
	}
	recorded, err := readEngineChecksums(ctx, tx)
	if err != nil {
		return err
	}
	type done struct {
		file string
		took time.Duration
	}
	var applied []done
	names, shas := make([]string, 0, len(engine)), make([]string, 0, len(engine))
	for _, f := range engine {
		names = append(names, f.name)
		if r, ok := recorded[f.name]; ok && r.sha256 == f.sha256 {
			continue
		}
		begin := time.Now()
		// No arguments: the simple protocol, which runs the file's
		// statements one after another.
		if _, err := tx.ExecContext(ctx, string(f.body)); err != nil {
			return fmt.Errorf("migrations: engine: %s: %w", f.name, err)
		}
		applied = append(applied, done{f.name, time.Since(begin)})
		shas = append(shas, f.sha256)
	}
	appliedNames := make([]string, 0, len(applied))
	for _, a := range applied {
		appliedNames = append(appliedNames, a.file)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO converge_engine_checksums (file, sha256)
		SELECT * FROM unnest($1::text[], $2::text[])
		ON CONFLICT (file) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()`, appliedNames, shas); err != nil {
		return fmt.Errorf("migrations: engine: cannot record checksums: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM converge_engine_checksums WHERE file <> ALL ($1::text[])`, names); err != nil {
		return fmt.Errorf("migrations: engine: cannot forget removed files: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: engine: cannot commit: %w", err)
	}
	for _, a := range applied {
		log.InfoContext(ctx, "engine file applied", "file", a.file, "duration", a.took)
	}
	if len(applied) == 0 {
		log.DebugContext(ctx, "engine up to date")
	}
	return nil
}

// engineState is an engine file's line in Status.
type engineState struct {
	file      string
	state     string // applied, changed or pending
	appliedAt time.Time
}

func engineStatus(ctx context.Context, q querier) ([]engineState, error) {
	engine, err := engineFiles()
	if err != nil {
		return nil, err
	}
	recorded, err := readEngineChecksums(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]engineState, 0, len(engine))
	for _, f := range engine {
		r, ok := recorded[f.name]
		s := engineState{file: f.name, state: "pending"}
		if ok {
			s.appliedAt = r.appliedAt
			s.state = "applied"
			if r.sha256 != f.sha256 {
				s.state = "changed"
			}
		}
		out = append(out, s)
	}
	return out, nil
}
