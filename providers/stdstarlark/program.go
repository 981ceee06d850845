package stdstarlark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	starjson "go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	"github.com/convergeplane/converge/webhooksdk"
)

// The sandbox's bounds. go.starlark.net has no memory limit, so memory is bounded
// indirectly: by what goes in (the bundle, and the spec and config the core caps), by the
// step limit (every allocation a program makes costs steps, save a single repeat or
// join, which the interpreter caps at 1 GiB), by the wall-clock limit and by the size of
// the outcome it may return.
const (
	// MaxSteps caps the Starlark steps of one call: the module's top level, compose or
	// status. The count is deterministic, so exceeding it is a terminal failure.
	MaxSteps = 10_000_000
	// MaxOutcome caps the JSON size of the outcome one call returns.
	MaxOutcome = 1 << 20
	// CallTimeout caps the wall-clock time of one call, under the task's own deadline.
	CallTimeout = 10 * time.Second
)

// fileOptions allow while loops and top-level control flow (the step limit bounds them)
// but not recursion: a deep Starlark recursion grows the Go stack faster than it spends
// steps.
var fileOptions = &syntax.FileOptions{While: true, TopLevelControl: true, GlobalReassign: true, Set: true}

// predeclared is the program's whole environment beyond Starlark's pure universe
// (len, range, sorted, …): struct, and json.encode/decode.
var predeclared = starlark.StringDict{
	"struct": starlark.NewBuiltin("struct", starlarkstruct.Make),
	"json":   starjson.Module,
}

// program is a compiled bundle. Its globals are frozen, so calls may run concurrently.
type program struct {
	composeFn *starlark.Function
	statusFn  *starlark.Function // nil: the rollup leaves status as compose set it
	observe   bool               // compose takes a third parameter, observed
}

// compile unpacks the bundle, then runs compose.star's top level (and the modules it
// loads) and picks out compose and status. An empty bundle is transient (the provider
// config may not have propagated yet); anything wrong with the bundle or the program is
// terminal.
func compile(ctx context.Context, bundle []byte) (*program, error) {
	files, err := bundleFiles(bundle)
	if err != nil {
		return nil, err
	}
	l := newLoader(files)
	var globals starlark.StringDict
	err = run(ctx, "the program's top level", l.load, func(th *starlark.Thread) (err error) {
		globals, err = l.run(th, rootModule)
		return err
	})
	if err != nil {
		return nil, err
	}
	prog := &program{}
	compose, ok := globals["compose"].(*starlark.Function)
	if !ok {
		return nil, webhooksdk.Terminal(fmt.Errorf("%s: no compose function defined", rootModule))
	}
	switch {
	case compose.HasVarargs() || compose.HasKwargs() || compose.NumParams() < 2 || compose.NumParams() > 3:
		return nil, webhooksdk.Terminal(fmt.Errorf("%s: compose must take (spec, config) or (spec, config, observed)", compose.Position()))
	case compose.NumParams() == 3:
		prog.observe = true
	}
	prog.composeFn = compose
	if v, ok := globals["status"]; ok {
		status, ok := v.(*starlark.Function)
		if !ok {
			return nil, webhooksdk.Terminal(fmt.Errorf("%s: status must be a function taking (descendants)", rootModule))
		}
		if status.HasVarargs() || status.HasKwargs() || status.NumParams() != 1 {
			return nil, webhooksdk.Terminal(fmt.Errorf("%s: status must take (descendants)", status.Position()))
		}
		prog.statusFn = status
	}
	return prog, nil
}

// compose runs compose(spec, config[, observed]) and decodes its result.
func (p *program) compose(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	args, err := jsonArgs(req.Resource.Spec, req.Config)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	if p.observe {
		observed, err := resources(req.Observed)
		if err != nil {
			return webhooksdk.Outcome{}, err
		}
		v, err := fromJSON(observed)
		if err != nil {
			return webhooksdk.Outcome{}, fmt.Errorf("observed: %w", err)
		}
		args = append(args, v)
	}
	return p.call(ctx, p.composeFn, args, decodeCompose)
}

// rollup runs status(descendants) and decodes its result; without a status function it
// returns an empty outcome.
func (p *program) rollup(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if p.statusFn == nil {
		return webhooksdk.Outcome{}, nil
	}
	raw, err := resources(req.Descendants)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	descendants, err := fromJSON(raw)
	if err != nil {
		return webhooksdk.Outcome{}, fmt.Errorf("descendants: %w", err)
	}
	return p.call(ctx, p.statusFn, starlark.Tuple{descendants}, decodeStatus)
}

// call runs fn(args...) in a sandboxed thread and decodes its result, checking the
// outcome the way the core would: a bad outcome is the program's fault, so terminal.
func (p *program) call(ctx context.Context, fn *starlark.Function, args starlark.Tuple, decode func(starlark.Value) (webhooksdk.Outcome, error)) (webhooksdk.Outcome, error) {
	var result starlark.Value
	err := run(ctx, fn.Name(), nil, func(th *starlark.Thread) (err error) {
		result, err = starlark.Call(th, fn, args, nil)
		return err
	})
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	out, err := decode(result)
	if err == nil {
		err = out.Validate()
	}
	if err == nil {
		err = checkSize(out)
	}
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("%s: %s returned %w", fn.Position(), fn.Name(), err))
	}
	return out, nil
}

func checkSize(out webhooksdk.Outcome) error {
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("an outcome that does not encode: %w", err)
	}
	if len(b) > MaxOutcome {
		return fmt.Errorf("an outcome of %d bytes, over the %d-byte cap", len(b), MaxOutcome)
	}
	return nil
}

// jsonArgs converts JSON documents into Starlark arguments; an absent one is {}.
func jsonArgs(docs ...json.RawMessage) (starlark.Tuple, error) {
	args := make(starlark.Tuple, len(docs))
	for i, d := range docs {
		if len(d) == 0 || string(d) == "null" {
			d = json.RawMessage(`{}`)
		}
		v, err := fromJSON(d)
		if err != nil {
			return nil, err
		}
		args[i] = v
	}
	return args, nil
}

// run runs body in a fresh sandboxed thread: load served by load (nil outside a
// module's top level, the only place a load statement may be), print discarded, at most
// MaxSteps steps, cancelled when ctx ends or after CallTimeout. It classifies the
// failure: the step limit and program errors are terminal (the same inputs fail the same
// way), a cancellation or timeout is transient.
func run(ctx context.Context, what string, load func(*starlark.Thread, string) (starlark.StringDict, error), body func(*starlark.Thread) error) error {
	ctx, cancel := context.WithTimeoutCause(ctx, CallTimeout, fmt.Errorf("wall-clock limit of %s exceeded", CallTimeout))
	defer cancel()
	th := &starlark.Thread{
		Name:  "stdstarlark",
		Load:  load,
		Print: func(*starlark.Thread, string) {},
		OnMaxSteps: func(th *starlark.Thread) {
			th.Cancel(fmt.Sprintf("step limit of %d exceeded", MaxSteps))
		},
	}
	th.SetMaxExecutionSteps(MaxSteps)
	stop := context.AfterFunc(ctx, func() { th.Cancel(context.Cause(ctx).Error()) })
	defer stop()
	err := body(th)
	switch {
	case err == nil:
		return nil
	case th.ExecutionSteps() < MaxSteps && ctx.Err() != nil:
		return fmt.Errorf("%s stopped: %w", what, context.Cause(ctx))
	}
	return webhooksdk.Terminal(locate(err))
}

// locate turns a Starlark error into one that starts with the program's file:line:col.
// Syntax and resolve errors already do; an evaluation error gets the innermost frame
// in the bundle's files (not a builtin's, whose position names no file).
func locate(err error) error {
	var ev *starlark.EvalError
	if !errors.As(err, &ev) {
		return err
	}
	for i := len(ev.CallStack) - 1; i >= 0; i-- {
		if fr := ev.CallStack[i]; fr.Pos.Filename() != "<builtin>" {
			return fmt.Errorf("%s: in %s: %s", fr.Pos, fr.Name, ev.Msg)
		}
	}
	return err
}
