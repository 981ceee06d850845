package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/schema"
)

// ErrNotFound means the named object does not exist.
var ErrNotFound = errors.New("not found")

// NotFoundError names what is missing and which input field named it.
// errors.Is(err, ErrNotFound) holds for it.
type NotFoundError struct {
	// Location is the input field that named the missing object, such as
	// "kind_version" or "provider_config_ref"; "" when the object is the
	// target of the request itself.
	Location string
	// Message says what is missing, e.g. `kind "vpc" has no version 3`.
	Message string
}

func (e *NotFoundError) Error() string { return e.Message }

// Unwrap makes errors.Is(err, ErrNotFound) hold.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// ConflictError means the request contradicts stored state (409). Details
// lists each reason, e.g. each breaking schema change.
type ConflictError struct {
	Message string
	Details []string
}

func (e *ConflictError) Error() string {
	if len(e.Details) == 0 {
		return e.Message
	}
	return e.Message + ": " + strings.Join(e.Details, "; ")
}

// InvalidError means a field breaks a rule the request could not know from
// its own shape alone (422), e.g. a reference to a config of another version.
type InvalidError struct {
	Location string
	Message  string
}

func (e *InvalidError) Error() string { return e.Location + ": " + e.Message }

// DocumentError means a user document — a resource spec or a provider config
// spec — violates the schema its kind version declares for it (400).
type DocumentError struct {
	// Location is the field holding the document, e.g. "spec".
	Location    string
	Kind        string
	KindVersion int
	// Violations lists every reason, each with a JSON pointer into the
	// document and the failing keyword.
	Violations []schema.Violation
}

func (e *DocumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s does not match the %s schema of %s/%d", e.Location, e.Location, e.Kind, e.KindVersion)
	for i, v := range e.Violations {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		p := v.Pointer
		if p == "" {
			p = "(root)"
		}
		b.WriteString(p + ": " + v.Keyword + ": " + v.Message)
	}
	return b.String()
}

// wrapUnlessTyped adds context to unexpected errors and passes the typed ones
// the API maps to statuses through unchanged, so messages are not prefixed
// twice.
func wrapUnlessTyped(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var (
		nf *NotFoundError
		ce *ConflictError
		ie *InvalidError
		de *DocumentError
		be *BreakingChangeError
		pe *PreconditionError
	)
	if errors.As(err, &nf) || errors.As(err, &ce) || errors.As(err, &ie) || errors.As(err, &de) || errors.As(err, &be) || errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) (string, *pgconn.PgError) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe
	}
	return "", nil
}

// SQLSTATEs the store maps to API errors.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeCheckViolation      = "23514"
)

// SQLSTATEs of text the database cannot store in jsonb (\u0000).
const (
	codeUntranslatableCharacter   = "22P05"
	codeInvalidTextRepresentation = "22P02"
)
