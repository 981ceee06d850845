package pgrun

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Collect runs sql and converts each row with fn (pgx.RowToStructByName[T],
// pgx.RowTo[T] or a scan of the caller's). The query's error and the rows'
// come back as one, for the caller to wrap once.
func Collect[T any](ctx context.Context, q Querier, fn pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, fn)
}

// CollectOne runs sql, which returns at most one row, and converts that row
// with fn. No row is an error for which errors.Is(err, pgx.ErrNoRows)
// holds, as with QueryRow; it costs the same single round trip.
func CollectOne[T any](ctx context.Context, q Querier, fn pgx.RowToFunc[T], sql string, args ...any) (T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectOneRow(rows, fn)
}
