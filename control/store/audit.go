package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// The audit trail (docs/api.md "Audit trail"): one row per API request that
// is not a read, whatever its outcome. The API records them (RecordAudit)
// and pages through them (ListAudit); nothing updates a row, and the reaper
// deletes the rows older than the retention (PruneAudit), the only delete.

// AuditRetentionDefault is how long the audit trail keeps a request: 90
// days.
const AuditRetentionDefault = 90 * 24 * time.Hour

// The outcomes of an audited request.
const (
	AuditOK      = "ok"      // answered 1xx-3xx
	AuditRefused = "refused" // 401 or 403: the caller may not
	AuditError   = "error"   // any other 4xx or 5xx
)

// AuditOutcomes lists the outcomes, for validation.
var AuditOutcomes = []string{AuditOK, AuditRefused, AuditError}

// AuditEntry is one audited request.
type AuditEntry struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at" doc:"When the request was answered."`
	Subject   string    `json:"subject" doc:"Who called: token:<name> for a static token, an OIDC subject, anonymous when the API is open, unauthenticated when the request was refused before its caller was known (a 401)."`
	Groups    []string  `json:"groups" doc:"The caller's groups (OIDC); empty for static tokens."`
	TokenName string    `json:"token_name,omitempty" doc:"The static token used (admin-0, read-1, ...), never the token."`
	Method    string    `json:"method"`
	Route     string    `json:"route" doc:"The route's template as the OpenAPI document spells it (/api/v1/resources/{kind}/{name}), or unrouted when no route answered."`
	Path      string    `json:"path" doc:"The request's path as sent, without its query."`
	Namespace string    `json:"namespace" doc:"The request's namespace query parameter as sent, default when absent."`
	// ObjectKind and ObjectName name what the request addressed.
	ObjectKind    string `json:"object_kind,omitempty" doc:"What the request addressed: a resource's kind for a resource's routes, else the collection in the path (endpoints, providerconfigs, kinds, ...)."`
	ObjectName    string `json:"object_name,omitempty" doc:"The addressed object's name (a kind's for /kinds/{kind}/...), from the path or, for an apply, its body."`
	VersionBefore *int64 `json:"version_before,omitempty" doc:"The object's resource_version before the write; absent when it did not exist or the route does not say."`
	VersionAfter  *int64 `json:"version_after,omitempty" doc:"Its resource_version after the write; absent when the write failed, was a dry run, or the route does not say."`
	RemoteAddr    string `json:"remote_addr,omitempty" doc:"The client's address as the server saw it."`
	RequestID     string `json:"request_id" doc:"The request's X-Request-Id (the client's, or one the server made), echoed in its answer."`
	Status        int    `json:"status" doc:"The answer's HTTP status."`
	Outcome       string `json:"outcome" enum:"ok,refused,error" doc:"ok (1xx-3xx), refused (401, 403) or error (any other status of 400 and above)."`
	DryRun        bool   `json:"dry_run" doc:"The request asked for a dry run (?dry_run=true): nothing it did was kept."`
}

// OutcomeOf is the outcome of an answer with this status.
func OutcomeOf(status int) string {
	switch {
	case status == 401 || status == 403:
		return AuditRefused
	case status >= 400:
		return AuditError
	}
	return AuditOK
}

const auditCols = `id, at, subject, groups, coalesce(token_name, ''), method, route, path, namespace,
	coalesce(object_kind, ''), coalesce(object_name, ''), version_before, version_after, coalesce(remote_addr, ''),
	request_id, status, outcome, dry_run`

func scanAudit(row pgx.CollectableRow) (AuditEntry, error) {
	var e AuditEntry
	err := row.Scan(&e.ID, &e.At, &e.Subject, &e.Groups, &e.TokenName, &e.Method, &e.Route, &e.Path, &e.Namespace,
		&e.ObjectKind, &e.ObjectName, &e.VersionBefore, &e.VersionAfter, &e.RemoteAddr,
		&e.RequestID, &e.Status, &e.Outcome, &e.DryRun)
	return e, err
}

// RecordAudit appends e (its ID and At are the database's) and returns its
// id. Call it outside the request's transaction and dry run: the row must
// stay whatever became of the request.
func (s *Store) RecordAudit(ctx context.Context, e AuditEntry) (int64, error) {
	nullable := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	groups := e.Groups
	if groups == nil {
		groups = []string{}
	}
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO audit_log (subject, groups, token_name, method, route, path, namespace,
		object_kind, object_name, version_before, version_after, remote_addr, request_id, status, outcome, dry_run)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) RETURNING id`,
		e.Subject, groups, nullable(e.TokenName), e.Method, e.Route, e.Path, e.Namespace,
		nullable(e.ObjectKind), nullable(e.ObjectName), e.VersionBefore, e.VersionAfter, nullable(e.RemoteAddr),
		e.RequestID, e.Status, e.Outcome, e.DryRun).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record audit entry: %w", err)
	}
	return id, nil
}

// AuditFilter selects and pages ListAudit. Empty fields select everything.
type AuditFilter struct {
	// Namespace keeps one namespace's requests; "" or "*" keeps all.
	Namespace string
	// ObjectKind and ObjectName keep the requests that addressed such an
	// object; either may be given alone.
	ObjectKind, ObjectName string
	// Subject keeps one caller's requests.
	Subject string
	// Outcome keeps one outcome (one of AuditOutcomes).
	Outcome string
	// Since keeps requests at or after it; Until those before it (after
	// Since when both are given).
	Since, Until time.Time
	// Limit is the page size: ListLimitDefault when 0, at most ListLimitMax.
	Limit int
	// Cursor continues after the page that returned it.
	Cursor string
}

// ListAudit pages through the audit trail newest first with an id keyset
// cursor. Every filter but the time window and the outcome is served by an
// index ending in id (migration 00035). Invalid parameters are an
// *InvalidError naming the parameter.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) (Page[AuditEntry], error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return Page[AuditEntry]{}, err
	}
	var (
		q   strings.Builder
		qa  queryArgs
		arg = qa.add
	)
	q.WriteString(`SELECT ` + auditCols + ` FROM audit_log WHERE true`)
	if f.Namespace != "" && f.Namespace != "*" {
		q.WriteString(` AND namespace = ` + arg(f.Namespace))
	}
	if f.ObjectKind != "" {
		q.WriteString(` AND object_kind = ` + arg(f.ObjectKind))
	}
	if f.ObjectName != "" {
		q.WriteString(` AND object_name = ` + arg(f.ObjectName))
	}
	if f.Subject != "" {
		q.WriteString(` AND subject = ` + arg(f.Subject))
	}
	if f.Outcome != "" {
		if !slices.Contains(AuditOutcomes, f.Outcome) {
			return Page[AuditEntry]{}, &InvalidError{Location: "outcome",
				Message: fmt.Sprintf("%q is not one of %s", f.Outcome, strings.Join(AuditOutcomes, ", "))}
		}
		q.WriteString(` AND outcome = ` + arg(f.Outcome))
	}
	if !f.Since.IsZero() {
		q.WriteString(` AND at >= ` + arg(f.Since))
	}
	if !f.Until.IsZero() {
		if !f.Since.IsZero() && !f.Until.After(f.Since) {
			return Page[AuditEntry]{}, &InvalidError{Location: "until", Message: "must be after since: the window would be empty"}
		}
		q.WriteString(` AND at < ` + arg(f.Until))
	}
	if f.Cursor != "" {
		id, err := decodeIDCursor(f.Cursor, "a")
		if err != nil {
			return Page[AuditEntry]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q.WriteString(` AND id < ` + arg(id))
	}
	q.WriteString(` ORDER BY id DESC LIMIT ` + arg(limit+1))
	items, err := pgrun.Collect(ctx, s.reader(ctx), scanAudit, q.String(), qa...)
	if err != nil {
		return Page[AuditEntry]{}, fmt.Errorf("list audit: %w", err)
	}
	return idDescPage(items, limit, "a", func(e AuditEntry) int64 { return e.ID }), nil
}

// PruneAudit deletes the audit entries older than maxAge, at most limit a
// call (oldest first, through the at index), and returns how many went:
// limit means more may be due. The reaper calls it; it is the only delete
// of the audit trail.
func (s *Store) PruneAudit(ctx context.Context, maxAge time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM audit_log WHERE id IN
		(SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)`, time.Now().Add(-maxAge), limit)
	if err != nil {
		return 0, fmt.Errorf("prune audit: %w", err)
	}
	return tag.RowsAffected(), nil
}
