package rehearse

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// The account and region moto_server answers for with these credentials.
const (
	account = "123456789012"
	region  = "us-east-1"
)

// startMoto runs moto_server on a free loopback port until t ends and returns
// an AWS configuration pointed at it. The main module's awstest does the same
// for its tests; this module cannot import it without taking the main
// module's requirements into its own go.sum. Unlike awstest, a missing
// moto_server fails the rehearsal: `make rehearse-aws` asked for it.
func startMoto(t *testing.T) aws.Config {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Fatal("moto_server is not installed (pip install 'moto[server]'): the rehearsal needs it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logPath := filepath.Join(t.TempDir(), "moto.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start moto_server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("moto_server's log, requests left out (last 4 KiB):\n%s", tail(withoutRequests(b), 4096))
			}
		}
	})
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get(endpoint + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server did not answer at %s: %v", endpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion(region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDREHEARSAL", "secret", "")),
		config.WithBaseEndpoint(endpoint),
		config.WithSharedConfigFiles(nil), config.WithSharedCredentialsFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// withoutRequests drops the request lines (127.0.0.1 - - […] "POST / …") of
// moto_server's log, keeping its warnings and tracebacks.
func withoutRequests(b []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("127.0.0.1 - - [")) {
			out = append(out, l...)
		}
	}
	return out
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
