package migrations_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/migrations"
)

// releasedFS returns the migrations of the last release before the collapse
// (00001-00011), exactly as released.
func releasedFS(t *testing.T) fstest.MapFS {
	t.Helper()
	f, err := os.Open("testdata/released-00011.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // read-only
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	if len(out) != 11 {
		t.Fatalf("released fixture holds %d files, want 00001-00011", len(out))
	}
	return out
}

// applyReleased builds db as the released binary did: goose over the
// released files up to version to, and their checksums recorded.
func applyReleased(t *testing.T, db *pgtest.Database, to int64) {
	t.Helper()
	ctx := ctxT(t)
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	defer sqlDB.Close() // test cleanup
	released := releasedFS(t)
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, released, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, to); err != nil {
		t.Fatalf("apply the released migrations up to %d: %v", to, err)
	}
	if to < 7 { // 00007 creates the checksums table
		return
	}
	for name, f := range released {
		v, err := goose.NumericComponent(name)
		if err != nil || v > to {
			continue
		}
		sum := sha256.Sum256(f.Data)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO converge_migration_checksums (version, file, sha256) VALUES ($1, $2, $3)`,
			v, name, hex.EncodeToString(sum[:])); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUpgradeFromRelease: a database built by the last release, holding
// data, upgrades in place to exactly the schema a fresh database gets
// (functions and triggers included, so nothing the engine no longer defines
// is left behind), and its data survives. When the collapse landed, every
// released function also kept its definition byte for byte but for the
// manifest-legality CHECK turned trigger; the engine has moved on since, so
// that is no longer asserted.
func TestUpgradeFromRelease(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)

	upgraded := pgtest.NewEmpty(t)
	applyReleased(t, upgraded, 11)
	// One transaction: schedule_applied schedules what this transaction wrote.
	tx, err := upgraded.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var resourceID string
	if err := tx.QueryRow(ctx, `
		WITH k AS (
			INSERT INTO kind_manifest (kind, kind_version, reactions)
			VALUES ('widget', 1, '[{"name": "make", "trigger": "specChange", "emits": ["status"]}]')
			RETURNING kind)
		INSERT INTO resources (kind, kind_version, name, spec)
		SELECT kind, 1, 'w1', '{"size": 3}' FROM k RETURNING id`).Scan(&resourceID); err != nil {
		t.Fatalf("insert a kind and a resource: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT schedule_applied('widget', 'w1')`); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var logs logbuf.Buffer
	if err := migrations.Up(ctx, upgraded.DSN, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("Up over the released schema: %v", err)
	}
	t.Logf("upgrade:\n%s", logs.String())
	if got := strings.Count(logs.String(), "engine file applied"); got != len(engineFiles(t)) {
		t.Errorf("the upgrade applied %d engine files, want all %d", got, len(engineFiles(t)))
	}

	// Status still reports the released history, then 00012, then the engine.
	var status bytes.Buffer
	if err := migrations.Status(ctx, upgraded.DSN, &status); err != nil {
		t.Fatalf("Status: %v", err)
	}
	t.Logf("status:\n%s", status.String())
	for v := 1; v <= 11; v++ {
		re := regexp.MustCompile(`(?m)^` + strconv.Itoa(v) + `\s+applied\s+\S+\s+\(released; collapsed into 00012_engine_home\.sql\)$`)
		if !re.MatchString(status.String()) {
			t.Errorf("Status after the upgrade has no line for released version %d", v)
		}
	}
	if !regexp.MustCompile(`(?m)^12\s+applied\s`).MatchString(status.String()) ||
		!regexp.MustCompile(`(?m)^engine/claims\.sql\s+applied\s`).MatchString(status.String()) {
		t.Errorf("Status after the upgrade: want 12 and the engine applied")
	}

	fresh := pgtest.NewEmpty(t)
	if err := migrations.Up(ctx, fresh.DSN, nil); err != nil {
		t.Fatalf("Up on an empty database: %v", err)
	}

	if diff := cmp.Diff(catalogue(t, fresh.Pool), catalogue(t, upgraded.Pool)); diff != "" {
		t.Errorf("catalogue (-fresh +upgraded):\n%s", diff)
	}
	if fromFresh, ok := dump(t, fresh.DSN); ok {
		fromUpgraded, _ := dump(t, upgraded.DSN)
		if diff := cmp.Diff(fromFresh, fromUpgraded); diff != "" {
			t.Errorf("pg_dump --schema-only (-fresh +upgraded):\n%s", diff)
		}
	}

	var name, spec, phase, namespace string
	var queued int
	if err := upgraded.Pool.QueryRow(ctx, `
		SELECT r.name, r.spec::text, r.phase, (SELECT count(*) FROM work_queue w WHERE w.resource_id = r.id AND w.namespace = r.namespace),
		       r.namespace
		  FROM resources r WHERE r.id = $1`, resourceID).Scan(&name, &spec, &phase, &queued, &namespace); err != nil {
		t.Fatalf("read the resource back: %v", err)
	}
	if name != "w1" || spec != `{"size": 3}` || phase != "Reconciling" || queued != 1 || namespace != "default" {
		t.Errorf("after the upgrade the resource is %s %s %s in namespace %q with %d queued task(s) of its namespace; "+
			"want w1 {\"size\": 3} Reconciling in default with 1", name, spec, phase, namespace, queued)
	}

	// The manifest CHECK is a trigger now, failing the same way.
	_, err = upgraded.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('gadget', 1, '[{"name": "x"}]')`)
	var pe interface {
		SQLState() string
	}
	if !errors.As(err, &pe) || pe.SQLState() != "23514" || !strings.Contains(err.Error(), `check constraint "kind_manifest_legal"`) {
		t.Errorf("an illegal manifest after the upgrade: %v; want SQLSTATE 23514 naming kind_manifest_legal", err)
	}
}

// TestEngine: a second Up applies nothing; an engine file whose recorded
// checksum differs (edited since it was applied) is applied again, alone.
func TestEngine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
		t.Fatalf("Up: %v", err)
	}

	var second logbuf.Buffer
	if err := migrations.Up(ctx, b.db.DSN, slog.New(slog.NewTextHandler(&second, nil))); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if second.Len() != 0 {
		t.Errorf("a second Up logged\n%s\nwant nothing applied", second.String())
	}

	// Edited since applied: the recorded checksum differs. The function it
	// holds went missing meanwhile, to show that the file really runs.
	file := "engine/claims.sql"
	if _, err := b.db.Pool.Exec(ctx, `UPDATE converge_engine_checksums SET sha256 = 'edited' WHERE file = $1`, file); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `DROP FUNCTION release_tasks`); err != nil {
		t.Fatal(err)
	}
	var third logbuf.Buffer
	if err := migrations.Up(ctx, b.db.DSN, slog.New(slog.NewTextHandler(&third, nil))); err != nil {
		t.Fatalf("Up after an engine edit: %v", err)
	}
	t.Logf("third Up:\n%s", third.String())
	if got := strings.Count(third.String(), "engine file applied"); got != 1 || !strings.Contains(third.String(), "file="+file) {
		t.Errorf("Up after editing %s logged\n%s\nwant that file, alone, applied", file, third.String())
	}
	var restored bool
	if err := b.db.Pool.QueryRow(ctx, `SELECT to_regproc('release_tasks') IS NOT NULL`).Scan(&restored); err != nil {
		t.Fatal(err)
	}
	if !restored {
		t.Error("release_tasks is still missing: the edited file was not applied")
	}
	var recorded string
	if err := b.db.Pool.QueryRow(ctx, `SELECT sha256 FROM converge_engine_checksums WHERE file = $1`, file).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	body, err := fs.ReadFile(migrations.FS(), file)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(body); recorded != hex.EncodeToString(sum[:]) {
		t.Errorf("recorded sha256 of %s = %s, want the embedded file's", file, recorded)
	}
}

// TestRefusesPartialHistory: a database of the released history that is not
// at 00011 is refused, with the version named, and left as it was.
func TestRefusesPartialHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	applyReleased(t, b.db, 10)
	err := migrations.Up(ctx, b.db.DSN, b.log)
	if err == nil || !strings.Contains(err.Error(), "at migration 10") || !strings.Contains(err.Error(), "00012_engine_home.sql") {
		t.Fatalf("Up over a database at 10 = %v; want a refusal naming version 10 and 00012_engine_home.sql", err)
	}
	want := map[int64]int{}
	for v := int64(1); v <= 10; v++ {
		want[v] = 1
	}
	if diff := cmp.Diff(want, appliedCounts(t, b.db.Pool)); diff != "" {
		t.Errorf("applied versions after the refusal (-want +got):\n%s", diff)
	}
}

// catalogue describes the public schema from the system catalogues, one
// sorted line per object or column. Column positions skip dropped columns,
// which an upgraded table keeps and a fresh one never had.
func catalogue(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `
		WITH rel AS (SELECT oid, relname FROM pg_class WHERE relnamespace = 'public'::regnamespace)
		SELECT format('relation %s kind=%s persistence=%s options=%s bound=%s', c.relname, c.relkind, c.relpersistence,
		              c.reloptions, pg_get_expr(c.relpartbound, c.oid))
		  FROM pg_class c JOIN rel USING (oid)
		UNION ALL
		SELECT format('column %s #%s %s %s notnull=%s default=%s identity=%s generated=%s', r.relname,
		              row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum), a.attname,
		              format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
		              a.attidentity, a.attgenerated)
		  FROM pg_attribute a JOIN rel r ON r.oid = a.attrelid
		  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT format('constraint %s %s %s local=%s inherited=%s', r.relname, c.conname, pg_get_constraintdef(c.oid),
		              c.conislocal, c.coninhcount)
		  FROM pg_constraint c JOIN rel r ON r.oid = c.conrelid
		UNION ALL
		SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN rel r ON r.oid = i.indexrelid
		UNION ALL
		SELECT format('inherits %s %s', i.inhrelid::regclass, i.inhparent::regclass)
		  FROM pg_inherits i JOIN rel r ON r.oid = i.inhrelid
		UNION ALL
		SELECT format('sequence %s %s %s %s %s', s.seqrelid::regclass, format_type(s.seqtypid, NULL), s.seqstart,
		              s.seqincrement, s.seqcache)
		  FROM pg_sequence s JOIN rel r ON r.oid = s.seqrelid
		UNION ALL
		SELECT 'trigger ' || pg_get_triggerdef(g.oid) FROM pg_trigger g JOIN rel r ON r.oid = g.tgrelid WHERE NOT g.tgisinternal
		UNION ALL
		SELECT 'function ' || pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
		UNION ALL
		SELECT format('type %s %s', y.typname, y.typtype) FROM pg_type y
		 WHERE y.typnamespace = 'public'::regnamespace
		ORDER BY 1`)
	if err != nil {
		t.Fatalf("read the catalogue: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the catalogue: %v", err)
	}
	return lines
}

// dump returns pg_dump --schema-only of the database, or false (and logs
// why) when no pg_dump on PATH can dump this server; the catalogue
// comparison stands alone then.
func dump(t *testing.T, dsn string) ([]string, bool) {
	t.Helper()
	path, err := exec.LookPath("pg_dump")
	if err != nil {
		t.Logf("no pg_dump on PATH; comparing the catalogues only")
		return nil, false
	}
	cmd := exec.CommandContext(ctxT(t), path, "--schema-only", "--no-owner", "--dbname="+dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// e.g. "server version mismatch": a pg_dump older than the server.
		t.Logf("pg_dump cannot dump this server (%v: %s); comparing the catalogues only", err, strings.TrimSpace(stderr.String()))
		return nil, false
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		// pg_dump 15.14+ fences the script with a random key.
		if strings.HasPrefix(l, `\restrict `) || strings.HasPrefix(l, `\unrestrict `) {
			continue
		}
		lines = append(lines, l)
	}
	return lines, true
}
