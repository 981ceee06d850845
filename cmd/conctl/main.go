// Command conctl is the command-line client of the converge REST API. The
// commands live in package cli; main only runs them and sets the exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/convergeplane/converge/cmd/conctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
