package stdio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Limits on a program's output.
const (
	// MaxStdout caps what a program may write to stdout; more is a failure.
	MaxStdout = 1 << 20
	// TailBytes is how much of the end of stderr (and of stdout, for status) is kept.
	TailBytes = 4 << 10
)

// MinimalPath is the PATH a program gets unless its env sets one.
const MinimalPath = "/usr/local/bin:/usr/bin:/bin"

// Proc is one program run.
type Proc struct {
	// Path is the program; Args follow it.
	Path string
	Args []string
	// Env is the program's whole environment ("K=V"); the server's is never inherited.
	Env []string
	// Dir is the working directory.
	Dir string
	// Stdin is written to the program's stdin.
	Stdin []byte
	// Timeout bounds the run (ctx may end it sooner).
	Timeout time.Duration
}

// Result is how a program run ended.
type Result struct {
	// ExitCode is the exit status, -1 when killed by a signal.
	ExitCode int
	// Stdout is everything written to stdout (at most MaxStdout bytes).
	Stdout []byte
	// StdoutTail and StderrTail are the last TailBytes of each stream.
	StdoutTail, StderrTail string
	// TimedOut: the timeout (or ctx) ended the run.
	TimedOut bool
	// Overflow: stdout went over MaxStdout and the program was killed.
	Overflow bool
}

// Exec runs p in its own process group and waits for it. A timeout, a cancelled ctx or
// a stdout over MaxStdout kills the whole group, so no grandchild outlives the run; the
// group is also killed once the program exits, for the same reason. The error is set
// only when the program could not be run at all.
func Exec(ctx context.Context, p Proc) (Result, error) {
	var cancel context.CancelFunc
	if p.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Path, p.Args...)
	cmd.Env = p.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = p.Dir
	cmd.Stdin = bytes.NewReader(p.Stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	killGroup := func() error {
		if cmd.Process == nil {
			return nil
		}
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	cmd.Cancel = killGroup
	// A grandchild holding the pipes open must not hold Wait past the kill.
	cmd.WaitDelay = time.Second

	stdout := &capWriter{max: MaxStdout, onOverflow: cancel}
	stderr := &tailWriter{max: TailBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("start %s: %w", p.Path, err)
	}
	err := cmd.Wait()
	_ = killGroup()

	res := Result{ExitCode: cmd.ProcessState.ExitCode(), StderrTail: stderr.String()}
	res.Stdout, res.Overflow = stdout.result()
	res.StdoutTail = string(tail(res.Stdout, TailBytes))
	res.TimedOut = !res.Overflow && ctx.Err() != nil
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) && ctx.Err() == nil {
		return res, fmt.Errorf("wait %s: %w", p.Path, err)
	}
	return res, nil
}

// capWriter keeps up to max bytes and calls onOverflow once when more arrive.
type capWriter struct {
	mu         sync.Mutex
	buf        []byte
	max        int
	over       bool
	onOverflow func()
}

func (w *capWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over {
		return len(b), nil
	}
	if len(w.buf)+len(b) > w.max {
		w.over = true
		w.onOverflow()
		return len(b), nil
	}
	w.buf = append(w.buf, b...)
	return len(b), nil
}

func (w *capWriter) result() ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf, w.over
}

// tailWriter keeps the last max bytes written.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = tail(append(w.buf, tail(b, w.max)...), w.max)
	return len(b), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[len(b)-n:]
}
