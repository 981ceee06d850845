// Command converge is the control plane server. See cmd/converge/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/convergeplane/converge/cmd/converge/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
