// Package browsertest drives a real headless Chromium from Go tests
// (chromedp over the DevTools protocol) and keeps what a page did: every
// request it sent, every console error and uncaught exception. A console
// test opens the console on a real server, then checks that nothing went to
// another origin and nothing was logged as an error.
package browsertest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Chromium returns the browser to drive: $CHROMIUM when set, else the
// first of chromium, chromium-browser, google-chrome and google-chrome-stable
// on PATH; "" when there is none.
func Chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Config says how to start the browser.
type Config struct {
	// Exec is the browser binary (see Chromium).
	Exec string
	// Origin is the server under test, e.g. http://127.0.0.1:8080; a
	// request anywhere else is recorded as foreign.
	Origin string
	// Width and Height are the window's size. Default to 1280x800.
	Width, Height int
	// Timeout bounds each Run. Defaults to 30s.
	Timeout time.Duration
	// ArtifactDir receives screenshots; "" discards them.
	ArtifactDir string
	// Offline makes every host but the origin's unresolvable (Chromium's
	// host resolver rules), so a page that loads anything from another host
	// fails as it would without internet.
	Offline bool
}

// Request is one request the page sent.
type Request struct {
	At     time.Time
	Method string
	URL    string
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	t   testing.TB
	cfg Config
	ctx context.Context

	dialogs chan string

	mu       sync.Mutex
	requests []Request
	errors   []string
}

// New starts the browser; it is closed when the test ends.
func New(t testing.TB, cfg Config) *Browser {
	t.Helper()
	if cfg.Width == 0 {
		cfg.Width, cfg.Height = 1280, 800
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(cfg.Exec),
		chromedp.WindowSize(cfg.Width, cfg.Height),
		// Tests run as root in containers, where the sandbox cannot start.
		chromedp.NoSandbox,
		// WebGL (the graph) on the CPU: there is no GPU here.
		chromedp.Flag("use-angle", "swiftshader"),
		chromedp.Flag("enable-unsafe-swiftshader", true),
		chromedp.Flag("ignore-gpu-blocklist", true),
	)
	if cfg.Offline {
		origin, err := url.Parse(cfg.Origin)
		if err != nil {
			t.Fatalf("browsertest: origin %q: %v", cfg.Origin, err)
		}
		opts = append(opts, chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE "+origin.Hostname()))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &Browser{t: t, cfg: cfg, ctx: ctx, dialogs: make(chan string, 4)}
	fail := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("browsertest: cannot start %s: %v", cfg.Exec, err)
		}
	}
	fail(chromedp.Do(ctx)) // starts the browser and the tab, with no deadline
	fail(chromedp.Listen(ctx, b.observe))
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	fail(err)
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	fail(err)
	// window.confirm guards the console's destructive actions: accept each
	// one, from outside the tab's event loop (a dialog blocks the page).
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.dialogs:
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}
		}
	}()
	return b
}

// observe runs in the tab's event loop: it only records.
func (b *Browser) observe(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, Request{At: time.Now(), Method: e.Request.Method, URL: e.Request.URL})
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, strings.TrimSpace(string(a.Value)+" "+a.Description))
			}
			b.errors = append(b.errors, "console."+string(e.Type)+": "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		msg := e.ExceptionDetails.Text
		if ex := e.ExceptionDetails.Exception; ex != nil {
			msg += " " + ex.Description
		}
		b.errors = append(b.errors, "uncaught: "+msg)
	case *log.EventEntryAdded:
		// The network source reports every 4xx the API answers on purpose
		// (a refused manifest, a 401 before the token); the page's own
		// handling of those is what a test checks. Anything else the
		// browser logs as an error (a CSP violation, a failed script) counts.
		if e.Entry.Level == log.EntryLevelError && e.Entry.Source != log.EntrySourceNetwork {
			b.errors = append(b.errors, "browser "+string(e.Entry.Source)+": "+e.Entry.Text+" "+e.Entry.URL)
		}
	case *page.EventJavascriptDialogOpening:
		select {
		case b.dialogs <- e.Message:
		default:
		}
	}
}

// T is the test the browser belongs to.
func (b *Browser) T() testing.TB { return b.t }

// Do runs actions, failing the test on error or after the timeout.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	b.DoWithin(what, b.cfg.Timeout, actions...)
}

// DoWithin is Do with its own timeout.
func (b *Browser) DoWithin(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.Fatalf("browser: %s: %v", what, err)
	}
}

// Open navigates to path on the origin and waits for the CSS selector sel
// to be visible.
func (b *Browser) Open(path, sel string) {
	b.t.Helper()
	b.Do("open "+path, chromedp.Navigate(b.cfg.Origin+path), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// Eval evaluates a JavaScript expression (awaiting a promise) into a T.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.Fatalf("browser: eval %s: %v", expr, err)
	}
	return v
}

// WaitTrue polls the JavaScript expression until it is true.
func (b *Browser) WaitTrue(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if Eval[bool](b, "!!("+expr+")") {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("browser: %s: still false after %s: %s", what, timeout, expr)
		}
		time.Sleep(50 * time.Millisecond) // polling a page: no event says a DOM value changed
	}
}

// Screenshot writes the window as ArtifactDir/name.png.
func (b *Browser) Screenshot(name string) {
	b.t.Helper()
	if b.cfg.ArtifactDir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(b.cfg.ArtifactDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	p := filepath.Join(b.cfg.ArtifactDir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

// Resize sets the viewport's size, as a narrower window would.
func (b *Browser) Resize(width, height int) {
	b.t.Helper()
	b.Do("resize", chromedp.EmulateViewport(int64(width), int64(height)))
}

// Requests returns the requests sent since the time since.
func (b *Browser) Requests(since time.Time) []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Request
	for _, r := range b.requests {
		if !r.At.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

// Foreign returns the requests that went anywhere but the origin (data:
// and blob: URLs stay in the page).
func (b *Browser) Foreign() []string {
	origin, err := url.Parse(b.cfg.Origin)
	if err != nil {
		b.t.Fatalf("browsertest: origin %q: %v", b.cfg.Origin, err)
	}
	var out []string
	for _, r := range b.Requests(time.Time{}) {
		u, err := url.Parse(r.URL)
		if err != nil {
			out = append(out, r.URL)
			continue
		}
		if u.Scheme == "data" || u.Scheme == "blob" {
			continue
		}
		if u.Scheme != origin.Scheme || u.Host != origin.Host {
			out = append(out, r.URL)
		}
	}
	return out
}

// Errors returns the console errors and uncaught exceptions so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// CheckClean fails the test if the page logged an error or sent a request
// to another origin.
func (b *Browser) CheckClean() {
	b.t.Helper()
	if errs := b.Errors(); len(errs) > 0 {
		b.t.Errorf("the console logged %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if f := b.Foreign(); len(f) > 0 {
		b.t.Errorf("the console sent %d requests to other origins: %v", len(f), f)
	}
	if n := len(b.Requests(time.Time{})); n == 0 {
		b.t.Error("the browser recorded no request at all: the recorder is broken")
	}
}

// Drag presses the left button at (x, y), moves it by (dx, dy) over steps
// moves, pause apart, and releases it: a pan, as a person's mouse makes it.
func Drag(x, y, dx, dy float64, steps int, pause time.Duration) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		mouse := func(typ input.DispatchMouseEventType, px, py float64, buttons int64) error {
			_, err := cdp.Call(ctx, t, input.DispatchMouseEvent, input.DispatchMouseEventParams{
				Type: typ, X: px, Y: py, Button: input.MouseButtonLeft, Buttons: buttons, ClickCount: 1})
			return err
		}
		if err := mouse(input.DispatchMouseEventTypeMousePressed, x, y, 1); err != nil {
			return chromedp.Void{}, err
		}
		for i := 1; i <= steps; i++ {
			f := float64(i) / float64(steps)
			if err := mouse(input.DispatchMouseEventTypeMouseMoved, x+dx*f, y+dy*f, 1); err != nil {
				return chromedp.Void{}, err
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, ctx.Err()
			case <-time.After(pause):
			}
		}
		return chromedp.Void{}, mouse(input.DispatchMouseEventTypeMouseReleased, x+dx, y+dy, 0)
	}
}

// Fatalf fails the test with the page's text in the message.
func (b *Browser) Fatalf(format string, args ...any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
	b.t.Fatalf("%s\npage text:\n%s", fmt.Sprintf(format, args...), text)
}
