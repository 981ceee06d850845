package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The author of a write (docs/api.md "Audit trail"). WithActor marks a
// context with the subject of the API request it serves; every write the
// store makes under it runs in a transaction that first sets converge.actor
// to it (actorSQL, transaction-local: it never leaks to the pooled session's
// next user). The defaults of resource_events.actor and
// resource_spec_history.author read that setting (migration 00035), so
// every event and spec revision the request's transaction writes, through
// the store's statements or the engine's functions and triggers, names its
// author. The engine's own transactions (drain, reaper, dispatch) carry no
// actor and store NULL, which the API shows as ActorSystem.
//
// Where the setting is made: a transaction (Begin) runs actorSQL first, one
// round trip more; a batch (SendBatch), and a single Exec or QueryRow, are
// sent as a batch with actorSQL queued first, in the same round trip and
// the same implicit transaction; a dry run's one transaction runs it once,
// as it begins. A context without an actor costs nothing. Query is not marked: the store
// uses it for reads only.

// ActorSystem is the author the API shows for a row no request wrote.
const ActorSystem = "system"

// actorSQL makes the actor the transaction's.
const actorSQL = `SELECT set_config('converge.actor', $1, true)`

type actorKey struct{}

// WithActor returns ctx marked with actor, the subject the store's writes
// under it are attributed to; an empty actor marks nothing.
func WithActor(ctx context.Context, actor string) context.Context {
	if actor == "" {
		return ctx
	}
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf is ctx's actor, or "".
func actorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// setActor runs actorSQL in tx when ctx carries an actor.
func setActor(ctx context.Context, tx pgx.Tx) error {
	a := actorOf(ctx)
	if a == "" {
		return nil
	}
	_, err := tx.Exec(ctx, actorSQL, a)
	return err
}

// beginAs begins a transaction on p attributed to ctx's actor.
func beginAs(ctx context.Context, p *pgxpool.Pool) (pgx.Tx, error) {
	tx, err := p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := setActor(ctx, tx); err != nil {
		_ = tx.Rollback(ctx) // the set's error is the one to report
		return nil, err
	}
	return tx, nil
}

// sendBatchAs sends b on p with actorSQL queued first, and reads its
// result, so the caller reads b's results as its own; b is not modified.
func sendBatchAs(ctx context.Context, p *pgxpool.Pool, actor string, b *pgx.Batch) pgx.BatchResults {
	marked := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	marked.Queue(actorSQL, actor)
	marked.QueuedQueries = append(marked.QueuedQueries, b.QueuedQueries...)
	br := p.SendBatch(ctx, marked)
	if _, err := br.Exec(); err != nil {
		_ = br.Close() // the set's error is the one to report
		return failedBatch{BatchResults: br, err: err}
	}
	return br
}

// execAs runs one statement as a batch attributed to actor.
func execAs(ctx context.Context, p *pgxpool.Pool, actor, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := sendBatchAs(ctx, p, actor, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// actorRow is QueryRow's Row for a statement attributed to an actor: the
// batch that carries it closes once the row is read.
type actorRow struct{ br pgx.BatchResults }

// Scan reads the row into dest.
func (r actorRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// failedBatch is the results of a batch whose actor could not be set: every
// result is that error.
type failedBatch struct {
	pgx.BatchResults // closed
	err              error
}

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRow{f.err} }
func (f failedBatch) Close() error                     { return f.err }

// errRow is a Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
