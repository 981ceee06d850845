package watchview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Renderer draws views: on a terminal the whole view redrawn in place
// (cursor up, clear line), elsewhere one line each time the tally changes,
// so a log or a pipe is not flooded every poll.
type Renderer struct {
	w     io.Writer
	tty   bool
	width int
	shown int    // lines of the last frame on screen (tty)
	last  string // the last plain line's tally (not a tty)
}

// NewRenderer draws to w, width columns wide.
func NewRenderer(w io.Writer, tty bool, width int) *Renderer {
	return &Renderer{w: w, tty: tty, width: max(width, 20)}
}

// Draw shows v, elapsed after the watch started.
func (r *Renderer) Draw(v View, elapsed time.Duration) {
	if !r.tty {
		key := v.Root.Phase + " " + v.TallyText()
		if key == r.last {
			return
		}
		r.last = key
		fmt.Fprintf(r.w, "[%6.1fs] %s %s: %s (%d/%d ready)\n", elapsed.Seconds(), v.Root.Ref(), v.Root.Phase,
			v.TallyText(), v.Ready, v.Total)
		return
	}
	var b strings.Builder
	if r.shown > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", r.shown)
	}
	lines := v.Lines(r.width - 1)
	lines[0] = truncate(fmt.Sprintf("[%6.1fs] %s", elapsed.Seconds(), lines[0]), r.width-1)
	for _, l := range lines {
		b.WriteString("\r\x1b[2K" + l + "\n")
	}
	b.WriteString("\x1b[J")         // a shorter frame leaves no stale lines below
	io.WriteString(r.w, b.String()) //nolint:errcheck // a view to a closed stdout has no one to tell
	r.shown = len(lines)
}

// Options configures Watch.
type Options struct {
	Out      io.Writer
	TTY      bool
	Width    int           // terminal columns
	Interval time.Duration // between reads
	Timeout  time.Duration // 0: never
	Follow   bool          // keep watching after the root is Ready
	Laggards int           // how many slow or failing children to show
	// Attempt, when set, reads where a laggard's task stands (see
	// Source.Attempt), shown beside it on a terminal: when its next
	// attempt is due, or that it runs.
	Attempt func(ctx context.Context, ref string) (Attempt, error)
	// Until, when set, ends the watch at the first snapshot it holds for,
	// instead of when the root is Ready (Follow ignores both).
	Until func(ctx context.Context, s Snapshot) bool
}

// ErrTimeout means the root was not Ready within Options.Timeout.
var ErrTimeout = errors.New("watch timed out")

// Watch reads a snapshot with fetch every Interval and draws it, until the
// root is Ready or Until holds (unless Follow), ctx ends (then ctx.Err()) or Timeout
// elapses (then an error wrapping ErrTimeout with where the subtree stands).
func Watch(ctx context.Context, fetch func(context.Context) (Snapshot, error), o Options) (View, error) {
	wctx := ctx
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	r := NewRenderer(o.Out, o.TTY, o.Width)
	start := time.Now()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var v View
	for {
		s, err := fetch(wctx)
		switch {
		case err != nil && wctx.Err() != nil && ctx.Err() == nil:
			return v, timedOut(v, o.Timeout)
		case err != nil:
			return v, err
		}
		v = Compute(s, o.Laggards)
		if o.TTY && o.Attempt != nil {
			for i, l := range v.Laggards {
				// A laggard gone since the graph read says nothing.
				if a, err := o.Attempt(wctx, l.Ref); err == nil {
					v.Laggards[i].Attempt = a
				}
			}
		}
		r.Draw(v, time.Since(start))
		if !o.Follow && (o.Until == nil && v.Done() || o.Until != nil && o.Until(wctx, s)) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-wctx.Done():
			return v, timedOut(v, o.Timeout)
		case <-tick.C:
		}
	}
}

func timedOut(v View, d time.Duration) error {
	if v.Root.Kind == "" {
		return fmt.Errorf("%w after %s before any answer", ErrTimeout, d)
	}
	return fmt.Errorf("%w after %s: %s is %s, children %s", ErrTimeout, d, v.Root.Ref(), v.Root.Phase, v.TallyText())
}

// IsTerminal reports whether w is a terminal (a character device), where
// the view is redrawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
