package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
)

// Operation is one operator verb invoked on a resource. Its operate task
// runs it; the ops of a resource run one at a time, oldest first.
type Operation struct {
	ID         string          `json:"id"`
	ResourceID string          `json:"resource_id"`
	Namespace  string          `json:"namespace" doc:"The namespace of the resource."`
	Verb       string          `json:"verb"`
	Input      json.RawMessage `json:"input"`
	State      string          `json:"state" enum:"pending,running,succeeded,failed,cancelled"`
	Output     json.RawMessage `json:"operation_output,omitempty" doc:"The provider's operation_output, when its reaction emits operationOutput."`
	Error      string          `json:"error,omitempty" doc:"Why the last attempt failed."`
	Attempts   int             `json:"attempts" doc:"Deliveries so far."`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

const operationCols = `o.id, o.resource_id,
       coalesce((SELECT r.namespace FROM resources r WHERE r.id = o.resource_id), ''), o.verb, o.input, o.state, o.output, coalesce(o.error, ''), o.attempts,
       o.created_at, o.updated_at, o.finished_at`

// scanOperation scans operationCols, then the row's further columns into
// tail.
func scanOperation(row pgx.Row, tail ...any) (Operation, error) {
	var op Operation
	err := row.Scan(append([]any{&op.ID, &op.ResourceID, &op.Namespace, &op.Verb, &op.Input, &op.State, &op.Output, &op.Error, &op.Attempts,
		&op.CreatedAt, &op.UpdatedAt, &op.FinishedAt}, tail...)...)
	return op, err
}

// operationTargetSQL reads what invoking a verb on (namespace, kind, name) needs: the
// resource, whether it is being deleted, and its kind version's reactions.
const operationTargetSQL = `SELECT r.id, r.kind_version, r.deletion_requested_at IS NOT NULL, m.reactions
  FROM resources r JOIN kind_manifest m ON m.kind = r.kind AND m.kind_version = r.kind_version
 WHERE r.namespace = $1 AND r.kind = $2 AND r.name = $3`

// operationInsertSQL records the op unless the resource went into deletion
// since it was read.
const operationInsertSQL = `WITH o AS (
    INSERT INTO resource_operations (resource_id, verb, input)
    SELECT id, $2, $3 FROM resources WHERE id = $1 AND deletion_requested_at IS NULL
    RETURNING *)
SELECT ` + operationCols + ` FROM o`

// CreateOperation invokes verb on the resource (kind, name) of namespace ns
// ("" is DefaultNamespace) with input (a
// JSON object; empty or null means {}) and queues it behind the resource's earlier
// ops. Errors: *InvalidError for a missing verb or an input that is not an
// object, *NotFoundError for an unknown resource or a verb its kind version
// does not declare (Location "verb"), *DocumentError (Location "input") for
// an input the verb's input_schema refuses, *ConflictError while the
// resource is being deleted. A refused request writes nothing.
func (s *Store) CreateOperation(ctx context.Context, ns, kind, name, verb string, input json.RawMessage) (Operation, error) {
	ns = orDefault(ns)
	if verb == "" {
		return Operation{}, &InvalidError{Location: "verb", Message: "is required"}
	}
	input = bytes.TrimSpace(input)
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	if input[0] != '{' {
		return Operation{}, &InvalidError{Location: "input", Message: "must be a JSON object"}
	}
	var (
		rid       string
		version   int16
		deleting  bool
		reactions []model.ReactionDecl
	)
	err := s.pool.QueryRow(ctx, operationTargetSQL, ns, kind, name).Scan(&rid, &version, &deleting, &reactions)
	if errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, resourceNotFound(ns, kind, name)
	}
	if err != nil {
		return Operation{}, fmt.Errorf("read %s: %w", resourceWhat(ns, kind, name), err)
	}
	if deleting {
		return Operation{}, errDeleting(ns, kind, name)
	}
	m := model.KindManifest{Kind: kind, KindVersion: int(version), Reactions: reactions}
	decl, ok := m.Operation(verb)
	if !ok {
		return Operation{}, &NotFoundError{Location: "verb", Message: fmt.Sprintf("%s/%d declares no verb %q", kind, version, verb)}
	}
	sch, err := schema.Compile(decl.InputSchema)
	if err != nil {
		return Operation{}, fmt.Errorf("the stored input_schema of verb %q of %s/%d does not compile: %w", verb, kind, version, err)
	}
	var ve *schema.ValidationError
	if err := sch.Validate(input); errors.As(err, &ve) {
		return Operation{}, &DocumentError{Location: "input", Kind: kind, KindVersion: int(version), Violations: ve.Violations}
	} else if err != nil {
		return Operation{}, fmt.Errorf("validate input of verb %q: %w", verb, err)
	}

	var op Operation
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := setTraceContext(ctx, tx); err != nil {
			return err
		}
		op, err = scanOperation(tx.QueryRow(ctx, operationInsertSQL, rid, verb, input))
		if errors.Is(err, pgx.ErrNoRows) {
			return errDeleting(ns, kind, name)
		}
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT enqueue_operations(ARRAY[$1::uuid])`, rid); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		return nil
	})
	return op, wrapUnlessTyped(err, "invoke %s on %s", verb, qualified(ns, kind, name))
}

func errDeleting(ns, kind, name string) error {
	return &ConflictError{Message: qualified(ns, kind, name) + " is being deleted"}
}

// ListOperationsParams selects and pages ListOperations.
type ListOperationsParams struct {
	// Namespace is the resource's namespace; "" is DefaultNamespace.
	Namespace  string
	Kind, Name string
	// Limit is the page size: ListLimitDefault when 0, at most ListLimitMax.
	Limit int
	// MaxBytes ends a page early, as ListResourcesParams.MaxBytes does.
	MaxBytes int
	// Cursor continues after the page that returned it.
	Cursor string
}

// ListOperations pages through the operations of (kind, name), newest
// first, up to Limit a page and ending early at MaxBytes (see
// collectPage).
func (s *Store) ListOperations(ctx context.Context, p ListOperationsParams) (Page[Operation], error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return Page[Operation]{}, err
	}
	budget := pageBudget(p.MaxBytes)
	rid, err := s.ResourceID(ctx, p.Namespace, p.Kind, p.Name)
	if err != nil {
		return Page[Operation]{}, err
	}
	var (
		qa  queryArgs
		arg = qa.add
	)
	q := `SELECT ` + operationCols + `, pg_column_size(o.input) + coalesce(pg_column_size(o.output), 0) AS row_size
  FROM resource_operations o WHERE o.resource_id = ` + arg(rid)
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return Page[Operation]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q += ` AND (o.created_at, o.id) < (` + arg(at) + `, ` + arg(id) + `)`
	}
	rows, err := s.reader(ctx).Query(ctx, pageSQL(q, "created_at DESC, id DESC", arg(limit), arg(budget)), qa...)
	if err != nil {
		return Page[Operation]{}, fmt.Errorf("list operations of %s/%s: %w", p.Kind, p.Name, err)
	}
	ops, more, err := collectPage(rows, budget, func(row pgx.CollectableRow) (Operation, bool, error) {
		var next bool
		op, err := scanOperation(row, nil, nil, &next)
		return op, next, err
	})
	if err != nil {
		return Page[Operation]{}, fmt.Errorf("list operations of %s/%s: %w", p.Kind, p.Name, err)
	}
	page := Page[Operation]{Items: ops}
	if more {
		last := ops[len(ops)-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []Operation{}
	}
	return page, nil
}

// GetOperation returns op id of (kind, name) of namespace ns, or a
// *NotFoundError.
func (s *Store) GetOperation(ctx context.Context, ns, kind, name, id string) (Operation, error) {
	rid, oid, err := s.operationKey(ctx, ns, kind, name, id)
	if err != nil {
		return Operation{}, err
	}
	op, err := scanOperation(s.reader(ctx).QueryRow(ctx, `SELECT `+operationCols+` FROM resource_operations o
		WHERE o.id = $1 AND o.resource_id = $2`, oid, rid))
	if errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, operationNotFound(ns, kind, name, id)
	}
	if err != nil {
		return Operation{}, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// CancelOperation cancels op id of (kind, name) of namespace ns while it
// is pending (its task not claimed), and returns it. A running or finished
// op is a *ConflictError.
func (s *Store) CancelOperation(ctx context.Context, ns, kind, name, id string) (Operation, error) {
	if _, err := s.GetOperation(ctx, ns, kind, name, id); err != nil {
		return Operation{}, err
	}
	var (
		cancelled bool
		state     *string
	)
	if err := s.pool.QueryRow(ctx, `SELECT * FROM cancel_operation($1)`, id).Scan(&cancelled, &state); err != nil {
		return Operation{}, fmt.Errorf("cancel operation %s: %w", id, err)
	}
	if state == nil {
		return Operation{}, operationNotFound(ns, kind, name, id)
	}
	if !cancelled {
		return Operation{}, &ConflictError{Message: fmt.Sprintf("operation %s is %s; only a pending one can be cancelled", id, *state)}
	}
	return s.GetOperation(ctx, ns, kind, name, id)
}

// operationKey resolves the resource and parses the op id.
func (s *Store) operationKey(ctx context.Context, ns, kind, name, id string) (rid string, oid uuid.UUID, err error) {
	if rid, err = s.ResourceID(ctx, ns, kind, name); err != nil {
		return "", uuid.UUID{}, err
	}
	if oid, err = uuid.Parse(id); err != nil {
		return "", uuid.UUID{}, operationNotFound(ns, kind, name, id)
	}
	return rid, oid, nil
}

func operationNotFound(ns, kind, name, id string) error {
	return &NotFoundError{Message: fmt.Sprintf("%s has no operation %s", resourceWhat(ns, kind, name), id)}
}
