package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// BatchChunk is how many valid items ApplyResources writes per statement
// and transaction. Each chunk commits on its own, so the engine claims the
// first chunks' tasks while the later ones are still being written.
const BatchChunk = 500

// ApplyResult values of a batch item beyond ApplyCreated, ApplyConfigured
// and ApplyUnchanged.
const (
	// ApplyInvalid marks a batch item that was refused; Err says why.
	ApplyInvalid ApplyResult = "invalid"
)

// BatchItemResult is one item's outcome of ApplyResources.
type BatchItemResult struct {
	// Result is created, configured, unchanged, or invalid when Err is set.
	Result          ApplyResult
	ID              string
	Generation      int64
	ResourceVersion int64
	// Err is the error ApplyResource would have returned for the item
	// alone: *InvalidError, *NotFoundError, *DocumentError,
	// *ConflictError or *PreconditionError. An invalid item wrote nothing.
	Err error
}

// ApplyResources applies many resources in namespace ns ("" is
// DefaultNamespace), each exactly as ApplyResource would (the same
// validation, the same upsert semantics, its 'applied' event and spec
// revision, the same scheduling), and returns one result per item, in
// order.
//
// Every item is validated first; the valid ones are then written
// BatchChunk at a time, each chunk one upsert statement and its scheduling
// in one transaction. An invalid item writes nothing and never stops the
// others: its result carries the error. A second item naming the same
// (kind, name) as an earlier one is invalid, and so is an item whose
// Namespace is neither "" nor ns. An item that would take the namespace past
// its max_objects quota is refused with a *QuotaError (items are counted in
// order: the first ones that fit are created). The returned error is for a
// failure of the database, not of an item, or a *NotFoundError for a
// namespace that does not exist; chunks committed before it stay written
// (re-applying the batch is idempotent).
func (s *Store) ApplyResources(ctx context.Context, ns string, items []ApplyResourceParams) ([]BatchItemResult, error) {
	ns = orDefault(ns)
	out := make([]BatchItemResult, len(items))
	seen := make(map[[2]string]int, len(items))
	valid := make([]int, 0, len(items))
	for i := range items {
		p := &items[i]
		err := s.validateResource(ctx, p)
		if err == nil && p.Namespace != "" && p.Namespace != ns {
			err = &InvalidError{Location: "namespace", Message: fmt.Sprintf("is %q, but the batch applies to namespace %q", p.Namespace, ns)}
		}
		p.Namespace = ns
		if err == nil {
			key := [2]string{p.Kind, p.Name}
			if first, dup := seen[key]; dup {
				err = &InvalidError{Location: "name", Message: fmt.Sprintf(
					"%s/%s is already item %d of this batch; a batch names each resource once", p.Kind, p.Name, first)}
			} else {
				seen[key] = i
			}
		}
		var nf *NotFoundError
		switch {
		case err == nil:
			valid = append(valid, i)
		case isItemError(err) || errors.As(err, &nf):
			out[i] = BatchItemResult{Result: ApplyInvalid, Err: err}
		default:
			return nil, err
		}
	}
	for start := 0; start < len(valid); start += BatchChunk {
		chunk := valid[start:min(start+BatchChunk, len(valid))]
		if err := s.applyChunk(ctx, items, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// isItemError reports whether err refuses one item rather than failing the
// request.
func isItemError(err error) bool {
	var (
		ie *InvalidError
		de *DocumentError
		ce *ConflictError
		pe *PreconditionError
		qe *QuotaError
	)
	return errors.As(err, &ie) || errors.As(err, &de) || errors.As(err, &ce) || errors.As(err, &pe) || errors.As(err, &qe)
}

// applyChunk writes items[chunk] in one transaction, running it again when
// it lost a race (a deadlock with a completion, a spec revision number taken).
func (s *Store) applyChunk(ctx context.Context, items []ApplyResourceParams, chunk []int, out []BatchItemResult) error {
	for attempt := 1; ; attempt++ {
		res := make([]BatchItemResult, len(chunk))
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.applyChunkTx(ctx, tx, items, chunk, res) })
		if err != nil {
			if code, pe := pgCode(err); code == pgrun.CodeDeadlockDetected ||
				code == codeUniqueViolation && pe.ConstraintName == "resource_spec_history_pkey" {
				err = errRetry
			}
		}
		if errors.Is(err, errRetry) && attempt < maxWriteAttempts {
			continue
		}
		if err != nil {
			return wrapUnlessTyped(err, "apply %d resources", len(chunk))
		}
		for j, i := range chunk {
			out[i] = res[j]
		}
		return nil
	}
}

// batchGateLockSQL locks the provider configs a chunk names FOR SHARE, as
// the single apply's gate does, so none moves to another kind version
// before the chunk commits.
const batchGateLockSQL = `SELECT 1 FROM providerconfigs WHERE name = ANY ($1::text[]) FOR SHARE`

// batchGateSQL is the single apply's gate, per item: whether its manifest
// exists and is a reactor kind, the provider config it names (in the
// namespace $4 or the default one), and whether the resource exists (for
// the quota).
const batchGateSQL = `SELECT m.is_reactor, pc.kind, pc.kind_version::int,
       EXISTS (SELECT 1 FROM resources r WHERE r.namespace = $4 AND r.kind = i.kind AND r.name = i.name)
  FROM unnest($1::text[], $2::smallint[], $3::text[], $5::text[]) WITH ORDINALITY AS i(kind, kind_version, ref, name, n)
  LEFT JOIN kind_manifest m ON m.kind = i.kind AND m.kind_version = i.kind_version
  LEFT JOIN providerconfigs pc ON pc.name = i.ref AND pc.namespace IN ($4, '` + DefaultNamespace + `')
 ORDER BY i.n`

// batchQuotaSQL reads the namespace's max_objects quota and, when it has
// one, how many resources it holds. It runs after namespaceQuotaLockSQL in
// the chunk's transaction, as a statement of its own, so that its count
// includes every creation committed before the lock was granted.
const batchQuotaSQL = `SELECT max_objects,
       CASE WHEN max_objects IS NULL THEN 0 ELSE (SELECT count(*) FROM resources WHERE namespace = $1)::int END
  FROM namespaces WHERE name = $1`

// batchApplySQL is resourceApplySQL's upsert, event and spec revision for
// many rows in one statement (see there). A created row takes the id $8
// gives it: time-ordered (UUIDv7) in item order, so that a listing, in
// (created_at, id) order, shows a batch's resources in the order they were
// sent although they share created_at. It returns the written rows with
// their position in the input; an item it did not write is unchanged or
// being deleted (batchReadSQL tells which).
const batchApplySQL = `WITH input AS (
    SELECT * FROM unnest($1::text[], $2::smallint[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[], $8::uuid[]) WITH ORDINALITY
        AS t(kind, kind_version, name, labels, spec, provider_config_ref, id, n)
), up AS (
    INSERT INTO resources AS r (namespace, id, kind, kind_version, name, labels, spec, provider_config_ref)
    SELECT $9::text, id, kind, kind_version, name, labels, spec, provider_config_ref FROM input ORDER BY n
    ON CONFLICT (namespace, kind, name) DO UPDATE SET
        kind_version = EXCLUDED.kind_version, labels = EXCLUDED.labels,
        spec = EXCLUDED.spec, provider_config_ref = EXCLUDED.provider_config_ref
    WHERE r.deletion_requested_at IS NULL
      AND (r.kind_version, r.labels, r.spec, r.provider_config_ref)
          IS DISTINCT FROM (EXCLUDED.kind_version, EXCLUDED.labels, EXCLUDED.spec, EXCLUDED.provider_config_ref)
    RETURNING r.id, r.kind, r.name, r.kind_version, r.labels, r.spec, r.owner_id, r.generation, r.resource_version,
              r.xmax = 0 AS inserted
), ev AS (
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT id, 'applied', generation, CASE WHEN inserted THEN 'created' ELSE 'configured' END FROM up
), hist AS (
    INSERT INTO resource_spec_history (resource_id, revision, generation, kind_version, spec, labels)
    SELECT u.id, CASE WHEN u.inserted THEN 1
                      ELSE coalesce((SELECT max(h.revision) FROM resource_spec_history h WHERE h.resource_id = u.id), 0) + 1 END,
           u.generation, u.kind_version, u.spec, u.labels
      FROM up u
     WHERE u.owner_id IS NULL
       AND (u.inserted OR NOT EXISTS (SELECT 1 FROM resource_spec_history h WHERE h.resource_id = u.id AND h.generation = u.generation))
    RETURNING resource_id, revision
), cut AS (
    DELETE FROM resource_spec_history h USING hist
     WHERE hist.revision > $7::int AND h.resource_id = hist.resource_id AND h.revision <= hist.revision - $7::int
)
SELECT i.n::int, u.id, u.generation, u.resource_version, u.inserted
  FROM up u JOIN input i ON i.kind = u.kind AND i.name = u.name`

// batchScheduleSQL schedules what the chunk wrote, as resourceScheduleSQL
// does for one resource.
const batchScheduleSQL = `SELECT schedule_applied_batch($3::text, $1::text[], $2::text[])`

// batchReadSQL reads the items the upsert did not write. It is a statement
// of its own so that it sees a row a concurrent apply committed while the
// upsert waited for it.
const batchReadSQL = `SELECT i.n::int, r.id, r.generation, r.resource_version, r.deletion_requested_at IS NOT NULL
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS i(kind, name, n)
  JOIN resources r ON r.namespace = $3 AND r.kind = i.kind AND r.name = i.name`

// batchVersionsSQL locks the resources of the items that carry a
// precondition and reads their versions, before the upsert: what it read
// cannot move until the chunk commits.
const batchVersionsSQL = `SELECT i.n::int, r.resource_version
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS i(kind, name, n)
  JOIN resources r ON r.namespace = $3 AND r.kind = i.kind AND r.name = i.name
   FOR UPDATE OF r`

// checkBatchVersions refuses each item of pass (positions in chunk) whose
// precondition does not hold, with a *PreconditionError in its result, and
// returns the items left. A batch item's precondition is the
// resource_version of its document: one version.
func checkBatchVersions(ctx context.Context, tx pgx.Tx, ns string, items []ApplyResourceParams, chunk, pass []int, res []BatchItemResult) ([]int, error) {
	var kinds, names []string
	var conditioned []int // positions in pass
	for k, j := range pass {
		if p := items[chunk[j]]; p.Precondition.set() {
			kinds, names, conditioned = append(kinds, p.Kind), append(names, p.Name), append(conditioned, k)
		}
	}
	if len(conditioned) == 0 {
		return pass, nil
	}
	current := make([]int64, len(conditioned)) // 0: no such resource
	var (
		n int
		v int64
	)
	rows, err := tx.Query(ctx, batchVersionsSQL, kinds, names, ns)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&n, &v}, func() error { current[n-1] = v; return nil }); err != nil {
		return nil, err
	}
	refused := map[int]bool{}
	for c, k := range conditioned {
		j := pass[k]
		p := items[chunk[j]]
		if !p.Precondition.holds(current[c]) {
			res[j] = BatchItemResult{Result: ApplyInvalid, Err: &PreconditionError{What: p.what(), Current: current[c]}}
			refused[k] = true
		}
	}
	left := pass[:0:0]
	for k, j := range pass {
		if !refused[k] {
			left = append(left, j)
		}
	}
	return left, nil
}

func (s *Store) applyChunkTx(ctx context.Context, tx pgx.Tx, items []ApplyResourceParams, chunk []int, res []BatchItemResult) error {
	if err := setTraceContext(ctx, tx); err != nil {
		return err
	}
	ns := items[chunk[0]].Namespace // ApplyResources set every item's
	var held bool
	if err := tx.QueryRow(ctx, `SELECT namespace_hold($1)`, ns).Scan(&held); err != nil {
		return err
	}
	if !held {
		return namespaceNotFound(ns)
	}
	if _, err := tx.Exec(ctx, namespaceQuotaLockSQL, ns); err != nil {
		return err
	}
	var (
		quotaMax  *int
		quotaUsed int
	)
	if err := tx.QueryRow(ctx, batchQuotaSQL, ns).Scan(&quotaMax, &quotaUsed); err != nil {
		return err
	}
	var (
		kinds, names, refs []string
		versions           []int16
		labels             []map[string]string
		specs              [][]byte
		anyRef             bool
	)
	for _, i := range chunk {
		p := items[i]
		kinds, names, versions = append(kinds, p.Kind), append(names, p.Name), append(versions, int16(p.KindVersion))
		refs = append(refs, p.ProviderConfigRef)
		anyRef = anyRef || p.ProviderConfigRef != ""
	}
	if anyRef {
		if _, err := tx.Exec(ctx, batchGateLockSQL, refs); err != nil {
			return err
		}
	}
	// The gate is read row by row into the items' results: a refused item
	// leaves the chunk.
	rows, err := tx.Query(ctx, batchGateSQL, kinds, versions, refs, ns, names)
	if err != nil {
		return err
	}
	j := 0
	var (
		reactor   *bool
		pcKind    *string
		pcVersion *int
		exists    bool
		pass      = make([]int, 0, len(chunk)) // positions in chunk
	)
	_, err = pgx.ForEachRow(rows, []any{&reactor, &pcKind, &pcVersion, &exists}, func() error {
		var pc *providerConfigKey
		if pcKind != nil {
			pc = &providerConfigKey{kind: *pcKind, version: *pcVersion}
		}
		p := items[chunk[j]]
		switch err := s.resourceGateError(ctx, p, reactor, pc); {
		case err != nil:
			res[j] = BatchItemResult{Result: ApplyInvalid, Err: err}
		case !exists && quotaMax != nil && quotaUsed >= *quotaMax:
			res[j] = BatchItemResult{Result: ApplyInvalid, Err: &QuotaError{Namespace: ns, Quota: QuotaMaxObjects, Limit: *quotaMax, Used: quotaUsed}}
		default:
			if !exists {
				quotaUsed++
			}
			pass = append(pass, j)
		}
		j++
		return nil
	})
	if err != nil {
		return err
	}
	if pass, err = checkBatchVersions(ctx, tx, ns, items, chunk, pass, res); err != nil {
		return err
	}
	kinds, names, versions = kinds[:0], names[:0], versions[:0]
	var (
		refCol []*string
		ids    []uuid.UUID
	)
	for _, j := range pass {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		ids = append(ids, id)
		p := items[chunk[j]]
		l, _ := p.columns()
		var ref *string
		if p.ProviderConfigRef != "" {
			ref = &p.ProviderConfigRef
		}
		kinds, names, versions = append(kinds, p.Kind), append(names, p.Name), append(versions, int16(p.KindVersion))
		labels, specs, refCol = append(labels, l), append(specs, p.Spec), append(refCol, ref)
	}
	if len(pass) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(batchApplySQL, kinds, versions, names, labels, specs, refCol, s.cfg.SpecHistoryLimit, ids, ns)
	b.Queue(batchScheduleSQL, kinds, names, ns)
	br := tx.SendBatch(ctx, b)
	written := make([]bool, len(pass))
	var (
		n        int
		id       string
		gen, rv  int64
		inserted bool
	)
	rows, err = br.Query()
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&n, &id, &gen, &rv, &inserted}, func() error {
			r := BatchItemResult{Result: ApplyConfigured, ID: id, Generation: gen, ResourceVersion: rv}
			if inserted {
				r.Result = ApplyCreated
			}
			res[pass[n-1]], written[n-1] = r, true
			return nil
		})
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	kinds, names = kinds[:0], names[:0]
	var unwritten []int // positions in pass
	for k, w := range written {
		if !w {
			p := items[chunk[pass[k]]]
			kinds, names, unwritten = append(kinds, p.Kind), append(names, p.Name), append(unwritten, k)
		}
	}
	if len(unwritten) == 0 {
		return nil
	}
	var deleting bool
	rows, err = tx.Query(ctx, batchReadSQL, kinds, names, ns)
	if err != nil {
		return err
	}
	found := 0
	_, err = pgx.ForEachRow(rows, []any{&n, &id, &gen, &rv, &deleting}, func() error {
		found++
		j := pass[unwritten[n-1]]
		p := items[chunk[j]]
		if deleting {
			res[j] = BatchItemResult{Result: ApplyInvalid, Err: &ConflictError{Message: fmt.Sprintf(
				"%s is being deleted; re-apply it once the deletion has finished", qualified(ns, p.Kind, p.Name))}}
			return nil
		}
		res[j] = BatchItemResult{Result: ApplyUnchanged, ID: id, Generation: gen, ResourceVersion: rv}
		return nil
	})
	if err != nil {
		return err
	}
	if found < len(unwritten) {
		// A row the upsert saw was removed before it could be read (its
		// deletion finished): run the chunk again.
		return errRetry
	}
	return nil
}
