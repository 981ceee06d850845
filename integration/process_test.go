package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/internal/testkit/testnet"
)

// serveEnv, set in a process's environment, makes this test binary run
// converge's command line instead of its tests (see TestMain): a test
// starts a real converge process, with its own descriptors, limits and
// sockets, without building the binary first.
const serveEnv = "CONVERGE_TEST_SERVE"

// serveMain is cmd/converge's main.
func serveMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return convergecli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
}

// process is converge running as a process of its own on a test's
// database, ROLE all: `converge`, or `converge dev` (production settings
// but for plain-http loopback providers).
type process struct {
	t      testing.TB
	cmd    *exec.Cmd
	logs   *logbuf.Buffer
	exited chan struct{} // closed when the process has exited
	addr   string        // LISTEN_ADDR
	health string        // HEALTH_ADDR
}

// processOpts adjusts startProcess.
type processOpts struct {
	// dev runs `converge dev`.
	dev bool
	// nofile, when its hard limit is set, is the RLIMIT_NOFILE (soft, hard)
	// the process starts under.
	nofile [2]uint64
	// env holds extra VAR=value settings.
	env []string
}

// startProcess starts converge on the database at dsn and waits until its
// /readyz on HEALTH_ADDR answers 200. The process is stopped (SIGTERM) when
// the test ends, and its log shown if the test failed.
func startProcess(t testing.TB, dsn string, o processOpts) *process {
	t.Helper()
	key := func() string {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	p := &process{t: t, logs: &logbuf.Buffer{}, exited: make(chan struct{}), addr: testnet.FreeAddr(t), health: testnet.FreeAddr(t)}
	name, args := os.Args[0], []string{}
	if o.dev {
		args = append(args, "dev")
	}
	if o.nofile[1] > 0 {
		// sh sets the limits and execs, so the process keeps its pid.
		script := fmt.Sprintf(`ulimit -Sn %d && ulimit -Hn %d && exec "$0" "$@"`, o.nofile[0], o.nofile[1])
		name, args = "sh", append([]string{"-c", script, os.Args[0]}, args...)
	}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = append([]string{serveEnv + "=1", "PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + dsn, "ROLE=all",
		"LISTEN_ADDR=" + p.addr, "HEALTH_ADDR=" + p.health, "CONVERGE_DATA_DIR=" + t.TempDir(), "MEMBER_ID=" + t.Name(),
		"CONVERGE_SECRET_KEY=" + key(), "CONVERGE_CALLBACK_KEY=" + key(), "CALLBACK_BASE_URL=http://" + p.addr}, o.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	must(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait() // its status is read through ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Error("converge did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("converge output:\n%s", p.logs.String())
		}
	})
	waitFor(t, 60*time.Second, "converge to be ready", func() bool {
		p.requireUp()
		resp, err := p.client(2*time.Second, "").Get("http://" + p.health + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// requireUp fails the test if the process has exited.
func (p *process) requireUp() {
	p.t.Helper()
	select {
	case <-p.exited:
		p.t.Fatalf("converge exited (%s)", p.cmd.ProcessState)
	default:
	}
}

// client is an HTTP client that opens a connection per request, from the
// loopback address from ("" for any), and gives up after timeout.
func (p *process) client(timeout time.Duration, from string) *http.Client {
	dialer := &net.Dialer{}
	if from != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
}
