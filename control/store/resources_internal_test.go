package store

import (
	"strings"
	"testing"
)

// TestResourceApplyCountsOnlyUnderTheQuotaLock: the apply every request
// runs holds no count of the namespace's resources (its cost estimate would
// keep PostgreSQL from reusing a generic plan); the variant run under the
// quota lock does.
func TestResourceApplyCountsOnlyUnderTheQuotaLock(t *testing.T) {
	if strings.Contains(resourceApplySQL, "count(*)") {
		t.Error("resourceApplySQL counts the namespace's resources")
	}
	if !strings.Contains(resourceApplyCountingSQL, "count(*)") {
		t.Error("resourceApplyCountingSQL does not count the namespace's resources")
	}
}
