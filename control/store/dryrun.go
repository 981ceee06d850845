package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A dry run (the API's ?dry_run=true, docs/api.md "Dry run") runs a write
// exactly as a real one, in one transaction that is rolled back: DryRun
// marks a context, and every statement the store runs under that context
// (every write method's transactions, statements and batches, and the
// reads that follow them) runs in the dry run's transaction instead of on
// the pool. Nothing it writes is ever committed, so nothing escapes it:
// rows (resources, their events and spec revisions, the work queue and
// outboxes), NOTIFYs (sent at commit only) and transaction-scoped advisory
// locks all go with the rollback. What does not roll back is a sequence:
// the resource_version and the event ids a dry run draws are never handed
// out again, leaving gaps, as any refused write leaves.
//
// Each statement run outside a transaction of the store's own runs in a
// savepoint of its own, so that a statement that fails (a unique
// violation a write turns into a 409, say) leaves the dry run's
// transaction usable, as a failed statement on the pool leaves the pool.
// A dry run's statements run one at a time: the store's write methods
// never run two at once.

// dryRunKey marks a context DryRun made; its value is the *dryRun.
type dryRunKey struct{}

// dryRun is a dry run's transaction.
type dryRun struct{ tx pgx.Tx }

// dryRunRollbackTimeout bounds the rollback that ends a dry run.
const dryRunRollbackTimeout = 5 * time.Second

// DryRun calls fn with a context under which the store runs every
// statement in one transaction, and rolls that transaction back when fn
// returns, whatever it returns. fn's error is returned as is.
func (s *Store) DryRun(ctx context.Context, fn func(context.Context) error) error {
	tx, err := s.pool.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin a dry run: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dryRunRollbackTimeout)
		defer cancel()
		// A rollback that fails closes the connection, which ends the
		// transaction uncommitted all the same.
		_ = tx.Rollback(rctx)
	}()
	if err := setActor(ctx, tx); err != nil {
		return fmt.Errorf("begin a dry run: %w", err)
	}
	return fn(context.WithValue(ctx, dryRunKey{}, &dryRun{tx: tx}))
}

// IsDryRun reports whether ctx runs under DryRun: what the store writes
// under it is rolled back.
func IsDryRun(ctx context.Context) bool { return dryRunOf(ctx) != nil }

func dryRunOf(ctx context.Context) *dryRun {
	d, _ := ctx.Value(dryRunKey{}).(*dryRun)
	return d
}

// savepoint opens the savepoint a single statement runs in.
func (d *dryRun) savepoint(ctx context.Context) error {
	_, err := d.tx.Exec(ctx, "SAVEPOINT dry_run_statement")
	return err
}

// settle ends the savepoint of a statement that has finished: released, or
// rolled back to when the statement failed and left the transaction
// aborted.
func (d *dryRun) settle(ctx context.Context) error {
	sql := "RELEASE SAVEPOINT dry_run_statement"
	if d.tx.Conn().PgConn().TxStatus() == 'E' {
		sql = "ROLLBACK TO SAVEPOINT dry_run_statement; RELEASE SAVEPOINT dry_run_statement"
	}
	_, err := d.tx.Exec(ctx, sql)
	return err
}

// pool is the store's connection pool, seen through dry runs: Begin, Exec,
// Query, QueryRow and SendBatch run in the dry run's transaction when their
// context is marked by DryRun, else on the pool (attributed to the
// context's actor, actor.go). Everything else (Acquire for LISTEN, Ping) is
// the pool's own.
type pool struct{ *pgxpool.Pool }

// Begin starts a transaction, or under a dry run a savepoint of its
// transaction (pgx's nested transaction).
func (p pool) Begin(ctx context.Context) (pgx.Tx, error) {
	if d := dryRunOf(ctx); d != nil {
		return d.tx.Begin(ctx)
	}
	return beginAs(ctx, p.Pool)
}

// Exec runs one statement.
func (p pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d := dryRunOf(ctx)
	if d == nil {
		if a := actorOf(ctx); a != "" {
			return execAs(ctx, p.Pool, a, sql, args...)
		}
		return p.Pool.Exec(ctx, sql, args...)
	}
	if err := d.savepoint(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := d.tx.Exec(ctx, sql, args...)
	if serr := d.settle(ctx); err == nil {
		err = serr
	}
	return tag, err
}

// Query runs one query; under a dry run its savepoint ends when its rows
// are closed.
func (p pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d := dryRunOf(ctx)
	if d == nil {
		return p.Pool.Query(ctx, sql, args...)
	}
	if err := d.savepoint(ctx); err != nil {
		return nil, err
	}
	rows, err := d.tx.Query(ctx, sql, args...)
	if err != nil {
		_ = d.settle(ctx) // the query's error is the one to report
		return nil, err
	}
	return &dryRunRows{Rows: rows, ctx: ctx, d: d}, nil
}

// QueryRow runs a query of at most one row, read by the returned Row's
// Scan.
func (p pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if dryRunOf(ctx) == nil {
		if a := actorOf(ctx); a != "" {
			b := &pgx.Batch{}
			b.Queue(sql, args...)
			return actorRow{br: sendBatchAs(ctx, p.Pool, a, b)}
		}
		return p.Pool.QueryRow(ctx, sql, args...)
	}
	rows, err := p.Query(ctx, sql, args...)
	return dryRunRow{rows: rows, err: err}
}

// SendBatch sends a batch; under a dry run its savepoint ends when the
// batch is closed.
func (p pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	d := dryRunOf(ctx)
	if d == nil {
		if a := actorOf(ctx); a != "" {
			return sendBatchAs(ctx, p.Pool, a, b)
		}
		return p.Pool.SendBatch(ctx, b)
	}
	if err := d.savepoint(ctx); err != nil {
		// The transaction is unusable: the batch reports it.
		return d.tx.SendBatch(ctx, b)
	}
	return &dryRunBatch{BatchResults: d.tx.SendBatch(ctx, b), ctx: ctx, d: d}
}

// dryRunRows are a dry run query's rows, which end its savepoint on Close.
type dryRunRows struct {
	pgx.Rows
	ctx     context.Context
	d       *dryRun
	settled bool
	err     error // settle's
}

// Close closes the rows and ends the query's savepoint.
func (r *dryRunRows) Close() {
	r.Rows.Close()
	if !r.settled {
		r.settled = true
		r.err = r.d.settle(r.ctx)
	}
}

// Err is the query's error, or else the savepoint's.
func (r *dryRunRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// dryRunRow is QueryRow's Row under a dry run: pgx's own Row semantics
// (no row is pgx.ErrNoRows) over dryRunRows.
type dryRunRow struct {
	rows pgx.Rows
	err  error
}

// Scan reads the row into dest.
func (r dryRunRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// dryRunBatch is a dry run batch's results, which end its savepoint on
// Close.
type dryRunBatch struct {
	pgx.BatchResults
	ctx     context.Context
	d       *dryRun
	settled bool
	err     error // the first Close's
}

// Close reads what is left of the batch and ends its savepoint.
func (b *dryRunBatch) Close() error {
	if b.settled {
		return b.err
	}
	b.settled = true
	b.err = b.BatchResults.Close()
	if err := b.d.settle(b.ctx); b.err == nil {
		b.err = err
	}
	return b.err
}
