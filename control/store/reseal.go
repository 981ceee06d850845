package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ResealBatchDefault is how many rows ResealSecrets re-encrypts per
// transaction.
const ResealBatchDefault = 100

// ResealSecrets re-encrypts under box's sealing key every stored secret
// sealed with one of retired (keys box also opens with): endpoint signing
// secrets, current and previous, and the sealed answers of idempotency
// keys. It returns how many rows it rewrote. Run after a key rotation, it
// leaves nothing that needs the retired key, so the rotation after next,
// which drops that key, loses nothing.
//
// Idempotent, and bounded: ResealBatchDefault rows per transaction, each
// row locked while it is rewritten and only if still sealed with a retired
// key, so concurrent writers and other pods resealing at once are safe. A
// row no key of box opens (tampered with, or sealed with a key long gone)
// fails the call and stays as it is.
func (s *Store) ResealSecrets(ctx context.Context, box *SecretBox, retired ...[]byte) (int, error) {
	if len(retired) == 0 {
		return 0, nil
	}
	ids := make([][]byte, len(retired))
	for i, k := range retired {
		ids[i] = sealedKeyID(k)
	}
	total := 0
	for _, t := range []resealTable{endpointSecrets, idempotencyAnswers} {
		for {
			n, err := s.resealBatch(ctx, box, ids, t)
			total += n
			if err != nil {
				return total, fmt.Errorf("reseal %s: %w", t.name, err)
			}
			if n < ResealBatchDefault {
				break
			}
		}
	}
	return total, nil
}

// resealTable is a table holding sealed values: a query selecting (and
// locking) up to $2 rows with a value sealed with a key id in $1, each as
// (row key, aad, blob per column), and the update of one row.
type resealTable struct {
	name   string
	query  string
	update string
	// scan reads one row: its key arguments for update, the aad its
	// values are bound to, and the blobs (nil: none).
	scan func(pgx.Rows) (key []any, aad []byte, blobs [][]byte, err error)
}

var endpointSecrets = resealTable{
	name: "endpoint secrets",
	query: `SELECT name, secret_enc, prev_secret_enc FROM endpoints
		WHERE substring(secret_enc from 2 for 4) = ANY($1) OR substring(prev_secret_enc from 2 for 4) = ANY($1)
		ORDER BY name LIMIT $2 FOR UPDATE`,
	update: `UPDATE endpoints SET secret_enc = $2, prev_secret_enc = $3 WHERE name = $1`,
	scan: func(r pgx.Rows) ([]any, []byte, [][]byte, error) {
		var name string
		var cur, prev []byte
		err := r.Scan(&name, &cur, &prev)
		return []any{name}, []byte(name), [][]byte{cur, prev}, err
	},
}

var idempotencyAnswers = resealTable{
	name: "idempotency answers",
	query: `SELECT caller, key, body FROM idempotency_keys
		WHERE sealed AND substring(body from 2 for 4) = ANY($1)
		ORDER BY caller, key LIMIT $2 FOR UPDATE`,
	update: `UPDATE idempotency_keys SET body = $3 WHERE caller = $1 AND key = $2`,
	scan: func(r pgx.Rows) ([]any, []byte, [][]byte, error) {
		var caller, body []byte
		var key string
		err := r.Scan(&caller, &key, &body)
		return []any{caller, key}, idempotencyAAD(caller, key), [][]byte{body}, err
	},
}

// resealBatch rewrites one batch of t in a transaction.
func (s *Store) resealBatch(ctx context.Context, box *SecretBox, ids [][]byte, t resealTable) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		n = 0
		rows, err := tx.Query(ctx, t.query, ids, ResealBatchDefault)
		if err != nil {
			return err
		}
		type row struct {
			key   []any
			blobs [][]byte
		}
		var todo []row
		for rows.Next() {
			key, aad, blobs, err := t.scan(rows)
			if err != nil {
				rows.Close()
				return err
			}
			for i, b := range blobs {
				if b == nil {
					continue
				}
				pt, err := box.Open(b, aad)
				if err != nil {
					rows.Close()
					return fmt.Errorf("%v: %w", key, err)
				}
				if blobs[i], err = box.Seal(pt, aad); err != nil {
					rows.Close()
					return err
				}
			}
			todo = append(todo, row{key: key, blobs: blobs})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range todo {
			args := append(append([]any{}, r.key...), blobsAsArgs(r.blobs)...)
			if _, err := tx.Exec(ctx, t.update, args...); err != nil {
				return err
			}
		}
		n = len(todo)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func blobsAsArgs(blobs [][]byte) []any {
	out := make([]any, len(blobs))
	for i, b := range blobs {
		out[i] = b
	}
	return out
}
