package cli

import (
	"testing"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestMain stops the test PostgreSQL server if a test started one
// (pgtest.New) and fails the package if a test leaks a goroutine.
func TestMain(m *testing.M) {
	pgtest.Main(m)
}
