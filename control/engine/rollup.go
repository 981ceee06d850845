package engine

import "context"

// RollupRecheckDrain re-evaluates up to p.Limit composite roots in
// [p.Lo, p.Hi] armed by a concurrent drain.
func (e *Engine) RollupRecheckDrain(ctx context.Context, p DrainParams) (int, error) {
	return e.scalarInt(ctx, "drain rollup rechecks", `SELECT drain_rollup_rechecks($1, $2, $3)`, p.Lo, p.Hi, p.Limit)
}
