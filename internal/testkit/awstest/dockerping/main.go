//go:build testcontainers

// Command dockerping exits 0 when a Docker engine answers and 1 (with the
// reason) when none does: make test-docker runs its suite only then.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/convergeplane/converge/internal/testkit/awstest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := awstest.DockerAvailable(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
