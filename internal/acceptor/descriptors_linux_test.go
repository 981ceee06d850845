package acceptor_test

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/acceptor"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// TestOutOfDescriptors: with every descriptor the process may open in use,
// accept4 fails with EMFILE; Accept logs it and retries, and takes the
// waiting connection once a descriptor is free. It lowers this test
// binary's RLIMIT_NOFILE for its duration, so it does not run in parallel
// (the parallel tests wait until it has ended).
func TestOutOfDescriptors(t *testing.T) {
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	l := listen(t, acceptor.Config{Name: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	dial(t, l, "127.0.0.1") // waits in the backlog

	// Lower the limit to just above the highest descriptor open, then open
	// files until none more can be.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, fd)
		}
	}
	lowered := saved
	lowered.Cur = uint64(highest) + 8
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var fillers []*os.File
	t.Cleanup(func() {
		for _, f := range fillers {
			_ = f.Close()
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
			t.Errorf("restore RLIMIT_NOFILE: %v", err)
		}
	})
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, f)
	}

	conns, errs := accepted(t, l)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "too many open files") {
		select {
		case c := <-conns:
			t.Fatalf("Accept returned %v with no descriptor free", c.RemoteAddr())
		case err := <-errs:
			t.Fatalf("Accept = %v with no descriptor free, want it retried", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no EMFILE retry logged within 10s; log:\n%s", logs.String())
		}
	}
	_ = fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	select {
	case <-conns:
	case err := <-errs:
		t.Fatalf("Accept = %v once a descriptor was free", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not take the waiting connection within 10s of a descriptor coming free")
	}
	if !strings.Contains(logs.String(), "accept failed; retrying") || !strings.Contains(logs.String(), "listener=test") {
		t.Errorf("the retry's log line does not say what it does and where:\n%s", logs.String())
	}
}
