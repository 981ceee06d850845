// Package pgrun holds what the store (control/store) and the engine
// (control/engine) both need to run statements on PostgreSQL: a
// transaction rolled back to break a deadlock runs again (RetryDeadlock),
// a list of UUIDs goes as one uuid[] literal (UUIDArray), a query's rows
// are read in the same call that runs it (Collect, CollectOne), and a
// database that cannot be reached is told from one refusing a statement
// (Unreachable; the API answers 503, the store's read pool falls back).
package pgrun

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// CodeDeadlockDetected is the SQLSTATE of a transaction PostgreSQL rolled
// back to break a lock cycle: running it again is safe and, the other side
// having gone through, succeeds.
const CodeDeadlockDetected = "40P01"

// IsDeadlock reports whether err is PostgreSQL rolling a transaction back
// to break a deadlock (SQLSTATE 40P01): nothing the transaction did
// remains, and running it again is safe. The store and the engine run
// their own writes again (RetryDeadlock); a caller that runs a claim again
// decides how often, and counts it.
func IsDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == CodeDeadlockDetected
}

// deadlockAttempts bounds RetryDeadlock. Two suffice (the second attempt
// runs once the other side of the cycle has gone through); the third is
// slack.
const deadlockAttempts = 3

// RetryDeadlock runs the transaction tx again when PostgreSQL rolled it
// back to break a deadlock, up to three attempts in all, and returns its
// last error. Writers lock resources before their work rows, and capped
// kinds' tokens last (docs/operations.md, "the lock order"); what cycles
// remain (two completers meeting on a composite's parent, a compose racing
// a completion) go through once the other side has.
func RetryDeadlock(tx func() error) error {
	for attempt := 1; ; attempt++ {
		err := tx()
		if !IsDeadlock(err) || attempt == deadlockAttempts {
			return err
		}
	}
}
