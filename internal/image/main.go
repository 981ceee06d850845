// Command image builds converge's OCI image without Docker and pushes it.
//
//	go run ./internal/image build -binary linux/arm64=PATH [-binary ...] -version V -source URL -revision SHA -created UNIX [-rds-ca PATH|URL] [-out DIR]
//	go run ./internal/image push -image REGISTRY/REPO:TAG [-layout DIR] [-allow-no-rds-ca]
//
// build writes an OCI image layout (DIR/index.json naming one image index,
// one image per -binary) from an empty base: the static binary at /converge,
// /etc/passwd and /etc/group with the nonroot user (65532, as distroless),
// Mozilla's CA roots, the RDS CA bundle when it can be had, /tmp; no shell.
// The images run /converge as 65532:65532 and expose 8080 and 8081. Every
// date in them is -created, so one commit builds the same bytes twice.
// `make image` runs it (see the Makefile for the binaries' build flags).
//
// push copies the layout's index to a registry (`make image-push`), signing
// in as IMAGE_USERNAME (default AWS, ECR's) with IMAGE_PASSWORD when that is
// set, else through the default keychain (~/.docker/config.json and its
// credential helpers, such as docker-credential-ecr-login). It prints the
// pushed index's digest reference, the imageUri infra/ deploys.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs one subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: image build|push [flags]")
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(ctx, args[1:], stdout, stderr)
	case "push":
		err = runPush(ctx, args[1:], stdout, stderr, getenv)
	default:
		fmt.Fprintf(stderr, "image: unknown command %q: want build or push\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "image %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
