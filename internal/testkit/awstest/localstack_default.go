//go:build !testcontainers

package awstest

import "testing"

// localStack needs the Docker client, left out of ordinary builds.
func localStack(t *testing.T) string {
	t.Helper()
	t.Fatal("CONVERGE_TEST_DOCKER is set but this test binary was built without -tags testcontainers; run make test-docker")
	return ""
}
