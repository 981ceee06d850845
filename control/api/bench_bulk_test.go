package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// bulkN is how many leaf resources each half of a BenchmarkBulkApply round
// writes.
const bulkN = 10_000

// BenchmarkBulkApply measures POST /api/v1/resources:batch (issue #13): 10,000
// leaf resources in one request over a real loopback listener, each
// validated against its kind's schema, written with its event and spec
// revision and scheduled (one work row each) — against, in the same run on
// the same database, one bare multi-row INSERT of the same rows into
// resources. Each round uses fresh kinds (nothing to update, no conflict)
// and runs both halves back to back; the figures are the medians of
// benchRounds rounds. The goal is a ratio of 0.3, the moonshot 0.5.
//
//	go test ./control/api -run '^$' -bench BenchmarkBulkApply -benchtime 1x
func BenchmarkBulkApply(b *testing.B) {
	if testing.Short() {
		b.Skip("needs a database; skipped under -short")
	}
	ctx := context.Background()
	db := pgtest.New(b)
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, nil)
	if err := kinds.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kinds.Stop)
	srv, err := api.New(api.Config{BatchMaxItems: bulkN, RequestTimeout: 5 * time.Minute}, st, kinds, nil)
	if err != nil {
		b.Fatal(err)
	}
	base := apitest.Serve(b, srv)
	client := &http.Client{}
	b.Cleanup(client.CloseIdleConnections)

	const (
		labels = `{"team":"bench"}`
		spec   = `{"image":"nginx:1.27","replicas":3}`
	)
	publish := func(kind string) {
		manifest := fmt.Sprintf(`{"kind":%q,"kind_version":1,
		  "spec_schema":{"type":"object","properties":{"image":{"type":"string"},"replicas":{"type":"integer","minimum":0}},
		    "required":["image"],"additionalProperties":false},
		  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, kind)
		if code, out := benchDo(client, http.MethodPut, base+"/api/v1/kinds/"+kind+"/manifest", []byte(manifest)); code != http.StatusCreated {
			b.Fatalf("publish %s: %d %s", kind, code, out)
		}
	}
	names := make([]string, bulkN)
	for i := range names {
		names[i] = fmt.Sprintf("leaf-%05d", i)
	}
	viaBatch := func(kind string) time.Duration {
		var body bytes.Buffer
		body.WriteString(`{"items":[`)
		for i, name := range names {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"kind":%q,"kind_version":1,"name":%q,"labels":%s,"spec":%s}`, kind, name, labels, spec)
		}
		body.WriteString(`]}`)
		start := time.Now()
		code, out := benchDo(client, http.MethodPost, base+"/api/v1/resources:batch", body.Bytes())
		took := time.Since(start)
		var res struct{ Created int }
		if code != http.StatusOK || json.Unmarshal(out, &res) != nil || res.Created != bulkN {
			b.Fatalf("batch %s: %d %.300s", kind, code, out)
		}
		return took
	}
	viaInsert := func(kind string) time.Duration {
		kindCol, versions, labelCol, specs := make([]string, bulkN), make([]int16, bulkN), make([]string, bulkN), make([]string, bulkN)
		for i := range names {
			kindCol[i], versions[i], labelCol[i], specs[i] = kind, 1, labels, spec
		}
		start := time.Now()
		tag, err := db.Pool.Exec(ctx, `INSERT INTO resources (kind, kind_version, name, labels, spec)
			SELECT * FROM unnest($1::text[], $2::smallint[], $3::text[], $4::jsonb[], $5::jsonb[])`,
			kindCol, versions, names, labelCol, specs)
		took := time.Since(start)
		if err != nil || tag.RowsAffected() != bulkN {
			b.Fatalf("insert %s: %v (%d rows)", kind, err, tag.RowsAffected())
		}
		return took
	}

	// Warm up both paths, then let the planner see the tables as
	// autovacuum would.
	publish("warm-batch")
	publish("warm-insert")
	viaBatch("warm-batch")
	viaInsert("warm-insert")
	if _, err := db.Pool.Exec(ctx, `ANALYZE resources, work_queue, resource_events, resource_spec_history`); err != nil {
		b.Fatal(err)
	}

	var batchRates, insertRates, ratios []float64
	b.ResetTimer()
	for round := range benchRounds {
		bk, ik := fmt.Sprintf("batch-%d", round), fmt.Sprintf("insert-%d", round)
		publish(bk)
		publish(ik)
		bt := viaBatch(bk)
		it := viaInsert(ik)
		br, ir := bulkN/bt.Seconds(), bulkN/it.Seconds()
		batchRates, insertRates, ratios = append(batchRates, br), append(insertRates, ir), append(ratios, br/ir)
		b.Logf("round %d: batch %.0f/s (%s), insert %.0f/s (%s), ratio %.3f", round, br, bt.Round(time.Millisecond), ir, it.Round(time.Millisecond), br/ir)
	}
	b.StopTimer()
	b.ReportMetric(median(batchRates), "batch-resources/s")
	b.ReportMetric(median(insertRates), "insert-rows/s")
	b.ReportMetric(median(ratios), "ratio")
	b.Logf("medians of %d rounds of %d: batch %.0f/s, bare insert %.0f/s, ratio %.3f (goal 0.3, moonshot 0.5)",
		benchRounds, bulkN, median(batchRates), median(insertRates), median(ratios))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
