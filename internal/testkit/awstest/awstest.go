// Package awstest gives tests an AWS API endpoint that needs no AWS account:
// a moto_server started per test, or, in builds with -tags testcontainers
// and CONVERGE_TEST_DOCKER=1 (make test-docker), one LocalStack container
// per test binary. Either way the AWS default chain is pointed at it with
// static test credentials, so nothing reaches AWS.
package awstest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Region is the region the test credentials sign for.
const Region = "us-east-1"

// Start points the AWS default chain (environment only: no shared files, no
// instance metadata) at a fresh endpoint and returns its URL, or skips t
// where no endpoint can be had. It sets environment variables, so t must
// not be parallel.
func Start(t *testing.T) string {
	t.Helper()
	var endpoint string
	if os.Getenv("CONVERGE_TEST_DOCKER") != "" {
		endpoint = localStack(t)
	} else {
		endpoint = moto(t)
	}
	StaticCredentials(t)
	t.Setenv("AWS_ENDPOINT_URL", endpoint)
	return endpoint
}

// StaticCredentials sets static test credentials and Region, and cuts the
// default chain off from shared files and instance metadata.
func StaticCredentials(t *testing.T) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// moto starts moto_server on a free loopback port for t.
func moto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Skip("moto_server is not installed (pip install 'moto[server]'); skipping a test that needs an AWS API")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // moto_server binds it next; a race with another binder fails loudly below
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start moto_server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitUp(t, endpoint+"/moto-api/")
	return endpoint
}

func waitUp(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no AWS endpoint answered at %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
