package benchq_test

import (
	"testing"

	"github.com/convergeplane/converge/internal/testkit/benchq"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Both baselines run to completion on the real schema: Run and Floor fail
// if a row is left behind, so a schema change that breaks the floor's SQL
// (or makes it skip rows) fails here rather than in a benchmark run.
func TestBaselines(t *testing.T) {
	db := pgtest.New(t)
	q, err := benchq.Run(t.Context(), db.Pool, 600, benchq.Config{Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	f, err := benchq.Floor(t.Context(), db.Pool, 600, benchq.FloorConfig{ClaimBatch: 64})
	if err != nil {
		t.Fatal(err)
	}
	if q <= 0 || f <= 0 {
		t.Fatalf("rates must be positive: Q %.0f/s, F %.0f/s", q, f)
	}
	// Every task's phase change to Ready was logged, and nothing else: the
	// floor pays for the events the engine writes.
	for typ, per := range map[string]int{"succeeded": 1, "scheduled": 0, "claimed": 0} {
		var events int
		if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM resource_events e JOIN resources r ON r.id = e.resource_id
			WHERE r.kind = 'benchfloor' AND e.type = $1`, typ).Scan(&events); err != nil {
			t.Fatal(err)
		}
		if want := per * (600 + 60); events != want { // the run and its warm-up
			t.Errorf("floor wrote %d %s events, want %d", events, typ, want)
		}
	}
	// The serial floor runs the same statements one at a time: every task
	// is claimed and completed, and each stage took time.
	st, err := benchq.FloorSerial(t.Context(), db.Pool, 300, benchq.FloorConfig{ClaimBatch: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st.Schedule <= 0 || st.Claim <= 0 || st.Complete <= 0 {
		t.Fatalf("every serial stage must take time: %+v", st)
	}
	var lagging int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM resources WHERE kind = 'benchfloor' AND synced_gen < generation`).Scan(&lagging); err != nil {
		t.Fatal(err)
	}
	if lagging != 0 {
		t.Errorf("%d floor resources still lag after the serial run", lagging)
	}
}
