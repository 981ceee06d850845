package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestPlainSuccessesBesideEveryOtherOutcome: one batch of completions mixes
// plain successes (complete_plain applies them in one statement) with what
// that path leaves to the general one: a failure, a success that reports
// conditions, a stale claim, a repeat, and a repeat of an outcome that
// composes, still queued. Each gets what it asks for: the
// plain ones sync their resources, log their phase change once, clear a
// stale False condition and flow a status into a dependent, which is then
// scheduled; the failure re-pends its task; the conditions are written; the
// stale claim is superseded and changes nothing; the repeats are
// duplicates, and the queued one is not applied in its place.
// A plain success that does not move the phase (a resync) logs no event.
func TestPlainSuccessesBesideEveryOtherOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := engine.New(db.Pool, engine.Config{})
	exec(t, db, `INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES
		('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]'),
		('cond', 1, '[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]'),
		('comp', 1, '[{"name":"work","trigger":"specChange","emits":["status","children"]}]')`)
	exec(t, db, `INSERT INTO resources (kind, kind_version, name, spec) VALUES
		('leaf', 1, 'plain', '{}'), ('leaf', 1, 'stale-false', '{}'), ('leaf', 1, 'fails', '{}'), ('cond', 1, 'reports', '{}'),
		('leaf', 1, 'stale-claim', '{}'), ('leaf', 1, 'repeated', '{}'), ('leaf', 1, 'vpc', '{}'), ('leaf', 1, 'subnet', '{}'),
		('comp', 1, 'queued', '{}')`)
	// subnet depends on vpc and takes its id; a stale False condition waits
	// on stale-false.
	exec(t, db, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
		SELECT (SELECT id FROM resources WHERE name = 'subnet'), (SELECT id FROM resources WHERE name = 'vpc'),
		       '[{"dependent_field": "/vpc_id", "source_field": "/id"}]'`)
	exec(t, db, `INSERT INTO resource_conditions (resource_id, type, status, reason)
		SELECT id, 'Synced', 'False', 'ReconcileError' FROM resources WHERE name = 'stale-false'`)
	exec(t, db, `SELECT schedule_eligible(array_agg(id)) FROM resources`)
	tasks := claimByName(t, eng, db)
	if _, ok := tasks["subnet"]; ok || len(tasks) != 8 {
		t.Fatalf("claimed %d tasks (subnet's: %v); want the 8 with no dependency", len(tasks), ok)
	}

	ok := func(status string) webhooksdk.Result {
		return webhooksdk.Result{Outcome: &webhooksdk.Outcome{Status: json.RawMessage(status)}}
	}
	first, err := eng.TaskCompleteMany(ctx, []engine.Completion{{Task: tasks["repeated"], Result: ok(`{"ok":true}`)}})
	if err != nil || first[0] != engine.Applied {
		t.Fatalf("the first completion of repeated: %v, %v", first, err)
	}
	// queued's outcome composes: it waits in the outbox (no drain runs).
	composes := webhooksdk.Result{Outcome: &webhooksdk.Outcome{Children: []webhooksdk.Child{{Kind: "leaf", KindVersion: 1, Name: "child"}}}}
	if first, err := eng.TaskCompleteMany(ctx, []engine.Completion{{Task: tasks["queued"], Result: composes}}); err != nil || first[0] != engine.Applied {
		t.Fatalf("the first completion of queued: %v, %v", first, err)
	}
	exec(t, db, `UPDATE work_queue SET claim_epoch = claim_epoch + 1 WHERE task_id = $1`, tasks["stale-claim"].ID)

	batch := []engine.Completion{
		{Task: tasks["plain"], Result: ok(`{"ok":true}`)},
		{Task: tasks["stale-false"], Result: ok(`{"ok":true}`)},
		{Task: tasks["fails"], Result: webhooksdk.Result{Error: &webhooksdk.Error{Message: "boom"}}},
		{Task: tasks["reports"], Result: webhooksdk.Result{Outcome: &webhooksdk.Outcome{
			Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "False", Reason: "Warming"}}}}},
		{Task: tasks["stale-claim"], Result: ok(`{"ok":true}`)},
		{Task: tasks["repeated"], Result: ok(`{"ok":true}`)},
		{Task: tasks["vpc"], Result: ok(`{"id":"vpc-1"}`)},
		{Task: tasks["queued"], Result: ok(`{"ok":true}`)},
	}
	got, err := eng.TaskCompleteMany(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.CompleteStatus{engine.Applied, engine.Applied, engine.Applied, engine.Applied, engine.Superseded, engine.Duplicate, engine.Applied, engine.Duplicate}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s's completion: %s, want %s", nameOf(tasks, batch[i].Task), got[i], want[i])
		}
	}

	type state struct {
		phase, status, lastTask, lastError string
		events, falseConds, work           int
		workState                          string
	}
	read := func(name string) state {
		t.Helper()
		var s state
		if err := db.Pool.QueryRow(ctx, `SELECT r.phase, coalesce(r.status::text, ''), coalesce(r.last_task_id::text, ''), coalesce(r.last_error, ''),
			(SELECT count(*) FROM resource_events e WHERE e.resource_id = r.id AND e.type = 'succeeded'),
			(SELECT count(*) FROM resource_conditions c WHERE c.resource_id = r.id AND c.status = 'False'),
			(SELECT count(*) FROM work_queue w WHERE w.resource_id = r.id),
			coalesce((SELECT string_agg(w.state || '/' || w.attempts, ',') FROM work_queue w WHERE w.resource_id = r.id), '')
			FROM resources r WHERE r.name = $1`, name).Scan(&s.phase, &s.status, &s.lastTask, &s.lastError, &s.events, &s.falseConds, &s.work, &s.workState); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read("plain"); s.phase != "Ready" || s.status != `{"ok": true}` || s.lastTask != tasks["plain"].ID || s.events != 1 || s.work != 0 {
		t.Errorf("plain: %+v; want Ready with its status, its task last, one succeeded event and no work row", s)
	}
	if s := read("stale-false"); s.phase != "Ready" || s.falseConds != 0 {
		t.Errorf("stale-false: %+v; want Ready with its False condition cleared", s)
	}
	if s := read("fails"); s.lastError != "boom" || s.workState != "pending/1" {
		t.Errorf("fails: %+v; want its error kept and its task re-pended after one attempt", s)
	}
	if s := read("reports"); s.phase != "Degraded" || s.falseConds != 1 {
		t.Errorf("reports: %+v; want Degraded with its Ready=False condition written", s)
	}
	if s := read("stale-claim"); s.phase != "Reconciling" || s.lastTask != "" || s.workState != "claimed/0" {
		t.Errorf("stale-claim: %+v; want it untouched, its task still claimed", s)
	}
	if s := read("repeated"); s.phase != "Ready" || s.events != 1 {
		t.Errorf("repeated: %+v; want Ready with the one event of its first completion", s)
	}
	if s := read("queued"); s.phase != "Reconciling" || s.lastTask != "" || s.workState != "claimed/0" {
		t.Errorf("queued: %+v; want it untouched until the drain applies its queued outcome", s)
	}
	var subnetSpec string
	if err := db.Pool.QueryRow(ctx, `SELECT spec::text FROM resources WHERE name = 'subnet'`).Scan(&subnetSpec); err != nil {
		t.Fatal(err)
	}
	if s := read("subnet"); subnetSpec != `{"vpc_id": "vpc-1"}` || s.workState != "pending/0" {
		t.Errorf("subnet: spec %s, %+v; want vpc's id flowed into its spec and its task scheduled", subnetSpec, s)
	}

	// A resync of a Ready resource: applied, no phase change, no event.
	exec(t, db, `SELECT reconcile_now(id) FROM resources WHERE name = 'plain'`)
	again := claimByName(t, eng, db)
	if _, err := eng.TaskCompleteMany(ctx, []engine.Completion{{Task: again["plain"], Result: ok(`{"ok":true}`)}}); err != nil {
		t.Fatal(err)
	}
	if s := read("plain"); s.phase != "Ready" || s.lastTask != again["plain"].ID || s.events != 1 {
		t.Errorf("plain after a resync: %+v; want its resync's task last and still one succeeded event", s)
	}
}

// claimByName claims every claimable task and keys them by their
// resource's name.
func claimByName(t *testing.T, eng *engine.Engine, db *pgtest.Database) map[string]model.Task {
	t.Helper()
	ctx := context.Background()
	tasks, err := eng.TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]model.Task, len(tasks))
	for _, task := range tasks {
		var name string
		if err := db.Pool.QueryRow(ctx, `SELECT name FROM resources WHERE id = $1`, task.ResourceID).Scan(&name); err != nil {
			t.Fatal(err)
		}
		out[name] = task
	}
	return out
}

// nameOf is the name tasks keys task by.
func nameOf(tasks map[string]model.Task, task model.Task) string {
	for name, t := range tasks {
		if t.ID == task.ID {
			return name
		}
	}
	return ""
}

// TestPlainBatchSkipsTheGeneralPath: a batch of plain successes is applied
// by complete_plain alone; the general path's functions (finish_successes,
// finish_work, apply_items) are not called. Counted with track_functions
// in the completion's own transaction.
func TestPlainBatchSkipsTheGeneralPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	exec(t, db, `INSERT INTO resources (kind, kind_version, name, spec) SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series(1, 4) i`)
	exec(t, db, `SELECT schedule_eligible(array_agg(id)) FROM resources`)
	tasks := claim(t, db, 10)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if err := enginetest.CompleteOne(tx, task, `{"status": {"ok": true}}`); err != nil {
			t.Fatal(err)
		}
	}
	var called []string
	if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(funcname::text ORDER BY funcname), '{}') FROM pg_stat_xact_user_functions
		WHERE funcname IN ('complete_plain', 'finish_successes', 'finish_work', 'apply_items')`).Scan(&called); err != nil {
		t.Fatal(err)
	}
	if len(called) != 1 || called[0] != "complete_plain" {
		t.Errorf("completing %d plain successes called %v; want complete_plain alone", len(tasks), called)
	}
}

// TestTwoTasksOfOneResourceInOneBatch: a resource's reconcile and operate
// tasks completed in one batch are merged as apply_items merges them: the
// reconcile's outcome is the resource's (its status, and it is the last
// task), the op's is the op's. complete_plain, which applies one outcome per
// resource, leaves such a batch to the general path.
func TestTwoTasksOfOneResourceInOneBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := engine.New(db.Pool, engine.Config{})
	exec(t, db, `INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('svc', 1,
		'[{"name":"work","trigger":"specChange","emits":["status"]},{"name":"restart","trigger":"operation","verb":"restart","emits":["status"]}]')`)
	exec(t, db, `INSERT INTO resources (kind, kind_version, name, spec) VALUES ('svc', 1, 'web', '{}')`)
	exec(t, db, `INSERT INTO resource_operations (resource_id, verb, input) SELECT id, 'restart', '{}' FROM resources`)
	exec(t, db, `SELECT schedule_eligible(array_agg(id)), enqueue_operations(array_agg(id)) FROM resources`)
	tasks := claim(t, db, 10)
	if len(tasks) != 2 {
		t.Fatalf("claimed %d tasks, want web's reconcile and operate tasks", len(tasks))
	}
	var reconcile model.Task
	batch := make([]engine.Completion, len(tasks))
	for i, task := range tasks {
		from := "op"
		if task.Trigger != "operation" {
			from, reconcile = "reconcile", task
		}
		batch[i] = engine.Completion{Task: task, Result: webhooksdk.Result{Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"from":"` + from + `"}`)}}}
	}
	got, err := eng.TaskCompleteMany(ctx, batch)
	if err != nil || got[0] != engine.Applied || got[1] != engine.Applied {
		t.Fatalf("completions: %v, %v", got, err)
	}
	var status, last, phase, op string
	if err := db.Pool.QueryRow(ctx, `SELECT r.status::text, r.last_task_id::text, r.phase, o.state
		FROM resources r JOIN resource_operations o ON o.resource_id = r.id`).Scan(&status, &last, &phase, &op); err != nil {
		t.Fatal(err)
	}
	if status != `{"from": "reconcile"}` || last != reconcile.ID || phase != "Ready" || op != "succeeded" {
		t.Errorf("web: status %s, last task %s (reconcile's %s), phase %s, op %s; want the reconcile's outcome on a Ready resource and the op succeeded",
			status, last, reconcile.ID, phase, op)
	}
}

// TestCompletionNamingAnotherResource: a completion that names a resource
// other than its task's (its lock then covers the wrong row) is still
// applied to its task's resource, by the general path: complete_plain
// takes only tasks on the resources locked for them.
func TestCompletionNamingAnotherResource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	var other string
	if err := db.Pool.QueryRow(ctx, `INSERT INTO resources (kind, kind_version, name, spec) VALUES ('leaf', 1, 'other', '{}'), ('leaf', 1, 'x', '{}')
		RETURNING id::text`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := db.Pool.QueryRow(ctx, `SELECT id::text FROM resources WHERE name = 'x'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	task := enginetest.ClaimOnly(t, db, id)
	task.ResourceID = other
	if err := enginetest.CompleteOne(db.Pool, task, `{"status": {"ok": true}}`); err != nil {
		t.Fatal(err)
	}
	var phase string
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT phase, (SELECT count(*) FROM work_queue) FROM resources WHERE id = $1`, id).Scan(&phase, &left); err != nil {
		t.Fatal(err)
	}
	if phase != "Ready" || left != 0 {
		t.Errorf("x: %s with %d work rows left; want its outcome applied: Ready, no work row", phase, left)
	}
}
