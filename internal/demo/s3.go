package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/convergeplane/converge/internal/s3stub"
)

// demoBucket is the bucket the statussink reactor writes to, and where
// Terraform's state goes.
const demoBucket = "converge-demo"

// startS3 provides the S3-compatible store a demo needs: the classic
// demo's statussink reactor writes to this machine's moto_server when it
// has one, else (or when embedded) to the in-process stand-in (s3stub),
// where the data-driven demo keeps Terraform's state. It returns the
// endpoint URL with demoBucket created, and stop, which ends what it
// started.
func startS3(ctx context.Context, logDir string, embedded bool) (endpoint string, stop func(), err error) {
	if bin, err := exec.LookPath("moto_server"); err == nil && !embedded {
		endpoint, stop, err = startMoto(ctx, bin, logDir)
		if err != nil {
			return "", nil, err
		}
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, fmt.Errorf("in-process S3: %w", err)
		}
		srv := &http.Server{Handler: s3stub.New(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with Close below
		endpoint, stop = "http://"+ln.Addr().String(), func() { _ = srv.Close() }
	}
	if err := createBucket(ctx, endpoint, demoBucket); err != nil {
		stop()
		return "", nil, err
	}
	return endpoint, stop, nil
}

// startMoto runs `moto_server -H 127.0.0.1 -p PORT` and waits until it answers.
func startMoto(ctx context.Context, bin, logDir string) (string, func(), error) {
	addr, err := freeLoopback()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	logf, err := os.Create(filepath.Join(logDir, "moto.log"))
	if err != nil {
		return "", nil, fmt.Errorf("moto_server log: %w", err)
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", port)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }() //nolint:errcheck // stop reports nothing either
	stop := func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited already
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // as above
			<-exited
		}
	}
	endpoint := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return endpoint, stop, nil
		}
		select {
		case <-exited:
			return "", nil, fmt.Errorf("%s exited at start (see %s)", bin, logf.Name())
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("%s did not answer on %s within 30s (see %s)", bin, addr, logf.Name())
		}
	}
}

// createBucket creates bucket with a path-style PUT. moto and s3stub ask for
// no signature.
func createBucket(ctx context.Context, endpoint, bucket string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, endpoint+"/"+bucket, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("create bucket %s: %s: %s", bucket, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}
