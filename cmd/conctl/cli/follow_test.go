package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe to read while conctl writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// watching is a conctl command running in the background.
type watching struct {
	stdout, stderr *lockedBuffer
	cancel         context.CancelFunc
	done           chan int
}

// start runs conctl with args until stop (Ctrl+C) or its own end.
func (b *testBundle) start(t *testing.T, args ...string) *watching {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watching{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		w.done <- run(ctx, args, strings.NewReader(""), w.stdout, w.stderr,
			func(k string) string { return b.env[k] }, func() time.Time { return time.Now().Add(time.Hour) })
	}()
	t.Cleanup(cancel)
	return w
}

// waitFor polls stdout until it contains want, failing the test after a
// minute.
func (w *watching) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(w.stdout.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stdout never showed %q:\n%s\nstderr:\n%s", want, w.stdout.String(), w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop interrupts the command (Ctrl+C) and returns its exit status.
func (w *watching) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.done:
		return code
	case <-time.After(time.Minute):
		t.Fatal("conctl did not end on Ctrl+C")
		return -1
	}
}

// TestWatchGetAndList: get --watch and list --watch follow the change
// stream and print what changed, until Ctrl+C (exit 0) or --timeout.
func TestWatchGetAndList(t *testing.T) {
	t.Parallel()
	b := setupWith(t, apiOptions{events: true})
	b.seed(t, "manifest", manifestBoxOnly)
	b.seed(t, "res", `{"kind": "box", "kind_version": 1, "name": "b1"}`)

	t.Run("List", func(t *testing.T) {
		w := b.start(t, "list", "res", "--watch", "-o", "name")
		w.waitFor(t, "resource/box/b1\n")
		b.seed(t, "res", `{"kind": "box", "kind_version": 1, "name": "b2"}`)
		w.waitFor(t, "resource/box/b2\n")
		if code := w.stop(t); code != ExitOK {
			t.Errorf("exit status %d after Ctrl+C, want 0; stderr: %s", code, w.stderr.String())
		}
		if got := w.stdout.String(); strings.Count(got, "resource/box/b1\n") != 1 {
			t.Errorf("stdout = %q: b1, unchanged, was printed again", got)
		}
	})

	t.Run("Get", func(t *testing.T) {
		w := b.start(t, "get", "res", "box/b1", "--watch")
		w.waitFor(t, "Reconciling")
		id, err := b.api.st.ResourceID(t.Context(), "", "box", "b1")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range claim(t, b, "box/1", 2) {
			if task.ResourceID == id {
				complete(t, b, task, succeeded)
			}
		}
		w.waitFor(t, " Ready ")
		if code := w.stop(t); code != ExitOK {
			t.Errorf("exit status %d after Ctrl+C, want 0", code)
		}
		lines := strings.Split(strings.TrimSpace(w.stdout.String()), "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "KIND ") || strings.HasPrefix(lines[len(lines)-1], "KIND ") {
			t.Errorf("stdout = %q, want the header once, then a row per change", w.stdout.String())
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		r := b.run(t, "", "list", "kinds", "--watch", "--timeout", "1s")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "KIND   VERSIONS\nbox    1\n")
	})

	t.Run("NoTopic", func(t *testing.T) {
		b.api.forget()
		r := b.run(t, "", "get", "kindconfig", "box", "--kind-version", "1", "--watch")
		wantCode(t, r, ExitUsage)
		wantOutput(t, r.stderr, "Error: --watch: the server announces no changes of kind configs\nRun 'conctl get kindconfig --help' for usage.\n")
		wantRequests(t, b)
	})
}
