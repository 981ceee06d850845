package dispatch_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/workload"
)

// BenchmarkLatencyStages breaks the latency benchmark's figure (claim →
// resource updated) into stages, from database timestamps: queued →
// claimed (the claim transaction's start; both kept on the resource as
// last_enqueued_at and last_claimed_at), → the claim statement's end, →
// applied (the start of the completion transaction that applied the
// outcome: the resource's updated_at). It feeds 2,000 leaves/s for 3 s
// through the inline HTTP path (as benchLatency does) with a logging
// trigger added to its private database, and prints p50/p90/p99/max per
// stage. A tool for finding where the tail comes from; BenchmarkDispatch
// reports the figure itself.
//
// Run: go test ./dispatch -run '^$' -bench LatencyStages -benchtime 1x
func BenchmarkLatencyStages(b *testing.B) {
	const rate = 2000
	for range b.N {
		x := workload.NewDispatch(b, workload.Target{MaxBatch: 1})
		x.Exec(`CREATE TABLE stage_log (resource_id uuid, stage text, t timestamptz)`)
		x.Exec(`CREATE FUNCTION stage_claimed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			INSERT INTO stage_log SELECT resource_id, 'claim statement done', clock_timestamp() FROM nr WHERE state = 'claimed'; RETURN NULL; END $$`)
		x.Exec(`CREATE TRIGGER stage_claimed AFTER UPDATE ON work_queue REFERENCING NEW TABLE AS nr
			FOR EACH STATEMENT EXECUTE FUNCTION stage_claimed()`)
		fmt.Printf("fed %.0f/s (asked %d/s)\n", feed(x, rate, 3*rate), rate)
		waitFor(b, time.Minute, "the run to converge", func() bool {
			var lagging bool
			must(b, x.DB.DB.Pool.QueryRow(x.Context(), `SELECT EXISTS (SELECT 1 FROM resources WHERE synced_gen < generation)`).Scan(&lagging))
			return !lagging
		})
		rows, err := x.DB.DB.Pool.Query(x.Context(), `
		WITH e AS (
		  SELECT r.last_enqueued_at s, r.last_claimed_at c,
		         (SELECT t FROM stage_log WHERE resource_id = r.id AND stage = 'claim statement done' ORDER BY t DESC LIMIT 1) ce,
		         r.updated_at d
		    FROM resources r)
		SELECT stage, percentile_cont(0.5) WITHIN GROUP (ORDER BY v), percentile_cont(0.9) WITHIN GROUP (ORDER BY v),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY v), max(v)
		  FROM (SELECT 1 k, 'queued -> claimed' stage, 1000 * extract(epoch FROM c - s) v FROM e
		        UNION ALL SELECT 2, 'claimed -> claim statement done', 1000 * extract(epoch FROM ce - c) FROM e
		        UNION ALL SELECT 3, 'claim statement done -> applied', 1000 * extract(epoch FROM d - ce) FROM e
		        UNION ALL SELECT 4, 'claimed -> applied (the benchmark''s figure)', 1000 * extract(epoch FROM d - c) FROM e) x
		 GROUP BY k, stage ORDER BY k`)
		must(b, err)
		for rows.Next() {
			var stage string
			var p50, p90, p99, mx float64
			must(b, rows.Scan(&stage, &p50, &p90, &p99, &mx))
			fmt.Printf("%-45s p50 %6.1f  p90 %6.1f  p99 %6.1f  max %6.1f ms\n", stage, p50, p90, p99, mx)
		}
		must(b, rows.Err())
		x.Close()
	}
}
