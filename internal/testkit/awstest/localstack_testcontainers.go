//go:build testcontainers

package awstest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/localstack"
)

// LocalStackImage is the LocalStack image make test-docker runs.
const LocalStackImage = "localstack/localstack:4.4"

// The container is shared by every test of the binary and reaped by
// testcontainers' Ryuk when the binary exits.
var shared struct {
	once     sync.Once
	endpoint string
	err      error
}

// localStack returns the shared LocalStack container's endpoint, starting
// it on first use.
func localStack(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() { shared.endpoint, shared.err = startLocalStack(context.Background()) })
	if shared.err != nil {
		t.Fatalf("LocalStack: %v", shared.err)
	}
	return shared.endpoint
}

func startLocalStack(ctx context.Context) (endpoint string, err error) {
	// testcontainers panics when it finds no Docker host.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no usable Docker engine: %v", r)
		}
	}()
	c, err := localstack.Run(ctx, LocalStackImage, testcontainers.WithEnv(map[string]string{"SERVICES": "secretsmanager,lambda,sts"}))
	if err != nil {
		return "", fmt.Errorf("start %s: %w", LocalStackImage, err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("LocalStack host: %w", err)
	}
	port, err := c.MappedPort(ctx, "4566/tcp")
	if err != nil {
		return "", fmt.Errorf("LocalStack port: %w", err)
	}
	return fmt.Sprintf("http://%s:%s", host, port.Port()), nil
}

// DockerAvailable reports whether a Docker engine answers.
func DockerAvailable(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	defer p.Close()
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("the Docker engine does not answer: %w", err)
	}
	return nil
}
