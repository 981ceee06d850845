package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestBatchID(t *testing.T) {
	t.Parallel()
	a := []model.Task{{ID: "a", ClaimEpoch: 1}, {ID: "b", ClaimEpoch: 2}}
	id := wire.BatchID(a)
	if !strings.HasPrefix(id, "msg_batch_") || len(id) != len("msg_batch_")+32 {
		t.Fatalf("BatchID = %q", id)
	}
	if wire.BatchID([]model.Task{{ID: "a", ClaimEpoch: 1}, {ID: "b", ClaimEpoch: 2}}) != id {
		t.Error("the same claims gave another webhook-id")
	}
	if wire.BatchID([]model.Task{{ID: "a", ClaimEpoch: 1}, {ID: "b", ClaimEpoch: 3}}) == id {
		t.Error("a new claim kept the batch's webhook-id")
	}
}

func TestDecodeBatch(t *testing.T) {
	t.Parallel()
	tasks := []model.Task{{ID: "a", ClaimEpoch: 1}, {ID: "b", ClaimEpoch: 2}, {ID: "c", ClaimEpoch: 3}}
	type got struct {
		Result   webhooksdk.Result
		Accepted bool
		Bad      bool
	}
	outcome := webhooksdk.Result{TaskID: "a", ClaimEpoch: 1, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"x":1}`)}}
	tests := []struct {
		name string
		body string
		want []got
	}{
		{"mixed", `{"type":"batch","results":[
			{"task_id":"c","claim_epoch":3,"accepted":true},
			{"task_id":"a","claim_epoch":1,"outcome":{"status":{"x":1}}},
			{"task_id":"b","claim_epoch":2,"error":{"message":"no","terminal":true}}]}`,
			[]got{{Result: outcome}, {Result: webhooksdk.Result{TaskID: "b", ClaimEpoch: 2, Error: &webhooksdk.Error{Message: "no", Terminal: true}}}, {Accepted: true}}},
		{"missing", `{"type":"batch","results":[{"task_id":"a","outcome":{"status":{"x":1}}},{"task_id":"c","accepted":true}]}`,
			[]got{{Result: webhooksdk.Result{TaskID: "a", Outcome: outcome.Outcome}}, {Bad: true}, {Accepted: true}}},
		{"duplicated", `{"type":"batch","results":[{"task_id":"a","outcome":{}},{"task_id":"a","outcome":{}},
			{"task_id":"b","accepted":true},{"task_id":"b","error":{"message":"x"}},{"task_id":"c","accepted":true}]}`,
			[]got{{Bad: true}, {Bad: true}, {Accepted: true}}},
		{"unknown ignored", `{"type":"batch","results":[{"task_id":"z","outcome":{}},{"task_id":"a","outcome":{"status":{"x":1}}},
			{"task_id":"b","accepted":true},{"task_id":"c","accepted":true}, 7]}`,
			[]got{{Result: webhooksdk.Result{TaskID: "a", Outcome: outcome.Outcome}}, {Accepted: true}, {Accepted: true}}},
		{"results that do not decode fail their own tasks; null is absent", `{"type":"batch","results":[{"task_id":"a","outcome":"done"},
			{"task_id":"b","claim_epoch":"2","error":{"message":"x"}},{"outcome":"x"},null,{"task_id":"c","accepted":true,"outcome":null}]}`,
			[]got{{Bad: true}, {Bad: true}, {Accepted: true}}},
		{"stale epoch, accepted with an outcome, neither", `{"type":"batch","results":[{"task_id":"a","claim_epoch":9,"accepted":true},
			{"task_id":"b","accepted":true,"outcome":{}},{"task_id":"c"}]}`,
			[]got{{Bad: true}, {Bad: true}, {Bad: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			answers, err := wire.DecodeBatch([]byte(tc.body), tasks)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]got, len(answers))
			for i, a := range answers {
				if a.Err != nil && !errors.Is(a.Err, wire.ErrMalformedResult) {
					t.Errorf("answer %d: %v does not match ErrMalformedResult", i, a.Err)
				}
				out[i] = got{Result: a.Result, Accepted: a.Accepted, Bad: a.Err != nil}
				if a.Err != nil && (a.Accepted || a.Result.Outcome != nil || a.Result.Error != nil) {
					t.Errorf("answer %d is refused (%v) yet carries %+v", i, a.Err, a)
				}
			}
			if d := cmp.Diff(tc.want, out); d != "" {
				t.Errorf("answers (-want +got):\n%s", d)
			}
		})
	}
	// A result that does not decode is reported as itself, not as missing.
	answers, err := wire.DecodeBatch([]byte(`{"type":"batch","results":[{"task_id":"a","outcome":"done"}]}`), tasks[:1])
	if err != nil || answers[0].Err == nil || !strings.Contains(answers[0].Err.Error(), "cannot unmarshal") {
		t.Errorf("a result that does not decode = %v, %+v; want its decode error", err, answers)
	}
	for _, body := range []string{`{"task_id":"a","outcome":{}}`, `{"type":"task","results":[]}`, `[]`, `nope`} {
		if _, err := wire.DecodeBatch([]byte(body), tasks); !errors.Is(err, wire.ErrMalformedResult) {
			t.Errorf("DecodeBatch(%s) = %v, want ErrMalformedResult", body, err)
		}
	}
}

// TestBatchDocExample: the dispatcher reads docs/protocol.md §16.6's batch
// response (webhooksdk/testdata, which the doc quotes) as documented — one
// outcome, one accepted — and the example's webhook-id is BatchID's.
func TestBatchDocExample(t *testing.T) {
	t.Parallel()
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var req webhooksdk.Batch
	if err := json.Unmarshal(read("../../webhooksdk/testdata/batch_request.json"), &req); err != nil {
		t.Fatal(err)
	}
	tasks := make([]model.Task, len(req.Tasks))
	for i, env := range req.Tasks {
		tasks[i] = model.Task{ID: env.TaskID, ClaimEpoch: env.ClaimEpoch}
	}
	if id := wire.BatchID(tasks); !strings.Contains(string(read("../../docs/protocol.md")), "webhook-id: "+id+"\n") {
		t.Errorf("the doc's example does not carry the batch's webhook-id %s", id)
	}
	answers, err := wire.DecodeBatch(read("../../webhooksdk/testdata/batch_response.json"), tasks)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Answer{
		{Result: webhooksdk.Result{TaskID: tasks[0].ID, ClaimEpoch: 7, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"vpc_id":"vpc-0a1b2c3d"}`)}}},
		{Accepted: true},
	}
	if d := cmp.Diff(want, answers); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
}

// BenchmarkDecodeBatch reads a 32-task batch answer (every task an outcome
// with a small status, the batched benchmark's shape) against the bare decode
// of the same body into its documented types, in the same run: the ratio is
// what DecodeBatch's checks cost over one pass of encoding/json.
func BenchmarkDecodeBatch(b *testing.B) {
	tasks := make([]model.Task, 32)
	results := make([]string, len(tasks))
	for i := range tasks {
		tasks[i] = model.Task{ID: fmt.Sprintf("0193b7a0-0000-7000-8000-%012d", i), ClaimEpoch: 1}
		results[i] = fmt.Sprintf(`{"task_id":%q,"claim_epoch":1,"outcome":{"status":{"ready":true,"replicas":3,"endpoint":"https://svc-%d.example.com"}}}`, tasks[i].ID, i)
	}
	body := []byte(`{"type":"batch","results":[` + strings.Join(results, ",") + `]}`)
	bare := func() {
		var r struct {
			Type    string                   `json:"type"`
			Results []webhooksdk.BatchResult `json:"results"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Results) != len(tasks) {
			b.Fatal(err)
		}
	}
	decode := func() {
		answers, err := wire.DecodeBatch(body, tasks)
		if err != nil || answers[31].Err != nil || answers[31].Result.Outcome == nil {
			b.Fatal(err, answers[31].Err)
		}
	}
	var tBare, tDecode time.Duration
	for b.Loop() {
		start := time.Now()
		bare()
		mid := time.Now()
		decode()
		tBare += mid.Sub(start)
		tDecode += time.Since(mid)
	}
	b.ReportMetric(float64(tDecode)/float64(tBare), "×bare")
	b.ReportMetric(float64(tDecode.Nanoseconds())/float64(b.N), "decode-ns/op")
}
