package pgrun_test

import (
	"testing"

	"github.com/convergeplane/converge/internal/pgrun"
)

func TestUUIDArray(t *testing.T) {
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{nil, "{}"},
		{[]string{"00000000-0000-0000-0000-000000000001"}, "{00000000-0000-0000-0000-000000000001}"},
		{[]string{"00000000-0000-0000-0000-000000000001", "", "00000000-0000-0000-0000-000000000002"},
			"{00000000-0000-0000-0000-000000000001,NULL,00000000-0000-0000-0000-000000000002}"},
	} {
		if got := pgrun.UUIDArray(c.ids); got != c.want {
			t.Errorf("UUIDArray(%q) = %q, want %q", c.ids, got, c.want)
		}
	}
}
