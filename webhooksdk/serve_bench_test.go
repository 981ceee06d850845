//go:build unix

package webhooksdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// noopProvider answers every task with an empty status at once.
type noopProvider struct{}

func (noopProvider) Kind() webhooksdk.KindVersion { return kvVPC }
func (noopProvider) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
}

// BenchmarkServeBatch serves a signed batch of 32 task envelopes, each shaped as the
// dispatcher sends a leaf's reconcile (resource, callback, deadline), to a no-op provider.
// "bare" is the floor any provider pays for the same request: verify the signature,
// decode the envelopes, encode one result per task. Compare sdk against bare, on
// cpu-ns/op above all: the SDK serves tasks in parallel, so its wall time per batch
// hides part of what it costs a busy host.
func BenchmarkServeBatch(b *testing.B) {
	secret, err := webhooksdk.GenerateSecret()
	if err != nil {
		b.Fatal(err)
	}
	h, err := webhooksdk.Handler([]webhooksdk.Provider{noopProvider{}}, webhooksdk.WithSecrets(secret))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	envs := make([]webhooksdk.Envelope, 32)
	for i := range envs {
		envs[i] = sdktest.TaskEnvelope(kvVPC)
		envs[i].TaskID = fmt.Sprintf("0198f3b2-7c1e-7a00-8000-%012d", i)
		envs[i].ClaimEpoch = 1
		envs[i].Resource.ID = fmt.Sprintf("0198f3b2-7c1e-7a00-9000-%012d", i)
		envs[i].Resource.Name = fmt.Sprintf("leaf-%d", i)
		envs[i].Resource.Labels = map[string]string{}
		envs[i].Callback = &webhooksdk.Callback{
			URL:      "https://converge.internal:8443/v1/tasks/" + envs[i].TaskID + "/outcome",
			Token:    strings.Repeat("t", 180),
			BatchURL: "https://converge.internal:8443/v1/tasks:outcomes",
		}
	}
	sec, err := webhooksdk.ParseSecret(secret)
	if err != nil {
		b.Fatal(err)
	}
	// Each round is a new delivery (a new webhook-id and claim epoch), as the
	// dispatcher's are: a repeated one would be answered from the SDK's result cache.
	round := int64(0)
	next := func() *http.Request {
		round++
		for i := range envs {
			envs[i].ClaimEpoch = round
		}
		body, err := json.Marshal(webhooksdk.Batch{Type: webhooksdk.EnvelopeBatch, Tasks: envs})
		if err != nil {
			b.Fatal(err)
		}
		return sdktest.NewSignedRequest(b, "http://provider/converge", secret, sdktest.NewMessageID(), time.Time{}, body)
	}
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, next())
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			r := next()
			body, err := io.ReadAll(r.Body)
			if err != nil {
				b.Fatal(err)
			}
			if err := webhooksdk.Verify([]webhooksdk.Secret{sec}, r.Header, body, time.Now(), 0); err != nil {
				b.Fatal(err)
			}
			var batch webhooksdk.Batch
			if err := json.Unmarshal(body, &batch); err != nil {
				b.Fatal(err)
			}
			results := make([]webhooksdk.Result, len(batch.Tasks))
			for i, env := range batch.Tasks {
				out, err := noopProvider{}.Work(r.Context(), webhooksdk.NewRequest(&env))
				if err != nil {
					b.Fatal(err)
				}
				results[i] = webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch, Outcome: &out}
			}
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			if err := json.NewEncoder(rec).Encode(struct {
				Type    string              `json:"type"`
				Results []webhooksdk.Result `json:"results"`
			}{webhooksdk.EnvelopeBatch, results}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU starts counting this process's CPU time; the function it returns reports
// it per iteration as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() { b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
