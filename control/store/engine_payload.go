package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// payloadTaskSQL loads a task while claim c still holds it: a work task
// claimed at c's epoch whose completion is not already waiting in the
// outbox, or a reactor delivery claimed at that epoch (the fence
// extend_leases applies). A reactor delivery's kind is resolved as
// claim_tasks resolves it.
const payloadTaskSQL = `SELECT w.task_id, w.resource_id, w.task_type, w.trigger, coalesce(w.reaction, ''),
       w.kind, w.kind_version, w.claimed_gen, w.attempts, ''::text, ''::text
  FROM work_queue w
 WHERE w.task_id = $1 AND w.shard_id = $2 AND w.claim_epoch = $3 AND w.state = 'claimed'
   AND NOT EXISTS (SELECT 1 FROM work_outbox o
                    WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
UNION ALL
SELECT l.task_id, l.resource_id, 'react', 'reactor', coalesce(rk.reactor_reaction, ''),
       rk.kind, rk.kind_version, l.generation, l.attempts, l.transition::text, l.binding_name::text
  FROM lifecycle_outbox l
  JOIN reactor_bindings b ON b.name = l.binding_name
 CROSS JOIN LATERAL (
       SELECT m.kind, m.kind_version, m.reactor_reaction
         FROM kind_manifest m
        WHERE m.kind = b.reactor AND m.is_reactor
          AND (b.reactor_version IS NULL OR m.kind_version = b.reactor_version)
        ORDER BY m.kind_version DESC
        LIMIT 1) rk
 WHERE l.task_id = $1 AND l.shard_id = $2 AND l.claim_epoch = $3 AND l.claimed_by IS NOT NULL
 LIMIT 1`

// TaskPayload builds again the request of the task claim c holds, for a
// provider that received it thin (over its target's request limit) and
// fetches the rest. It reads only: an operate task's attempt was counted
// when the request was first built. The documents are read now, so they
// may be newer than at delivery; the claim is what must still hold. A claim
// that no longer holds the task is ErrSuperseded; a task whose request
// cannot be built (its resource vanished) fails with that reason.
func (s *Store) TaskPayload(ctx context.Context, c model.Task) (webhooksdk.Envelope, error) {
	rows, err := s.pool.Query(ctx, payloadTaskSQL, c.ID, c.Shard, c.Epoch)
	if err != nil {
		return webhooksdk.Envelope{}, fmt.Errorf("load task payload: %w", err)
	}
	t, err := pgx.CollectOneRow(rows, func(r pgx.CollectableRow) (model.Task, error) {
		var (
			t  model.Task
			kv int16
		)
		err := r.Scan(&t.ID, &t.ResourceID, &t.Type, &t.Trigger, &t.Reaction, &t.Kind, &kv,
			&t.Generation, &t.Attempts, &t.Transition, &t.Binding)
		t.KindVersion = int(kv)
		return t, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return webhooksdk.Envelope{}, ErrSuperseded
	}
	if err != nil {
		return webhooksdk.Envelope{}, fmt.Errorf("load task payload: %w", err)
	}
	t.Shard, t.Epoch, t.Emits, t.Deadline = c.Shard, c.Epoch, c.Emits, c.Deadline
	envs, failed, err := s.buildRequests(ctx, []model.Task{t}, false)
	if err != nil {
		return webhooksdk.Envelope{}, err
	}
	if failed[0] != nil {
		return webhooksdk.Envelope{}, failed[0]
	}
	return envs[0], nil
}
