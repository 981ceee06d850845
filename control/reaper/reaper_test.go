package reaper_test

import (
	"context"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPassDropsExpiredIdempotencyKeys: a pass deletes the idempotency keys
// past their retention and keeps the rest.
func TestPassDropsExpiredIdempotencyKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (caller, key, request, owner, lease_until, status, expires_at)
		SELECT '', 'k' || i, '', NULL, now(), 200, now() + CASE WHEN i <= 3 THEN interval '-1 minute' ELSE interval '1 hour' END
		  FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	r, err := reaper.New(reaper.Config{}, engine.New(db.Pool, engine.Config{}), store.New(db.Pool, store.Config{}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != "k4" || left[1] != "k5" {
		t.Fatalf("keys left %v, want the two live ones (k4, k5)", left)
	}
}

// TestPhaseCountOnOnePod: the reaper whose range starts at shard 0 exports
// converge_resources by kind and phase; one whose range starts elsewhere
// exports no series.
func TestPhaseCountOnOnePod(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version) VALUES ('widget', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO resources (kind, kind_version, name, spec_gen, synced_gen)
		SELECT 'widget', 1, 'w' || i, CASE WHEN i <= 2 THEN 1 ELSE 0 END, CASE WHEN i <= 2 THEN 1 ELSE 0 END FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	start := func(lo, hi int) *prometheus.Registry {
		reg := prometheus.NewRegistry()
		r, err := reaper.New(reaper.Config{Range: func() (int, int) { return lo, hi }, PhaseCountEvery: 20 * time.Millisecond, Metrics: reg},
			engine.New(db.Pool, engine.Config{}), store.New(db.Pool, store.Config{}), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		return reg
	}
	counting, other := start(0, 127), start(128, 255)
	phases := func(reg *prometheus.Registry) map[string]float64 {
		out := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "converge_resources" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out[l["kind"]+"/"+l["kind_version"]+"/"+l["phase"]] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	want := map[string]float64{"widget/1/Ready": 2, "widget/1/Reconciling": 3}
	deadline := time.Now().Add(10 * time.Second)
	for !maps.Equal(phases(counting), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := phases(counting); !maps.Equal(got, want) {
		t.Fatalf("the shard-0 reaper's converge_resources = %v, want %v", got, want)
	}
	if got := phases(other); len(got) != 0 {
		t.Fatalf("a reaper not holding shard 0 exports converge_resources %v, want none", got)
	}
}

// TestPassPrunesTheAuditTrail: a pass deletes the audit entries older than
// AuditRetention and keeps the rest.
func TestPassPrunesTheAuditTrail(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	st := store.New(db.Pool, store.Config{})
	for i := range 5 {
		if _, err := st.RecordAudit(ctx, store.AuditEntry{Subject: "token:admin-0", Method: "POST", Route: "/api/v1/resources",
			Path: "/api/v1/resources", Namespace: "default", RequestID: "r" + strconv.Itoa(i), Status: 201, Outcome: store.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
	// The first three are two days old; the retention is one.
	if _, err := db.Pool.Exec(ctx, `UPDATE audit_log SET at = now() - interval '2 days' WHERE request_id IN ('r0', 'r1', 'r2')`); err != nil {
		t.Fatal(err)
	}
	r, err := reaper.New(reaper.Config{AuditRetention: 24 * time.Hour}, engine.New(db.Pool, engine.Config{}), st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	page, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range page.Items {
		left = append(left, e.RequestID)
	}
	if strings.Join(left, ",") != "r4,r3" {
		t.Fatalf("entries left %v, want the two within the retention (r4, r3)", left)
	}
}
