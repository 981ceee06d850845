// Command sdkbench measures each provider SDK's serving overhead per task, the
// Go SDK's beside the TypeScript and Python SDKs', in the same run (`make
// bench-sdks`, docs/performance.md).
//
// It starts each SDK's bench server as a subprocess — a no-op provider of kind
// "bench" version 1 whose work returns status {}, listening on $BENCH_ADDR
// with the signing secret $BENCH_SECRET:
//
//	go          internal/sdkbench/goserver (built first)
//	typescript  node sdk/typescript/bench/server.mjs
//	python      /usr/bin/python3 sdk/python/bench/server.py
//
// An SDK whose server file does not exist is skipped with a line saying so.
// The driver waits for each server's health answer (docs/protocol.md §10),
// warms it up, then, over several rounds with the SDKs' order rotating, posts
// signed single task envelopes and batches of 32 (§16) from a few concurrent
// keep-alive connections. Requests are built and sent by the dispatcher's own
// code: envelopes signed by webhooksdk.Signer under the webhook-ids
// dispatch/wire computes, posted by dispatch/transport's HTTPS target, and
// answers read by wire.DecodeResult and wire.DecodeBatch — every task must
// come back with an inline outcome. For each SDK it prints, per task, the
// wall time (requests in flight / throughput) and the server process's CPU
// time (user + system, from /proc), each the median over the rounds and as
// a ratio to the Go SDK's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg := defaultConfig()
	flag.StringVar(&cfg.Root, "root", ".", "the repository's root")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds; each runs every SDK once, in a rotating order")
	flag.IntVar(&cfg.Singles, "singles", cfg.Singles, "single-task requests per SDK per round")
	flag.IntVar(&cfg.Batches, "batches", cfg.Batches, "batch requests per SDK per round")
	flag.IntVar(&cfg.BatchSize, "batch-size", cfg.BatchSize, "tasks per batch request")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "requests in flight at once")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "sdkbench:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "sdkbench:", err)
		os.Exit(1)
	}
}

// run measures cfg.SDKs and writes the report to out; servers' output goes
// to errOut.
func run(ctx context.Context, cfg Config, out, errOut io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	b, err := newBench(ctx, cfg, out, errOut)
	if err != nil {
		return err
	}
	defer b.close()
	return b.measure(ctx)
}
