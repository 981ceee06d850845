package store

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Page is one page of a list: its items, in the list's order, and the
// cursor that continues it ("" on the last page).
type Page[T any] struct {
	Items      []T
	NextCursor string
}

// ListBytesDefault is the byte budget of a list page when its params leave
// it 0: a page ends early, with a cursor, before the row that would take
// the bytes read for it past the budget (see collectPage).
const ListBytesDefault = 4 << 20

// A list whose rows can be large (specs of megabytes, statuses up to
// engine.Config.MaxStatusBytes) is cut by bytes as well as by count, at two places:
//
//   - In the database, pageSQL keeps the rows whose preceding rows take less
//     than the budget as stored (pg_column_size: read from the row or its
//     TOAST pointer, never decompressed), so the database neither reads
//     the rest from TOAST nor sends them. Stored bytes can be fewer than
//     the bytes sent (TOAST compresses), so this cut can keep too many.
//   - In Go, collectPage counts the bytes pgx hands over for each row and
//     stops before the row that would pass the budget. This cut is exact,
//     and bounds the server's memory for the page.
//
// The first row always stays, so an item larger than the budget is still
// listed, alone on its page; the cursor resumes right after the last row
// kept.

// pageSQL turns query, a list query without ORDER BY or LIMIT whose last
// column is row_size (its large columns' stored bytes), into one page in
// order (order names query's columns): at most limitArg rows, cut once the
// rows before a row take budgetArg bytes or more. Each row gains three
// columns after row_size: before (the bytes of the rows before it), and
// more (whether a row follows it, past the limit or the cut).
func pageSQL(query, order, limitArg, budgetArg string) string {
	return `SELECT p.* FROM (
    SELECT q.*, sum(q.row_size) OVER w - q.row_size AS before, lead(true, 1, false) OVER w AS more
      FROM (` + query + `) q
    WINDOW w AS (ORDER BY ` + order + `)
     ORDER BY ` + order + ` LIMIT ` + limitArg + `
) p WHERE p.before < ` + budgetArg + ` ORDER BY ` + order
}

// pageBudget is the byte budget of params that say maxBytes: 0 takes
// ListBytesDefault.
func pageBudget(maxBytes int) int {
	if maxBytes <= 0 {
		return ListBytesDefault
	}
	return maxBytes
}

// collectPage reads the rows of a pageSQL query with scan, which returns a
// row's item and its more column. It stops before the row whose bytes, as
// pgx hands them over, would take the page past budget (the first row is
// always kept) and says whether another page follows.
func collectPage[T any](rows pgx.Rows, budget int, scan func(pgx.CollectableRow) (T, bool, error)) ([]T, bool, error) {
	defer rows.Close() // reads past the rows left, which pageSQL keeps few
	var (
		items []T
		more  bool
		used  int
	)
	for rows.Next() {
		n := 0
		for _, v := range rows.RawValues() {
			n += len(v)
		}
		if len(items) > 0 && used+n > budget {
			return items, true, nil
		}
		used += n
		item, rowMore, err := scan(rows)
		if err != nil {
			return nil, false, err
		}
		items, more = append(items, item), rowMore
	}
	return items, more, rows.Err()
}

// pageTail are the columns pageSQL adds to a row: row_size, before and
// more, for a struct scanned by name.
type pageTail struct {
	RowSize int64 `db:"row_size"`
	Before  int64 `db:"before"`
	More    bool  `db:"more"`
}

// idDescPage is the page of items, read newest first with one row more
// than limit: at most limit items, and when more were read a cursor, tag
// followed by the last item's id in base64url, which decodeIDCursor reads
// back. A tag per list keeps one list's cursor out of another.
func idDescPage[T any](items []T, limit int, tag string, id func(T) int64) Page[T] {
	page := Page[T]{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(tag + strconv.FormatInt(id(page.Items[limit-1]), 10)))
	}
	if page.Items == nil {
		page.Items = []T{}
	}
	return page
}

// decodeIDCursor reads a cursor of idDescPage with tag: the page continues
// below the id it returns.
func decodeIDCursor(c, tag string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutPrefix(string(b), tag)
	if !ok {
		return 0, errors.New("not a cursor of this list")
	}
	return strconv.ParseInt(s, 10, 64)
}
