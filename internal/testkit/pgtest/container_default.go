//go:build !testcontainers

package pgtest

import (
	"context"
	"errors"
)

// startContainer is the fallback of last resort. Ordinary builds leave it out
// so that the Docker client and its dependencies stay out of every test
// binary; build with -tags testcontainers to include it
// (container_testcontainers.go).
func startContainer(context.Context) (dsn string, stop func(context.Context) error, err error) {
	return "", nil, errors.New("not compiled in (build with -tags testcontainers to use a Docker engine)")
}
