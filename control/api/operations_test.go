package api_test

import (
	"net/http"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestOperationsAPI: a verb is queued as an operate task of its reaction;
// bad verbs, inputs and input schemas are refused naming the field and
// write nothing; a resource being deleted takes no op and no rollback.
func TestOperationsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("box", `{"kind":"box","kind_version":1,"reactions":[
		{"name":"work","trigger":"specChange","emits":["status"]},
		{"name":"input_schema_here","trigger":"specChange","emits":["status"],"input_schema":{}}]}`).
		wantProblem(t, http.StatusUnprocessableEntity, "body.reactions[1].input_schema")
	b.putManifest("box", `{"kind":"box","kind_version":1,"reactions":[
		{"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput"],"input_schema":{"type":"nope"}}]}`).
		wantProblem(t, http.StatusUnprocessableEntity, "body.reactions[0].input_schema")
	// A finalizer keeps a deleted box Deleting (no provider runs here).
	b.putManifest("box", `{"kind":"box","kind_version":1,"reactions":[
		{"name":"work","trigger":"specChange","emits":["status"]},
		{"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"box.io/teardown"},
		{"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput","status"],
		 "input_schema":{"type":"object","properties":{"label":{"type":"string"}},"additionalProperties":false}}]}`).
		wantApply(t, "created")
	b.apply(`{"kind":"box","kind_version":1,"name":"b1","spec":{"n":1}}`).wantApply(t, "created")

	for _, tc := range []struct {
		body   string
		status int
		loc    string
	}{
		{`{"input":{}}`, http.StatusUnprocessableEntity, "body.verb"},
		{`{"verb":"nope"}`, http.StatusNotFound, "body.verb"},
		{`{"verb":"snapshot","input":{"label":1}}`, http.StatusUnprocessableEntity, "body.input.label"},
		{`{"verb":"snapshot","input":{"other":"x"}}`, http.StatusUnprocessableEntity, "body.input.other"},
		{`{"verb":"snapshot","input":"x"}`, http.StatusUnprocessableEntity, "body.input"},
		{`{"verb":`, http.StatusBadRequest, "body"},
	} {
		b.do(http.MethodPost, "/api/v1/resources/box/b1/ops", tc.body).wantProblem(t, tc.status, tc.loc)
	}
	b.do(http.MethodPost, "/api/v1/resources/box/none/ops", `{"verb":"snapshot"}`).wantProblem(t, http.StatusNotFound, "")
	if n := b.count(`SELECT count(*) FROM resource_operations`); n != 0 {
		t.Errorf("%d ops after refused requests", n)
	}

	var op struct{ ID, State, Verb string }
	b.do(http.MethodPost, "/api/v1/resources/box/b1/ops", `{"verb":"snapshot","input":{"label":"a"}}`).
		want(t, http.StatusAccepted).decode(t, &op)
	if op.State != "pending" || op.Verb != "snapshot" {
		t.Errorf("op = %+v", op)
	}
	if n := b.count(`SELECT count(*) FROM work_queue WHERE task_type = 'operate' AND task_id = $1
		AND trigger = 'operation' AND reaction = 'snap' AND emits = 64 + 8`, op.ID); n != 1 {
		t.Errorf("%d operate tasks for the op, want 1", n)
	}
	b.do(http.MethodGet, "/api/v1/resources/box/b1/ops/"+op.ID, nil).want(t, http.StatusOK)
	b.do(http.MethodGet, "/api/v1/resources/box/b1/ops/00000000-0000-0000-0000-000000000000", nil).wantProblem(t, http.StatusNotFound, "")

	// Spec history: one revision per generation; bad rollbacks.
	b.apply(`{"kind":"box","kind_version":1,"name":"b1","spec":{"n":2}}`).wantApply(t, "configured")
	var h struct {
		Items []struct{ Revision, Generation int64 }
	}
	b.do(http.MethodGet, "/api/v1/resources/box/b1/spec-history", nil).want(t, http.StatusOK).decode(t, &h)
	if len(h.Items) != 2 || h.Items[0].Revision != 2 || h.Items[0].Generation != 2 {
		t.Errorf("history = %+v", h.Items)
	}
	b.do(http.MethodPost, "/api/v1/resources/box/b1/rollback", `{}`).wantProblem(t, http.StatusUnprocessableEntity, "body.revision")
	b.do(http.MethodPost, "/api/v1/resources/box/b1/rollback", `{"revision":1.5}`).wantProblem(t, http.StatusUnprocessableEntity, "body.revision")
	b.do(http.MethodPost, "/api/v1/resources/box/b1/rollback", `{"revision":7}`).wantProblem(t, http.StatusNotFound, "body.revision")
	b.do(http.MethodPost, "/api/v1/resources/box/b1/rollback", `{"revision":1}`).wantApply(t, "configured")

	// Deleting: no op, no rollback.
	b.do(http.MethodDelete, "/api/v1/resources/box/b1", nil).want(t, http.StatusAccepted)
	b.do(http.MethodPost, "/api/v1/resources/box/b1/ops", `{"verb":"snapshot"}`).wantProblem(t, http.StatusConflict, "")
	b.do(http.MethodPost, "/api/v1/resources/box/b1/rollback", `{"revision":2}`).wantProblem(t, http.StatusConflict, "")
	if n := b.count(`SELECT count(*) FROM resource_operations`); n != 1 {
		t.Errorf("%d ops, want 1", n)
	}
	// The deletion cancelled the op still pending.
	if n := b.count(`SELECT count(*) FROM resource_operations WHERE state = 'cancelled' AND error = 'the resource is being deleted'`); n != 1 {
		t.Errorf("%d ops cancelled by the deletion, want 1", n)
	}
}
