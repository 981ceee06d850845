package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestWritesStoreTheirTraceContext: the work a traced write schedules (an
// apply, a batch apply, a delete's teardown task, an operation) stores the
// request's W3C traceparent; a newer generation's apply of a pending task
// replaces it; an untraced write stores none.
func TestWritesStoreTheirTraceContext(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	m := manifest("leaf", 1, "")
	m.Reactions = append(m.Reactions, model.ReactionDecl{Name: "teardown", Trigger: webhooksdk.TriggerDeleteRequested,
		Emits: []string{"finalizer"}, Finalizer: "leaf.example/cleanup"},
		model.ReactionDecl{Name: "restart", Trigger: webhooksdk.TriggerOperation, Verb: "restart", Emits: []string{"status"}})
	if _, err := st.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	traced := func(b byte) (context.Context, string) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{b, 1}, SpanID: trace.SpanID{b, 2}, TraceFlags: trace.FlagsSampled})
		return trace.ContextWithSpanContext(t.Context(), sc), "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	}
	stored := func(name, taskType string) *string {
		t.Helper()
		var tp *string
		if err := db.Pool.QueryRow(t.Context(), `SELECT w.traceparent FROM work_queue w JOIN resources r ON r.id = w.resource_id
			WHERE r.kind = 'leaf' AND r.name = $1 AND w.task_type = $2`, name, taskType).Scan(&tp); err != nil {
			t.Fatalf("%s's %s task: %v", name, taskType, err)
		}
		return tp
	}
	apply := func(ctx context.Context, name, spec string) {
		t.Helper()
		if _, _, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: name, Spec: json.RawMessage(spec)}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(name, taskType, tp string) {
		t.Helper()
		got := stored(name, taskType)
		switch {
		case tp == "" && got != nil:
			t.Errorf("%s's %s task stores %q, want none", name, taskType, *got)
		case tp != "" && (got == nil || *got != tp):
			t.Errorf("%s's %s task stores %v, want %q", name, taskType, got, tp)
		}
	}

	ctx1, tp1 := traced(1)
	apply(ctx1, "a", `{"n":1}`)
	want("a", "reconcile", tp1)
	ctx2, tp2 := traced(2)
	apply(ctx2, "a", `{"n":2}`) // a newer generation of the pending task
	want("a", "reconcile", tp2)

	apply(t.Context(), "untraced", `{}`)
	want("untraced", "reconcile", "")
	// The setting is the transaction's: the pooled session's next write is untraced.
	apply(t.Context(), "untraced-after", `{}`)
	want("untraced-after", "reconcile", "")

	ctx3, tp3 := traced(3)
	if _, err := st.ApplyResources(ctx3, "", []store.ApplyResourceParams{{Kind: "leaf", KindVersion: 1, Name: "b1"},
		{Kind: "leaf", KindVersion: 1, Name: "b2"}}); err != nil {
		t.Fatal(err)
	}
	want("b1", "reconcile", tp3)
	want("b2", "reconcile", tp3)

	ctx4, tp4 := traced(4)
	if _, err := st.DeleteResource(ctx4, "", "leaf", "b1", store.Precondition{}); err != nil {
		t.Fatal(err)
	}
	want("b1", "delete", tp4)

	ctx5, tp5 := traced(5)
	if _, err := st.CreateOperation(ctx5, "", "leaf", "b2", "restart", nil); err != nil {
		t.Fatal(err)
	}
	want("b2", "operate", tp5)
}
