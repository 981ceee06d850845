package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/internal/watchview"
)

// WaitTimeoutDefault bounds a wait (delete resource, wait, op --wait)
// unless its --timeout says otherwise.
const WaitTimeoutDefault = 10 * time.Minute

// pollInterval is how often a wait asks the server again.
const pollInterval = 500 * time.Millisecond

// errWaitTimeout means a wait's --timeout elapsed.
var errWaitTimeout = errors.New("wait timed out")

// poll calls check at once and then every pollInterval until it reports
// done or fails. After timeout (0: never) it returns errWaitTimeout; a
// request cut short by that deadline counts as the timeout, not a failure.
// Its GETs read from the server's primary (consistent): a wait right after
// a write must not see a replica's older state (a resource not there yet,
// or Ready at its previous generation).
func poll(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, error)) error {
	wctx := consistent(ctx)
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, timeout)
		defer cancel()
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		done, err := check(wctx)
		switch {
		case err != nil && wctx.Err() != nil && ctx.Err() == nil:
			return errWaitTimeout
		case err != nil:
			return err
		case done:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return errWaitTimeout
		case <-tick.C:
		}
	}
}

// waitTimeout registers a command's --timeout. It shadows the global flag
// of the same name: on a command that waits, --timeout bounds the whole
// wait, and each request keeps the default request timeout.
func waitTimeout(c *cobra.Command, d *time.Duration, what string) {
	c.Flags().DurationVar(d, "timeout", WaitTimeoutDefault, "give up waiting "+what+" after this long (0 for never)")
}

func validWaitTimeout(d time.Duration) error {
	if d < 0 {
		return usagef("invalid --timeout %s: must not be negative", d)
	}
	return nil
}

// progress shows where a wait stands: on a terminal one line rewritten in
// place, elsewhere (a log, a pipe) a new line only when something changes,
// so a CI log is not flooded every poll.
type progress struct {
	w     io.Writer
	tty   bool
	width int               // terminal columns; a longer line would wrap and defeat \r
	shown bool              // a progress line is on screen (tty)
	last  map[string]string // id -> the last state printed (not a tty)
}

// newProgress writes to the app's stdout, detecting a terminal.
func (a *app) newProgress() *progress {
	p := &progress{w: a.stdout, tty: watchview.IsTerminal(a.stdout), width: 80, last: map[string]string{}}
	if n, err := strconv.Atoi(a.getenv("COLUMNS")); err == nil && n > 10 {
		p.width = n
	}
	return p
}

// waitState is where one awaited object stands.
type waitState struct {
	id   string // "resource/vpc/a"
	key  string // changes exactly when a new line is worth printing
	text string // "deleting (2 remaining): …"
}

// update shows the states of the objects still awaited.
func (p *progress) update(states []waitState) {
	if len(states) == 0 {
		return
	}
	if p.tty {
		line := states[0].id + " " + states[0].text
		if len(states) > 1 {
			line = fmt.Sprintf("[%d left] %s", len(states), line)
		}
		fmt.Fprintf(p.w, "\r\x1b[K%s", truncate(line, p.width-1))
		p.shown = true
		return
	}
	for _, s := range states {
		if p.last[s.id] != s.key {
			p.last[s.id] = s.key
			fmt.Fprintf(p.w, "%s %s\n", s.id, s.text)
		}
	}
}

// println prints a line of its own, clearing the progress line first.
func (p *progress) println(line string) {
	p.clear()
	fmt.Fprintln(p.w, line)
}

// clear removes the progress line from a terminal.
func (p *progress) clear() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// condition is what a wait waits for.
type condition struct {
	name      string                         // for messages: "deleted", "ready"
	met       func(o obj) bool               // o is nil once the resource is gone
	state     func(o obj) (key, text string) // where an unmet resource stands
	mustExist bool                           // a resource gone (404) fails the wait
}

var (
	condDeleted = condition{name: "deleted", met: func(o obj) bool { return o == nil }, state: deletingState}
	condReady   = condition{name: "ready", met: func(o obj) bool { return o.str("phase") == "Ready" }, state: readyState,
		mustExist: true}
)

// awaitResources polls each target until cond is met for it, printing
// progress and "<id> <cond>" as each gets there. On timeout it returns an
// error naming each resource still awaited and where it stands.
func (a *app) awaitResources(ctx context.Context, c *Client, targets []target, timeout time.Duration, cond condition) error {
	pr := a.newProgress()
	pending := slices.Clone(targets)
	last := map[string]string{}
	err := poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		var states []waitState
		var left []target
		for i, t := range pending {
			o, err := getResource(ctx, c, t.path, cond.mustExist)
			if err != nil {
				pending = append(left, pending[i:]...)
				pr.clear()
				return false, fmt.Errorf("%s: %w", t.id, err)
			}
			if cond.met(o) {
				pr.println(t.id + " " + cond.name)
				continue
			}
			key, text := cond.state(o)
			states, left = append(states, waitState{id: t.id, key: key, text: text}), append(left, t)
			last[t.id] = text
		}
		pending = left
		pr.update(states)
		return len(pending) == 0, nil
	})
	pr.clear()
	if !errors.Is(err, errWaitTimeout) {
		return err
	}
	msgs := make([]string, len(pending))
	for i, t := range pending {
		msgs[i] = fmt.Sprintf("%s is still %s", t.id, cmp.Or(last[t.id], "unknown (no answer in time)"))
	}
	return fmt.Errorf("not %s within %s: %s", cond.name, timeout, strings.Join(msgs, "; "))
}

// getResource fetches a resource's detail; nil once it is gone, unless
// it must exist.
func getResource(ctx context.Context, c *Client, path string, mustExist bool) (obj, error) {
	body, err := c.Get(ctx, path, nil)
	var ae *APIError
	if !mustExist && errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeObject(body)
}

// deletingState says how far a resource's teardown is and what blocks it.
func deletingState(o obj) (key, text string) {
	if o.get("teardown") == nil {
		phase := o.str("phase")
		return phase, "in phase " + phase
	}
	remaining := o.str("teardown", "remaining")
	blocker, _ := json.Marshal(o.get("teardown", "blocked_by"))
	return remaining + " " + string(blocker),
		fmt.Sprintf("deleting (%s remaining): %s", remaining, o.str("teardown", "reason"))
}

// readyState says which phase a resource is in and why.
func readyState(o obj) (key, text string) {
	phase, why := o.str("phase"), reason(o)
	text = "in phase " + phase
	if why != "" {
		text += ": " + why
	}
	return phase + " " + why, text
}

// reason picks the most telling explanation of where a resource stands
// from its detail: what blocks it, else what it waits for.
func reason(o obj) string {
	for _, s := range []string{o.str("teardown", "reason"), o.str("parked"), o.str("task", "last_error"), o.str("last_error")} {
		if s != "" {
			return s
		}
	}
	conds, _ := o.get("conditions").([]any)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || text(m["status"]) == "True" {
			continue
		}
		s := text(m["type"]) + " " + text(m["status"])
		if r := text(m["reason"]); r != "" {
			s += " (" + r + ")"
		}
		if msg := text(m["message"]); msg != "" {
			s += ": " + msg
		}
		return s
	}
	if state := o.str("task", "state"); state != "" {
		return fmt.Sprintf("its %s task is %s", o.str("task", "task_type"), state)
	}
	return ""
}

func (a *app) waitCommand() *cobra.Command {
	cmd := typeGroup("wait", "Wait for resources to reach a state",
		`Wait polls resources until each is Ready (--for=ready: phase Ready) or gone
(--for=deleted: GET answers 404), printing where each stands meanwhile. It
exits 1 if --timeout elapses first, naming each resource still awaited with
its phase and why.`)
	cmd.Example = `  conctl wait resource vpc/sample-vpc --for=ready
  conctl wait resource --kind vpc a b --for=ready --timeout 2m
  conctl wait resource account/team-a --for=deleted --timeout 0`

	var (
		kind    string
		forCond string
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:     "resource KIND/NAME... --for=ready|deleted",
		Aliases: typeResource.aliases,
		Short:   "Wait until resources are Ready or deleted",
		Args:    minArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forCond != "ready" && forCond != "deleted" {
				return usagef("invalid --for %q: want ready or deleted", forCond)
			}
			if err := validWaitTimeout(timeout); err != nil {
				return err
			}
			targets, err := resourceTargets(kind, args)
			if err != nil {
				return err
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			cond := condReady
			if forCond == "deleted" {
				cond = condDeleted
			}
			return a.awaitResources(cmd.Context(), c, targets, timeout, cond)
		},
	}
	c.Flags().StringVar(&kind, "kind", "", "the resources' kind (then NAMEs alone)")
	c.Flags().StringVar(&forCond, "for", "", "ready (phase Ready) or deleted (gone); required")
	waitTimeout(c, &timeout, "")
	cmd.AddCommand(c)
	return cmd
}

// resourceTargets parses KIND/NAME arguments (or NAMEs with --kind).
func resourceTargets(kind string, args []string) ([]target, error) {
	var targets []target
	for _, arg := range args {
		k, n, err := resourceRef(kind, arg)
		if err != nil {
			return nil, err
		}
		targets = append(targets, target{
			id:   typeResource.name + "/" + k + "/" + n,
			path: "/resources/" + seg(k) + "/" + seg(n),
		})
	}
	return targets, nil
}
