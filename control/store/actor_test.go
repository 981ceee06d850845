package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestWithActor: every way the store writes (a pipelined batch, a
// transaction, a single statement, a dry run) attributes the events its
// write logs to the context's actor, and a context without one to nobody
// (NULL, shown as system): the setting never outlives its write.
func TestWithActor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	if _, err := st.PutManifest(ctx, manifest("vpc", 1, `{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	alice := store.WithActor(ctx, "alice")
	actorOf := func(typ string) string {
		t.Helper()
		var a *string
		if err := db.Pool.QueryRow(ctx, `SELECT actor FROM resource_events WHERE type = $1 ORDER BY id DESC LIMIT 1`, typ).Scan(&a); err != nil {
			t.Fatalf("the %s event: %v", typ, err)
		}
		if a == nil {
			return "NULL"
		}
		return *a
	}
	apply := func(ctx context.Context, cidr string) string {
		t.Helper()
		r, _, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{"cidr":"` + cidr + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}

	id := apply(alice, "10.0.0.0/16") // a pipelined batch
	if got := actorOf("applied"); got != "alice" {
		t.Fatalf("the batch's event by %s, want alice", got)
	}
	var author *string
	if err := db.Pool.QueryRow(ctx, `SELECT author FROM resource_spec_history ORDER BY revision DESC LIMIT 1`).Scan(&author); err != nil || author == nil || *author != "alice" {
		t.Fatalf("the spec revision by %v (%v), want alice", author, err)
	}
	apply(ctx, "10.1.0.0/16")
	if got := actorOf("applied"); got != "NULL" {
		t.Fatalf("an apply without an actor logged by %s: the setting leaked", got)
	}
	if err := st.ReconcileNow(store.WithActor(ctx, "bob"), id); err != nil { // a single statement
		t.Fatal(err)
	}
	if got := actorOf("reconcile_requested"); got != "bob" {
		t.Fatalf("the single statement's event by %s, want bob", got)
	}
	err := st.DryRun(store.WithActor(ctx, "carol"), func(ctx context.Context) error {
		if _, err := st.SetQuarantine(ctx, id, true); err != nil {
			return err
		}
		evs, err := st.Events(ctx, store.EventsParams{ResourceID: id, Limit: 1})
		if err != nil {
			return err
		}
		if len(evs) != 1 || evs[0].Type != "quarantined" || evs[0].Actor != "carol" {
			t.Errorf("the dry run's newest event %+v, want quarantined by carol", evs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetQuarantine(store.WithActor(ctx, "dave"), id, true); err != nil { // a transaction
		t.Fatal(err)
	}
	if got := actorOf("quarantined"); got != "dave" {
		t.Fatalf("the transaction's event by %s, want dave", got)
	}
}
