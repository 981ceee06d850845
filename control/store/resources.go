package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/pgrun"
)

// Label limits. Labels are free text (any Unicode), but bounded so a label
// set stays a small, indexable document.
const (
	MaxLabels          = 64
	MaxLabelKeyBytes   = 253
	MaxLabelValueBytes = 1024
)

// ApplyResourceParams is one resource as a client declares it.
type ApplyResourceParams struct {
	// Namespace is the resource's namespace; "" is DefaultNamespace.
	Namespace   string
	Kind        string
	KindVersion int
	Name        string
	Labels      map[string]string
	// Spec is the desired state, a JSON object validated against the
	// version's spec_schema. Empty means {}.
	Spec json.RawMessage
	// ProviderConfigRef names a provider config of the same (kind,
	// kind_version), in the resource's namespace or in DefaultNamespace,
	// whose spec overrides the kind's default; "" for none.
	ProviderConfigRef string
	// Precondition makes the apply conditional on the resource's current
	// resource_version; the zero value applies whatever it is.
	Precondition Precondition
}

// what names the resource in a *PreconditionError.
func (p ApplyResourceParams) what() string { return resourceWhat(p.Namespace, p.Kind, p.Name) }

// resourceWhat names a resource in messages: kind/name, prefixed with its
// namespace unless that is DefaultNamespace (so messages about the default
// namespace read as they did before namespaces).
func resourceWhat(ns, kind, name string) string {
	return "resource " + qualified(ns, kind, name)
}

// qualified is kind/name, or ns/kind/name outside DefaultNamespace.
func qualified(ns, kind, name string) string {
	if ns == "" || ns == DefaultNamespace {
		return kind + "/" + name
	}
	return ns + "/" + kind + "/" + name
}

// resourceViewCols are the columns a resource is read with, from alias r:
// resourceColsHead, its spec and status, then resourceColsTail.
const (
	resourceViewCols = resourceColsHead + `r.spec, r.status` + resourceColsTail
	resourceColsHead = `r.id, r.namespace, r.kind, r.kind_version, r.name, r.labels, `
	resourceColsTail = `, r.owner_id,
       r.provider_config_ref, r.generation, r.synced_gen, r.health_ok, r.failure_gen,
       r.phase, r.last_error, r.created_at, r.updated_at, r.resource_version`
)

// ResourceFields says which of a resource's large fields a list reads. The
// zero value reads them all.
type ResourceFields struct {
	// OmitSpec and OmitStatus leave the spec and the status out: they are
	// not read from the database, and the items have none.
	OmitSpec, OmitStatus bool
}

// listCols are resourceViewCols, from alias r, with the fields f omits as
// NULL, then row_size: the bytes the labels and the fields read take as
// stored (see pageSQL).
func (f ResourceFields) listCols() string {
	spec, status, size := "r.spec", "r.status", "pg_column_size(r.labels)"
	if f.OmitSpec {
		spec = "NULL::jsonb AS spec"
	} else {
		size += " + pg_column_size(r.spec)"
	}
	if f.OmitStatus {
		status = "NULL::jsonb AS status"
	} else {
		size += " + coalesce(pg_column_size(r.status), 0)"
	}
	return resourceColsHead + spec + ", " + status + resourceColsTail + ", " + size + " AS row_size"
}

// scanResourceView reads a row of resourceViewCols.
func scanResourceView(row pgx.CollectableRow) (model.Resource, error) {
	var r model.Resource
	targets, finish := resourceScanTargets(&r)
	if err := row.Scan(targets...); err != nil {
		return r, err
	}
	finish()
	return r, nil
}

// scanListed scans a row of listCols under pageSQL: the resource and
// whether a row follows it.
func scanListed(row pgx.CollectableRow) (model.Resource, bool, error) {
	var (
		r    model.Resource
		more bool
	)
	targets, finish := resourceScanTargets(&r)
	if err := row.Scan(append(targets, nil, nil, &more)...); err != nil {
		return r, false, err
	}
	finish()
	return r, more, nil
}

// resourceScanTargets returns scan destinations for resourceViewCols and a
// func that finishes r once scanned. model.Resource carries no db tags (it
// is control/model's wire type), so its rows are scanned by position.
func resourceScanTargets(r *model.Resource) ([]any, func()) {
	var (
		ref, lastErr *string
		ownerID      *uuid.UUID
	)
	finish := func() {
		if ownerID != nil {
			r.OwnerID = ownerID.String()
		}
		if ref != nil {
			r.ProviderConfigRef = *ref
		}
		if lastErr != nil {
			r.LastError = *lastErr
		}
		if r.Labels == nil {
			r.Labels = map[string]string{}
		}
	}
	return []any{&r.ID, &r.Namespace, &r.Kind, &r.KindVersion, &r.Name, &r.Labels, &r.Spec, &r.Status, &ownerID,
		&ref, &r.Generation, &r.SyncedGen, &r.HealthOK, &r.FailureGen,
		&r.Phase, &lastErr, &r.CreatedAt, &r.UpdatedAt, &r.ResourceVersion}, finish
}

// resourceApplyCountingSQL upserts a resource in one statement:
//
//   - held holds the namespace for the transaction (namespace_hold: no
//     deletion of it can pass this creation) and says whether it exists.
//   - gate checks that the namespace exists, that the manifest exists and
//     is not a reactor kind, that the provider config, if named, is in the
//     resource's namespace or the default one and belongs to the same
//     (kind, kind_version), and that creating the resource keeps its
//     namespace within max_objects. A creation in a namespace with the quota
//     is counted only when $9 says the namespace's row is locked
//     (namespaceQuotaLockSQL, earlier in the transaction); otherwise it is
//     refused with needs_lock, and the caller runs it again with the lock.
//     The config row is locked FOR SHARE so it cannot move to another
//     version until this apply commits.
//   - up inserts, or updates when anything the client owns changed. Its
//     WHERE makes a JSON-equal re-apply write nothing, so generation (bumped
//     by the BEFORE trigger on a spec or version change) stays put. xmax = 0
//     tells an insert from an update.
//   - ev appends the 'applied' event of a write.
//   - hist records a root resource's new generation as its next spec
//     revision, and cut keeps the newest $7 (composed children are written
//     by the engine, not here, and a child applied here records none).
//   - the result is the written row, or the stored one when nothing was
//     written, together with the gate's findings and, from prev, the
//     version the statement's snapshot saw before the write (NULL: none).
const resourceApplyCountingSQL = `WITH m AS (
    SELECT is_reactor FROM kind_manifest WHERE kind = $1 AND kind_version = $2
), prev AS (
    SELECT resource_version FROM resources WHERE namespace = $8 AND kind = $1 AND name = $3
), held AS MATERIALIZED (
    SELECT namespace_hold($8) AS ok
), ns AS (
    SELECT max_objects FROM namespaces WHERE name = $8 AND (SELECT ok FROM held)
), creating AS (
    SELECT ns.max_objects,
           ns.max_objects IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM resources x WHERE x.namespace = $8 AND x.kind = $1 AND x.name = $3) AS counted
      FROM ns
), quota AS (
    SELECT max_objects, counted AND NOT $9::boolean AS needs_lock,
           CASE WHEN counted AND $9::boolean THEN (SELECT count(*) FROM resources x WHERE x.namespace = $8)::int END AS used
      FROM creating
), pc AS (
    SELECT kind, kind_version FROM providerconfigs WHERE name = $6 AND namespace IN ($8, '` + DefaultNamespace + `') FOR SHARE
), gate AS (
    SELECT (SELECT NOT is_reactor FROM m) IS TRUE
       AND EXISTS (SELECT 1 FROM ns)
       AND coalesce((SELECT NOT needs_lock AND (used IS NULL OR used < max_objects) FROM quota), true)
       AND ($6::text IS NULL OR EXISTS (SELECT 1 FROM pc WHERE pc.kind = $1 AND pc.kind_version = $2)) AS pass
), up AS (
    INSERT INTO resources AS r (namespace, kind, kind_version, name, labels, spec, provider_config_ref)
    SELECT $8::text, $1::text, $2::smallint, $3::text, $4::jsonb, $5::jsonb, $6::text FROM gate WHERE pass
    ON CONFLICT (namespace, kind, name) DO UPDATE SET
        kind_version = EXCLUDED.kind_version, labels = EXCLUDED.labels,
        spec = EXCLUDED.spec, provider_config_ref = EXCLUDED.provider_config_ref
    WHERE r.deletion_requested_at IS NULL
      AND (r.kind_version, r.labels, r.spec, r.provider_config_ref)
          IS DISTINCT FROM (EXCLUDED.kind_version, EXCLUDED.labels, EXCLUDED.spec, EXCLUDED.provider_config_ref)
    RETURNING r.*, r.xmax = 0 AS inserted
), ev AS (
    INSERT INTO resource_events (resource_id, type, generation, message)
    SELECT id, 'applied', generation, CASE WHEN inserted THEN 'created' ELSE 'configured' END FROM up
), hist AS (
    INSERT INTO resource_spec_history (resource_id, revision, generation, kind_version, spec, labels)
    SELECT u.id, coalesce((SELECT max(h.revision) FROM resource_spec_history h WHERE h.resource_id = u.id), 0) + 1,
           u.generation, u.kind_version, u.spec, u.labels
      FROM up u
     WHERE u.owner_id IS NULL
       AND NOT EXISTS (SELECT 1 FROM resource_spec_history h WHERE h.resource_id = u.id AND h.generation = u.generation)
    RETURNING resource_id, revision
), cut AS (
    DELETE FROM resource_spec_history h USING hist
     WHERE h.resource_id = hist.resource_id AND h.revision <= hist.revision - $7::int
), res AS (
    SELECT ` + resourceViewCols + `, r.deletion_requested_at IS NOT NULL AS deleting,
           CASE WHEN r.inserted THEN 'created' ELSE 'configured' END AS result
      FROM up r
    UNION ALL
    SELECT ` + resourceViewCols + `, r.deletion_requested_at IS NOT NULL, 'unchanged'
      FROM resources r
     WHERE r.namespace = $8 AND r.kind = $1 AND r.name = $3 AND NOT EXISTS (SELECT 1 FROM up)
)
SELECT (SELECT pass FROM gate), (SELECT is_reactor FROM m), (SELECT kind FROM pc), (SELECT kind_version::int FROM pc),
       EXISTS (SELECT 1 FROM ns), coalesce((SELECT needs_lock FROM quota), false), (SELECT max_objects FROM quota),
       (SELECT used FROM quota),
       res.*, (SELECT resource_version FROM prev)
  FROM (SELECT 1) one LEFT JOIN res ON true`

// resourceApplySQL is resourceApplyCountingSQL without the count: a
// creation in a namespace with a quota asks for the lock instead
// (needs_lock) and runs again counting. The count's estimate (a scan of
// every resource of the namespace) would otherwise price the statement's
// generic plan so high that PostgreSQL plans every apply afresh once the
// table's statistics know its size (docs/performance.md, BenchmarkApply).
var resourceApplySQL = strings.Replace(resourceApplyCountingSQL,
	"CASE WHEN counted AND $9::boolean THEN (SELECT count(*) FROM resources x WHERE x.namespace = $8)::int END AS used", "NULL::int AS used", 1)

// resourceScheduleSQL runs in the apply's implicit transaction, after the
// upsert, so the engine schedules a created or changed resource
// (schedule_applied: a fresh resource takes one plain insert, a changed one
// goes through schedule_eligible, an unchanged one is left alone).
const resourceScheduleSQL = `SELECT schedule_applied($1, $2, $3)`

// ApplyResource creates or updates the resource (namespace, kind, name) and
// schedules it.
//
// The spec must be a JSON object valid against the version's spec_schema
// (else *DocumentError). Errors: *NotFoundError for an unknown namespace,
// (kind, kind_version) or provider config (one of another namespace than
// the resource's or the default one is unknown to it), *InvalidError for a
// bad name, version or label, a reactor kind, or a provider config of
// another kind version, *QuotaError when creating it would take its
// namespace past max_objects, and *ConflictError while the resource is
// being deleted.
//
// Re-applying a JSON-equal spec, equal labels, the same version and the same
// provider config writes nothing and returns ApplyUnchanged; generation moves
// only when the spec or version changes. Re-applying at another kind_version
// flips the row in place (same id), validated against the new version's
// schema; a refused flip changes nothing.
//
// The write is one round trip: the upsert, its event and the scheduling call
// are pipelined in one implicit transaction, after, for a traced request,
// the statement that stores its trace context with the work (tracecontext.go).
// A creation in a namespace with a max_objects quota takes a second one:
// the first finds the quota and writes nothing, the second locks the
// namespace first (namespaceQuotaLockSQL) and counts.
func (s *Store) ApplyResource(ctx context.Context, p ApplyResourceParams) (model.Resource, ApplyResult, error) {
	if err := s.validateResource(ctx, &p); err != nil {
		return model.Resource{}, "", err
	}
	p.Namespace = orDefault(p.Namespace)
	labels, ref := p.columns()
	quotaLock := false
	for attempt := 1; ; attempt++ {
		r, res, err := s.applyResourceOnce(ctx, p, labels, ref, quotaLock)
		if errors.Is(err, errNeedsQuotaLock) && !quotaLock {
			quotaLock = true
			continue
		}
		if errors.Is(err, errRetry) && attempt < maxWriteAttempts {
			continue
		}
		if errors.Is(err, errRetry) {
			return model.Resource{}, "", fmt.Errorf("apply resource %s/%s: lost %d races with concurrent applies", p.Kind, p.Name, attempt)
		}
		return r, res, err
	}
}

// errNeedsQuotaLock says an apply would create a resource in a namespace
// with a max_objects quota, and ran without the namespace's lock: it wrote
// nothing, and runs again with it.
var errNeedsQuotaLock = errors.New("store: the creation needs the namespace's quota lock")

func (s *Store) applyResourceOnce(ctx context.Context, p ApplyResourceParams, labels map[string]string, ref any, quotaLock bool) (model.Resource, ApplyResult, error) {
	b := &pgx.Batch{}
	traced := queueTraceContext(ctx, b)
	if p.Precondition.set() {
		// First in the batch's implicit transaction: its lock holds the
		// version until the upsert has written.
		b.Queue(requireVersionSQL(resourceVersionLock), p.what(), p.Precondition.expected(), p.Namespace, p.Kind, p.Name)
	}
	if quotaLock {
		b.Queue(namespaceQuotaLockSQL, p.Namespace)
	}
	apply := resourceApplySQL
	if quotaLock {
		apply = resourceApplyCountingSQL
	}
	b.Queue(apply, p.Kind, p.KindVersion, p.Name, labels, p.Spec, ref, s.cfg.SpecHistoryLimit, p.Namespace, quotaLock)
	b.Queue(resourceScheduleSQL, p.Namespace, p.Kind, p.Name)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close() // the error is read from the results below

	if traced {
		if _, err := br.Exec(); err != nil {
			return model.Resource{}, "", resourceWriteError(err, p)
		}
	}
	if p.Precondition.set() {
		if _, err := br.Exec(); err != nil {
			if pe := asPrecondition(err, p.what()); pe != nil {
				return model.Resource{}, "", pe
			}
			return model.Resource{}, "", resourceWriteError(err, p)
		}
	}
	if quotaLock {
		if _, err := br.Exec(); err != nil {
			return model.Resource{}, "", resourceWriteError(err, p)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return model.Resource{}, "", resourceWriteError(err, p)
	}
	var (
		pass, reactor, deleting *bool
		nsExists, needsLock     bool
		pcKind, rid, result     *string
		pcVersion               *int
		prior                   *int64
		quotaMax, quotaUsed     *int
		r                       model.Resource
	)
	targets, finishScanned := resourceScanTargets(&r)
	if rows.Next() {
		// The LEFT JOIN yields NULL resource columns when no row matched,
		// so read the gate and the id first and the resource only if there
		// is one. pgx allows scanning one row twice.
		head := append([]any{&pass, &reactor, &pcKind, &pcVersion, &nsExists, &needsLock, &quotaMax, &quotaUsed, &rid}, make([]any, len(targets))...)
		head = append(head, &result, &prior)
		err = rows.Scan(head...)
		if err == nil && rid != nil {
			full := append([]any{nil, nil, nil, nil, nil, nil, nil, nil}, targets...)
			err = rows.Scan(append(full, &deleting, nil, nil)...)
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return model.Resource{}, "", resourceWriteError(err, p)
	}
	if _, err := br.Exec(); err != nil {
		return model.Resource{}, "", resourceWriteError(err, p)
	}
	if err := br.Close(); err != nil {
		return model.Resource{}, "", resourceWriteError(err, p)
	}
	switch {
	case !nsExists:
		return model.Resource{}, "", namespaceNotFound(p.Namespace)
	case needsLock:
		return model.Resource{}, "", errNeedsQuotaLock
	case quotaMax != nil && quotaUsed != nil && *quotaUsed >= *quotaMax:
		return model.Resource{}, "", &QuotaError{Namespace: p.Namespace, Quota: QuotaMaxObjects, Limit: *quotaMax, Used: *quotaUsed}
	case reactor == nil || pass == nil || !*pass:
		var pc *providerConfigKey
		if pcKind != nil {
			pc = &providerConfigKey{kind: *pcKind, version: *pcVersion}
		}
		return model.Resource{}, "", s.resourceGateError(ctx, p, reactor, pc)
	case rid == nil:
		// The row was inserted by a transaction that committed after this
		// statement's snapshot, and equals ours: run again to read it.
		return model.Resource{}, "", errRetry
	case *deleting:
		return model.Resource{}, "", &ConflictError{Message: fmt.Sprintf(
			"%s is being deleted; re-apply it once the deletion has finished", qualified(p.Namespace, p.Kind, p.Name))}
	}
	finishScanned()
	if prior != nil {
		r.PriorVersion = *prior
	}
	return r, ApplyResult(*result), nil
}

// providerConfigKey is the (kind, kind_version) a provider config serves.
type providerConfigKey struct {
	kind    string
	version int
}

// resourceGateError says why the gate of an apply refused p: reactor is
// whether its (kind, kind_version) is a reactor kind (nil: no manifest), pc
// the provider config p names (nil: none exists). It returns nil when the
// gate passes.
func (s *Store) resourceGateError(ctx context.Context, p ApplyResourceParams, reactor *bool, pc *providerConfigKey) error {
	switch {
	case reactor == nil:
		return s.kindNotFound(ctx, p.Kind, p.KindVersion)
	case *reactor:
		return &InvalidError{Location: "kind",
			Message: fmt.Sprintf("%s/%d is a reactor kind: it owns no resources and runs only through reactor bindings", p.Kind, p.KindVersion)}
	case p.ProviderConfigRef == "":
		return nil
	case pc == nil:
		msg := fmt.Sprintf("provider_config %q does not exist", p.ProviderConfigRef)
		if ns := orDefault(p.Namespace); ns != DefaultNamespace {
			msg += fmt.Sprintf(" in namespace %q or %q", ns, DefaultNamespace)
		}
		return &NotFoundError{Location: "provider_config_ref", Message: msg}
	case pc.kind != p.Kind || pc.version != p.KindVersion:
		return &InvalidError{Location: "provider_config_ref",
			Message: fmt.Sprintf("provider_config %q is for %s/%d, not %s/%d", p.ProviderConfigRef, pc.kind, pc.version, p.Kind, p.KindVersion)}
	}
	return nil
}

// validateResource runs every check of an apply that needs no write: the
// parameters' rules, then the spec against its kind version's schema. It
// normalises p.Spec ({} when empty).
func (s *Store) validateResource(ctx context.Context, p *ApplyResourceParams) error {
	if err := validateResourceParams(p); err != nil {
		return err
	}
	return s.checkSpec(ctx, p.Kind, p.KindVersion, p.Spec)
}

// columns returns the labels and provider_config_ref column values of p:
// {} for no labels, NULL for no provider config.
func (p ApplyResourceParams) columns() (map[string]string, any) {
	labels := p.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	var ref any
	if p.ProviderConfigRef != "" {
		ref = p.ProviderConfigRef
	}
	return labels, ref
}

// resourceWriteError maps database errors of a resource write.
func resourceWriteError(err error, p ApplyResourceParams) error {
	code, pe := pgCode(err)
	switch code {
	case codeUniqueViolation:
		// A concurrent apply took the same spec revision number: run again.
		if pe.ConstraintName == "resource_spec_history_pkey" {
			return errRetry
		}
	case pgrun.CodeDeadlockDetected:
		// The apply locks the resource, then (scheduling it) its work row;
		// a completion finishing that row's task locks them the other way
		// round. PostgreSQL broke the cycle by rolling the apply back.
		return errRetry
	case codeForeignKeyViolation:
		// The manifest or config vanished between the gate and the write.
		if strings.Contains(pe.ConstraintName, "provider_config") {
			return &NotFoundError{Location: "provider_config_ref", Message: fmt.Sprintf("provider_config %q does not exist", p.ProviderConfigRef)}
		}
		return &NotFoundError{Location: "kind_version", Message: fmt.Sprintf("no manifest is published for %s/%d", p.Kind, p.KindVersion)}
	case codeCheckViolation:
		return &InvalidError{Location: "", Message: "the resource breaks a rule enforced by the database"}
	case codeUntranslatableCharacter, codeInvalidTextRepresentation:
		return &DocumentError{Location: "spec", Kind: p.Kind, KindVersion: p.KindVersion, Violations: []schema.Violation{{
			Keyword: "type", Message: "contains a string the database cannot store (a \\u0000 escape)"}}}
	}
	return fmt.Errorf("apply resource %s/%s: %w", p.Kind, p.Name, err)
}

// validateResourceParams checks what needs no database.
func validateResourceParams(p *ApplyResourceParams) error {
	switch {
	case !model.ValidKind(p.Kind):
		return &InvalidError{Location: "kind", Message: "must match ^[a-z][a-z0-9-]{0,62}$"}
	case !model.ValidKindVersion(p.KindVersion):
		return &InvalidError{Location: "kind_version", Message: fmt.Sprintf("is required and must be in 1..%d (got %d)", model.MaxKindVersion, p.KindVersion)}
	case !model.ValidName(p.Name):
		return &InvalidError{Location: "name", Message: "must be 1-253 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case p.ProviderConfigRef != "" && !model.ValidName(p.ProviderConfigRef):
		return &InvalidError{Location: "provider_config_ref", Message: "is not a valid provider config name"}
	}
	if err := validateLabels("labels", p.Labels); err != nil {
		return err
	}
	p.Spec = bytes.TrimSpace(p.Spec)
	if len(p.Spec) == 0 {
		p.Spec = json.RawMessage(`{}`)
	}
	if p.Spec[0] != '{' {
		return &DocumentError{Location: "spec", Kind: p.Kind, KindVersion: p.KindVersion,
			Violations: []schema.Violation{{Keyword: "type", Message: "spec must be a JSON object"}}}
	}
	return nil
}

// validateLabels bounds a label set. Keys and values may be any Unicode text
// except NUL, which jsonb cannot store.
func validateLabels(loc string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return &InvalidError{Location: loc, Message: fmt.Sprintf("at most %d labels are allowed (got %d)", MaxLabels, len(labels))}
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := labels[k]
		switch {
		case k == "":
			return &InvalidError{Location: loc, Message: "label keys must not be empty"}
		case len(k) > MaxLabelKeyBytes:
			return &InvalidError{Location: loc + "." + k, Message: fmt.Sprintf("label key is longer than %d bytes", MaxLabelKeyBytes)}
		case len(v) > MaxLabelValueBytes:
			return &InvalidError{Location: loc + "." + k, Message: fmt.Sprintf("label value is longer than %d bytes", MaxLabelValueBytes)}
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			return &InvalidError{Location: loc + "." + k, Message: "labels must not contain NUL characters"}
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return &InvalidError{Location: loc + "." + k, Message: "labels must be valid UTF-8"}
		}
	}
	return nil
}

// ResourceDetail is a resource with its conditions and its last finished
// task.
type ResourceDetail struct {
	model.Resource
	// Conditions are the stored conditions, by type. Happy-path Ready and
	// Synced are not stored; phase says them.
	Conditions []model.StoredCondition `json:"conditions"`
	// LastTask is the task whose outcome was applied last; nil before
	// the first.
	LastTask *LastTask `json:"last_task,omitempty" doc:"The task whose outcome was applied last: its id (as in the delivery envelope), claim epoch, and when it was queued and claimed (updated_at is when its outcome was applied)."`
}

// LastTask identifies the last task applied to a resource, to find it in a
// provider's logs (the task id is in every delivery's envelope), and keeps
// its times: the event log records phase changes and failures, not every
// task's steps.
type LastTask struct {
	TaskID     string `json:"task_id"`
	ClaimEpoch int64  `json:"claim_epoch"`
	// EnqueuedAt is when the task was queued; nil for one applied before
	// the times were kept.
	EnqueuedAt *time.Time `json:"enqueued_at,omitempty"`
	ClaimedAt  time.Time  `json:"claimed_at"`
}

const resourceGetSQL = `SELECT ` + resourceViewCols + `,
       (SELECT coalesce(json_agg(json_build_object('type', c.type, 'status', c.status, 'reason', c.reason,
                 'message', c.message, 'last_transition_time', c.last_transition_time) ORDER BY c.type), '[]')
          FROM resource_conditions c WHERE c.resource_id = r.id),
       r.last_task_id, r.last_task_epoch, r.last_enqueued_at, r.last_claimed_at
  FROM resources r WHERE r.namespace = $1 AND r.kind = $2 AND r.name = $3`

// GetResource returns the resource (kind, name) of namespace ns ("" is
// DefaultNamespace) with its conditions, or a *NotFoundError.
func (s *Store) GetResource(ctx context.Context, ns, kind, name string) (ResourceDetail, error) {
	ns = orDefault(ns)
	var (
		d          ResourceDetail
		taskID     *string
		claimEpoch *int64
		enqueuedAt *time.Time
		claimedAt  *time.Time
	)
	targets, finish := resourceScanTargets(&d.Resource)
	err := s.reader(ctx).QueryRow(ctx, resourceGetSQL, ns, kind, name).Scan(append(targets, &d.Conditions, &taskID, &claimEpoch, &enqueuedAt, &claimedAt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return ResourceDetail{}, resourceNotFound(ns, kind, name)
	}
	if err != nil {
		return ResourceDetail{}, fmt.Errorf("get %s: %w", resourceWhat(ns, kind, name), err)
	}
	finish()
	if d.Conditions == nil {
		d.Conditions = []model.StoredCondition{}
	}
	if taskID != nil && claimEpoch != nil && claimedAt != nil {
		d.LastTask = &LastTask{TaskID: *taskID, ClaimEpoch: *claimEpoch, EnqueuedAt: enqueuedAt, ClaimedAt: *claimedAt}
	}
	return d, nil
}

func resourceNotFound(ns, kind, name string) error {
	return &NotFoundError{Message: resourceWhat(ns, kind, name) + " does not exist"}
}

// ResourceID resolves (kind, name) of namespace ns ("" is DefaultNamespace)
// to an id.
func (s *Store) ResourceID(ctx context.Context, ns, kind, name string) (string, error) {
	ns = orDefault(ns)
	var id string
	err := s.reader(ctx).QueryRow(ctx, `SELECT id FROM resources WHERE namespace = $1 AND kind = $2 AND name = $3`, ns, kind, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", resourceNotFound(ns, kind, name)
	}
	if err != nil {
		return "", fmt.Errorf("resolve resource: %w", err)
	}
	return id, nil
}

// ListResourcesParams filters and pages ListResources. Zero values do not
// filter.
type ListResourcesParams struct {
	// Namespace keeps the resources of one namespace ("" is
	// DefaultNamespace); AllNamespaces keeps every namespace's.
	Namespace   string
	Kind        string
	KindVersion int
	// Phases keeps resources in any of these phases.
	Phases []model.Phase
	// Selector keeps resources whose labels meet every requirement.
	Selector LabelSelector
	// OwnerID keeps the children of this resource (a UUID).
	OwnerID string
	// NamePrefix keeps resources whose name starts with it.
	NamePrefix string
	// Failure keeps resources whose reconcile of their generation failed:
	// FailureRetrying (transiently, still being retried) or
	// FailureTerminal (not retried until the spec changes or an operator
	// asks). Both are phase Failed.
	Failure string
	// Fields says whether the items have their spec and status.
	Fields ResourceFields
	// Limit is the page size: ListLimitDefault when 0, at most ListLimitMax.
	Limit int
	// MaxBytes ends a page early, before the row that would take the bytes
	// read for it past MaxBytes (the first row always stays):
	// ListBytesDefault when 0.
	MaxBytes int
	// Cursor continues after the page that returned it; "" starts at the
	// beginning.
	Cursor string
}

// The values of ListResourcesParams.Failure.
const (
	FailureRetrying = "retrying"
	FailureTerminal = "terminal"
)

// ListResources pages through resources in (created_at, id) order with a
// keyset cursor: each page is one indexed range scan, stable under
// concurrent inserts, and no total is counted. A page holds up to Limit
// resources and ends early at MaxBytes (see collectPage). Invalid
// parameters return *InvalidError naming the parameter.
func (s *Store) ListResources(ctx context.Context, p ListResourcesParams) (Page[model.Resource], error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return Page[model.Resource]{}, err
	}
	budget := pageBudget(p.MaxBytes)
	var (
		q   strings.Builder
		qa  queryArgs
		arg = qa.add
	)
	q.WriteString(`SELECT ` + p.Fields.listCols() + ` FROM resources r WHERE true`)
	if ns := orDefault(p.Namespace); ns != AllNamespaces {
		q.WriteString(` AND r.namespace = ` + arg(ns))
	}
	if p.Kind != "" {
		q.WriteString(` AND r.kind = ` + arg(p.Kind))
	}
	if p.KindVersion != 0 {
		if !model.ValidKindVersion(p.KindVersion) {
			return Page[model.Resource]{}, &InvalidError{Location: "kind_version", Message: fmt.Sprintf("must be in 1..%d", model.MaxKindVersion)}
		}
		q.WriteString(` AND r.kind_version = ` + arg(p.KindVersion))
	}
	if len(p.Phases) > 0 {
		phases := make([]string, len(p.Phases))
		for i, ph := range p.Phases {
			if !slices.Contains(model.Phases, ph) {
				return Page[model.Resource]{}, &InvalidError{Location: "phase", Message: fmt.Sprintf("%q is not one of %s", ph, phaseNames())}
			}
			phases[i] = string(ph)
		}
		q.WriteString(` AND r.phase = ANY (` + arg(phases) + `::text[])`)
	}
	if len(p.Selector) > 0 {
		if err := p.Selector.validate(); err != nil {
			return Page[model.Resource]{}, err
		}
		q.WriteString(` AND ` + p.Selector.where("r.labels", arg))
	}
	if p.OwnerID != "" {
		id, err := uuid.Parse(p.OwnerID)
		if err != nil {
			return Page[model.Resource]{}, &InvalidError{Location: "owner", Message: "must be a resource id (a UUID)"}
		}
		q.WriteString(` AND r.owner_id = ` + arg(id))
	}
	// failure_gen > 0 is implied (generation >= 1); it is stated for the
	// planner, which can then use idx_resources_failed.
	switch p.Failure {
	case "":
	case FailureRetrying:
		q.WriteString(` AND r.failure_gen > 0 AND r.failure_gen = r.generation AND NOT r.failure_terminal`)
	case FailureTerminal:
		q.WriteString(` AND r.failure_gen > 0 AND r.failure_gen = r.generation AND r.failure_terminal`)
	default:
		return Page[model.Resource]{}, &InvalidError{Location: "failure", Message: fmt.Sprintf("must be %s or %s", FailureRetrying, FailureTerminal)}
	}
	if p.NamePrefix != "" {
		q.WriteString(` AND starts_with(r.name, ` + arg(p.NamePrefix) + `)`)
	}
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return Page[model.Resource]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q.WriteString(` AND (r.created_at, r.id) > (` + arg(at) + `, ` + arg(id) + `)`)
	}
	sql := pageSQL(q.String(), "created_at, id", arg(limit), arg(budget))
	rows, err := s.reader(ctx).Query(ctx, sql, qa...)
	if err != nil {
		return Page[model.Resource]{}, fmt.Errorf("list resources: %w", err)
	}
	items, more, err := collectPage(rows, budget, scanListed)
	if err != nil {
		return Page[model.Resource]{}, fmt.Errorf("list resources: %w", err)
	}
	page := Page[model.Resource]{Items: items}
	if more {
		last := items[len(items)-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []model.Resource{}
	}
	return page, nil
}

func phaseNames() string {
	s := make([]string, len(model.Phases))
	for i, p := range model.Phases {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// A cursor is "<created_at in unix microseconds>.<id>" in base64url. The
// database keeps microseconds, so the round trip is exact.
func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + id))
}

func decodeCursor(c string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, uuid.UUID{}, err
	}
	micros, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return time.Time{}, uuid.UUID{}, errors.New("no separator")
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return time.Time{}, uuid.UUID{}, err
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, uuid.UUID{}, err
	}
	return time.UnixMicro(n), u, nil
}

// DeleteResource requests the deletion of (kind, name) of namespace ns (""
// is DefaultNamespace) and returns the
// resource as marked (phase Deleting), or a *NotFoundError. Its whole
// teardown tree is marked: everything it owns and everything that depends
// on any of it. Each node is removed once nothing beneath it remains, after
// its kind's deleteRequested reaction succeeds if the kind has a finalizer
// (request_deletion, engine/teardown.sql); a node with nothing beneath it
// and no finalizer is removed before this returns. Requesting it again is a
// no-op. pre makes the request conditional on the resource's version
// (else *PreconditionError).
func (s *Store) DeleteResource(ctx context.Context, ns, kind, name string, pre Precondition) (model.Resource, error) {
	ns = orDefault(ns)
	var r model.Resource
	err := pgrun.RetryDeadlock(func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := setTraceContext(ctx, tx); err != nil {
				return err
			}
			if err := checkVersion(ctx, tx, pre, resourceWhat(ns, kind, name), resourceVersionLock, ns, kind, name); err != nil {
				return err
			}
			return s.deleteTx(ctx, tx, ns, kind, name, &r)
		})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Resource{}, resourceNotFound(ns, kind, name)
	}
	if err != nil {
		return model.Resource{}, fmt.Errorf("delete %s: %w", resourceWhat(ns, kind, name), err)
	}
	return r, nil
}

// deleteTx reads the resource into r and requests its deletion.
func (s *Store) deleteTx(ctx context.Context, tx pgx.Tx, ns, kind, name string, r *model.Resource) error {
	targets, finish := resourceScanTargets(r)
	if err := tx.QueryRow(ctx, `SELECT `+resourceViewCols+` FROM resources r WHERE r.namespace = $1 AND r.kind = $2 AND r.name = $3 FOR UPDATE`,
		ns, kind, name).Scan(targets...); err != nil {
		return err
	}
	finish()
	r.PriorVersion = r.ResourceVersion
	if r.Phase == string(model.PhaseDeleting) {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT request_deletion(ARRAY[$1::uuid], 'deletion requested')`, r.ID); err != nil {
		return err
	}
	r.Phase = string(model.PhaseDeleting)
	// The mark is a write: the answer carries the version it made (none
	// when the resource, with nothing beneath it, is already gone).
	err := tx.QueryRow(ctx, `SELECT resource_version FROM resources WHERE id = $1`, r.ID).Scan(&r.ResourceVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

// SetQuarantine quarantines (on) or releases the resource id and returns
// it. A quarantined resource is frozen from every scheduler and value flow,
// loses a pending reconcile (never a delete task), no longer holds up its
// root's rollup and is never reaped; spec edits persist but do not release
// it. Repeating either is a no-op. Errors: *ConflictError while the
// resource is being deleted.
func (s *Store) SetQuarantine(ctx context.Context, id string, on bool) (model.Resource, error) {
	var (
		r      model.Resource
		result string
	)
	targets, finish := resourceScanTargets(&r)
	err := pgrun.RetryDeadlock(func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT set_quarantine($1, $2)`, id, on).Scan(&result); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT `+resourceViewCols+` FROM resources r WHERE r.id = $1`, id).Scan(targets...)
		})
	})
	if err != nil {
		return model.Resource{}, fmt.Errorf("quarantine: %w", err)
	}
	if result == "deleting" {
		return model.Resource{}, &ConflictError{Message: "the resource is being deleted; quarantine does not apply to a teardown"}
	}
	finish()
	return r, nil
}
