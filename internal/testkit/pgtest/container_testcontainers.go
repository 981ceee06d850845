//go:build testcontainers

package pgtest

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// ContainerImage is the PostgreSQL image used when tests fall back to a
// container. Keep its major version in step with production.
const ContainerImage = "postgres:15-alpine"

// startContainer runs PostgreSQL in a container through the Docker engine
// testcontainers finds (DOCKER_HOST, the default socket, ...). It is only
// reached when the machine has no server binaries, and only in builds with
// -tags testcontainers, which keeps the Docker client out of ordinary builds.
func startContainer(ctx context.Context) (dsn string, stop func(context.Context) error, err error) {
	// testcontainers panics when it cannot find a Docker host; here that is
	// an ordinary "no server" answer, not a crash.
	defer func() {
		if r := recover(); r != nil {
			dsn, stop, err = "", nil, fmt.Errorf("no usable Docker engine: %v", r)
		}
	}()
	c, err := tcpostgres.Run(ctx, ContainerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		// The same throwaway settings embeddedpg uses for test clusters.
		testcontainers.WithCmdArgs(
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=300",
			"-c", "shared_buffers=128MB",
		),
	)
	stop = func(ctx context.Context) error {
		return testcontainers.TerminateContainer(c, testcontainers.StopContext(ctx))
	}
	if err != nil {
		_ = stop(ctx) // the start error is what matters; TerminateContainer accepts nil
		return "", nil, fmt.Errorf("cannot start %s container: %w", ContainerImage, err)
	}
	dsn, err = c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = stop(ctx)
		return "", nil, fmt.Errorf("cannot get container DSN: %w", err)
	}
	return dsn, stop, nil
}
