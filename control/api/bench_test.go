package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// benchClients is how many clients apply concurrently, in every half.
const benchClients = 8

// benchRounds interleaves the halves, so machine noise (the runner is
// shared) falls on both alike rather than on whichever ran second.
const benchRounds = 5

// BenchmarkApply measures resource applies per second through the HTTP API
// (a real loopback listener, 8 concurrent clients, distinct names, a small
// spec validated against its schema, the resource scheduled with
// schedule_applied) and, in the same run on the same database, bare pgx
// INSERTs of the same rows into resources by 8 concurrent goroutines. It
// reports applies/s, inserts/s and their ratio (the goal is 0.25), plus
// store-applies/s — the same applies through store.ApplyResource without
// HTTP — which separates the HTTP layer's cost from the database's.
//
// A warm-up precedes the measurement and ends with ANALYZE, as autovacuum
// would on a live database. Beside the bare INSERT's row, an apply writes
// its applied event, its spec revision and its queue row (schedule_applied:
// a created resource takes one plain insert), in one transaction.
//
//	go test ./control/api -run '^$' -bench BenchmarkApply -benchtime 4000x
func BenchmarkApply(b *testing.B) {
	if testing.Short() {
		b.Skip("needs a database; skipped under -short")
	}
	db := pgtest.New(b)
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, nil)
	if err := kinds.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kinds.Stop)
	srv, err := api.New(api.Config{}, st, kinds, nil)
	if err != nil {
		b.Fatal(err)
	}
	base := apitest.Serve(b, srv)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
	b.Cleanup(client.CloseIdleConnections)

	manifest := `{"kind":"bench","kind_version":1,
	  "spec_schema":{"type":"object","properties":{"image":{"type":"string"},"replicas":{"type":"integer","minimum":0}},
	    "required":["image"],"additionalProperties":false},
	  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	if code, body := benchDo(client, http.MethodPut, base+"/api/v1/kinds/bench/manifest", []byte(manifest)); code != http.StatusCreated {
		b.Fatalf("publish: %d %s", code, body)
	}
	const (
		labels = `{"team":"bench"}`
		spec   = `{"image":"nginx:1.27","replicas":3}`
	)
	viaAPI := func(name string) error {
		body := fmt.Appendf(nil, `{"kind":"bench","kind_version":1,"name":%q,"labels":%s,"spec":%s}`, name, labels, spec)
		if code, out := benchDo(client, http.MethodPost, base+"/api/v1/resources", body); code != http.StatusCreated {
			return fmt.Errorf("apply %s: %d %s", name, code, out)
		}
		return nil
	}
	viaStore := func(name string) error {
		_, _, err := st.ApplyResource(context.Background(), store.ApplyResourceParams{Kind: "bench", KindVersion: 1, Name: name,
			Labels: map[string]string{"team": "bench"}, Spec: json.RawMessage(spec)})
		return err
	}
	viaInsert := func(name string) error {
		_, err := db.Pool.Exec(context.Background(),
			`INSERT INTO resources (kind, kind_version, name, labels, spec) VALUES ($1, $2, $3, $4, $5)`,
			"bench", 1, name, labels, spec)
		return err
	}

	// Warm up every path (connections, prepared statements, plan caches),
	// then let the planner see the table as autovacuum would.
	warm := max(b.N/10, 200)
	concurrently(b, warm, "warm-api", viaAPI)
	concurrently(b, warm, "warm-store", viaStore)
	concurrently(b, warm, "warm-sql", viaInsert)
	if _, err := db.Pool.Exec(context.Background(), `ANALYZE resources, work_queue, resource_events`); err != nil {
		b.Fatal(err)
	}

	var apiTime, storeTime, insertTime time.Duration
	per := max(b.N/benchRounds, 1)
	b.ResetTimer()
	for round := range benchRounds {
		apiTime += concurrently(b, per, fmt.Sprintf("api-%d", round), viaAPI)
		storeTime += concurrently(b, per, fmt.Sprintf("store-%d", round), viaStore)
		insertTime += concurrently(b, per, fmt.Sprintf("sql-%d", round), viaInsert)
	}
	b.StopTimer()

	n := float64(per * benchRounds)
	applies, stored, inserts := n/apiTime.Seconds(), n/storeTime.Seconds(), n/insertTime.Seconds()
	b.ReportMetric(applies, "applies/s")
	b.ReportMetric(stored, "store-applies/s")
	b.ReportMetric(inserts, "inserts/s")
	b.ReportMetric(applies/inserts, "ratio")
}

// concurrently runs op on n distinct names (prefix-0 ...) from benchClients
// goroutines and returns the wall time.
func concurrently(b *testing.B, n int, prefix string, op func(name string) error) time.Duration {
	b.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, benchClients)
	)
	start := time.Now()
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(fmt.Sprintf("%s-%d", prefix, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

func benchDo(c *http.Client, method, url string, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, out
}
