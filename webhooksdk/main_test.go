package webhooksdk_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaks a goroutine (a Work, heartbeat or callback
// goroutine that Shutdown did not drain).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
