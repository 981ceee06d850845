package migrations_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestNameChecksKeepTheirLanguage: 00027 rewrote the name CHECKs without
// bounded repetition, for speed. Each must still accept exactly the names
// the API's pattern accepts (the pattern the old CHECK spelled out), at the
// length boundaries and at the ends, where the two spellings could differ.
func TestNameChecksKeepTheirLanguage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := ctxT(t)

	alnum := func(n int) string { return strings.Repeat("a", n) }
	names := []string{"", "a", "Z", "0", "-", ".", "_", "a-", "-a", "a.", ".a", "a_", "a.b", "a..b", "a-_.b", "A9.b-c_D",
		"aB", "1a", "a1", "a b", "é", "aé", "a\nb", "a/b", "a:b", "A-", "ab-"}
	for _, n := range []int{61, 62, 63, 64, 65, 251, 252, 253, 254, 255} {
		names = append(names, alnum(n), alnum(n-1)+"-", "-"+alnum(n-1), alnum(n-2)+".b", strings.ToUpper(alnum(n)))
	}
	for _, c := range []struct {
		table, constraint, column string
		api                       *regexp.Regexp // the API's pattern: control/model and control/store
	}{
		{"resources", "resources_name_check", "name", regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)},
		{"providerconfigs", "providerconfigs_name_check", "name", regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)},
		{"reactor_bindings", "reactor_bindings_name_check", "name", regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)},
		{"endpoints", "endpoints_name_check", "name", regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)},
		{"kind_manifest", "kind_manifest_kind_check", "kind", regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)},
	} {
		var expr string
		if err := db.Pool.QueryRow(ctx, `SELECT pg_get_expr(conbin, conrelid) FROM pg_constraint
			WHERE conrelid = $1::regclass AND conname = $2 AND contype = 'c' AND convalidated`, c.table, c.constraint).Scan(&expr); err != nil {
			t.Fatalf("%s: read the validated CHECK: %v", c.constraint, err)
		}
		if strings.Contains(expr, "{") {
			t.Errorf("%s = %s: bounded repetition again, which costs every write of the row (00027)", c.constraint, expr)
		}
		for _, name := range names {
			// The CHECK's own expression, on one row whose column is the name.
			var ok bool
			if err := db.Pool.QueryRow(ctx, `SELECT `+expr+` FROM (SELECT $1::text AS `+c.column+`) t`, name).Scan(&ok); err != nil {
				t.Fatalf("%s on %q: %v", c.constraint, name, err)
			}
			if want := c.api.MatchString(name); ok != want {
				t.Errorf("%s(%q) = %v, the API's pattern says %v", c.constraint, name, ok, want)
			}
		}
	}
}
