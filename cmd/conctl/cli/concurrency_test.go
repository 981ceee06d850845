package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestApplyStaleVersion: a document carrying the resource_version it was
// read at is refused once someone else has changed the object, with the
// way out named; --force applies it anyway.
func TestApplyStaleVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantCode(t, b.run(t, manifestVPC1, "apply", "--type", "manifest", "-f", "-"), ExitOK)
	wantCode(t, b.run(t, resourceVPC, "apply", "--type", "res", "-f", "-"), ExitOK)
	got := b.run(t, "", "get", "resource", "vpc/sample-vpc", "-o", "json")
	wantCode(t, got, ExitOK)
	var read struct {
		ResourceVersion int64 `json:"resource_version"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &read); err != nil || read.ResourceVersion < 1 {
		t.Fatalf("get: resource_version %d (%v) in %s", read.ResourceVersion, err, got.stdout)
	}
	mine := b.file(t, "mine.json", fmt.Sprintf(
		`{"kind": "vpc", "kind_version": 1, "name": "sample-vpc", "spec": {"cidr": "10.1.0.0/16"}, "resource_version": %d}`, read.ResourceVersion))

	// Someone else changes it first.
	wantCode(t, b.run(t, strings.Replace(resourceVPC, "10.0.0.0/16", "10.9.0.0/16", 1), "apply", "--type", "res", "-f", "-"), ExitOK)

	r := b.run(t, "", "apply", "--type", "res", "-f", mine)
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "409 Conflict") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("stderr %q, want the 409 and the way out (--force)", r.stderr)
	}
	r = b.run(t, "", "get", "resource", "vpc/sample-vpc", "-o", "json")
	if !strings.Contains(r.stdout, "10.9.0.0/16") {
		t.Fatalf("the refused apply changed the resource: %s", r.stdout)
	}
	r = b.run(t, "", "apply", "--type", "res", "--force", "-f", mine)
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc configured\n")
	last := b.api.recorded()[len(b.api.recorded())-1]
	if strings.Contains(string(last.Body), "resource_version") {
		t.Fatalf("--force sent the version: %s", last.Body)
	}
}

// TestPostRetryReusesItsKey: a POST whose answer is lost on the way is sent
// again with the same Idempotency-Key, and the server answers it from the
// first run instead of running it twice.
func TestPostRetryReusesItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantCode(t, b.run(t, manifestVPC1, "apply", "--type", "manifest", "-f", "-"), ExitOK)
	b.api.forget()
	b.api.lose.Store(1)
	r := b.run(t, resourceVPC, "apply", "--type", "res", "-f", "-")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc created\n")
	reqs := b.api.recorded()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want the POST and its retry: %v", len(reqs), requestLines(reqs))
	}
	k1, k2 := reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key")
	if k1 == "" || k1 != k2 {
		t.Fatalf("keys %q and %q, want one key on both attempts", k1, k2)
	}
	if !reqs[0].Lost || reqs[0].Status != 201 || !reqs[1].Replayed || reqs[1].Status != 201 {
		t.Fatalf("attempts %+v, want the first run and lost, the second answered from it", reqs)
	}

	// Each POST gets its own key.
	wantCode(t, b.run(t, `{"kind": "vpc", "kind_version": 1, "name": "other"}`, "apply", "--type", "res", "-f", "-"), ExitOK)
	reqs = b.api.recorded()
	if k := reqs[len(reqs)-1].Header.Get("Idempotency-Key"); k == "" || k == k1 {
		t.Fatalf("the next POST's key %q, want a new one", k)
	}

}

// TestRetriesOnUnavailable: an answer a retry may fix (503) is retried,
// --retries times.
func TestRetriesOnUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.api.unavailable.Store(2)
	wantCode(t, b.run(t, "", "list", "kinds"), ExitOK)
	wantRequests(t, b, "GET /kinds", "GET /kinds", "GET /kinds")
	b.api.forget()
	b.api.unavailable.Store(1)
	r := b.run(t, "", "--retries", "0", "list", "kinds")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "503") {
		t.Fatalf("stderr %q, want the 503", r.stderr)
	}
	wantRequests(t, b, "GET /kinds")
}
