package api

import (
	"slices"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestBindingCache: within its lifetime the cache answers from memory (a
// binding written straight into the table is not seen: no request pays a
// query), invalidate makes the next lookup read the table, and a copy past
// its lifetime is read again. A lookup finds a caller's bindings by user
// and by each of its groups.
func TestBindingCache(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := &bindingCache{st: store.New(db.Pool, store.Config{}), ttl: time.Hour, timeout: time.Minute}
	insert := func(name, user, group string) {
		t.Helper()
		if _, err := db.Pool.Exec(t.Context(), `INSERT INTO role_bindings (name, role, subject, group_name, namespace)
		    VALUES ($1, 'viewer', nullif($2, ''), nullif($3, ''), 'default')`, name, user, group); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		t.Helper()
		bs, err := c.bindingsOf("alice", []string{"devs", "ops"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range bs {
			out = append(out, b.Name)
		}
		slices.Sort(out)
		return out
	}
	insert("a", "alice", "")
	insert("other", "bob", "")
	if got := names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("first lookup: %v, want [a]", got)
	}
	insert("d", "", "devs")
	insert("o", "", "ops")
	if got := names(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("within its lifetime the cache read the table again: %v", got)
	}
	c.invalidate()
	if got := names(); !slices.Equal(got, []string{"a", "d", "o"}) {
		t.Errorf("after invalidate: %v, want [a d o]", got)
	}
	c.ttl = 0
	insert("a2", "alice", "")
	if got := names(); !slices.Equal(got, []string{"a", "a2", "d", "o"}) {
		t.Errorf("past its lifetime: %v, want [a a2 d o]", got)
	}
}

// TestUnnamedCallerRoles: a request that reaches a role check without a
// principal (a route the auth middleware let through unnamed) is the
// anonymous caller, a cluster-wide admin only while the API has no
// authentication at all.
func TestUnnamedCallerRoles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		auth *auth
		want role
	}{
		{newAuth(nil, nil, nil, nil), roleAdmin},
		{newAuth(nil, []string{"admin-token"}, nil, nil), noRole},
		{newAuth([]string{"read-token"}, nil, nil, nil), noRole},
	} {
		s := &Server{auth: c.auth}
		g, err := s.grantsOf(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if g.cluster != c.want || g.anywhere() != c.want {
			t.Errorf("auth enabled %v: the unnamed caller holds %s, want %s", c.auth.enabled(), g.anywhere(), c.want)
		}
	}
}
