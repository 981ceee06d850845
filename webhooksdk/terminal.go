package webhooksdk

import "errors"

// TerminalError marks a failure that retrying cannot fix. Create it with [Terminal];
// detect it with [IsTerminal] or errors.As.
type TerminalError struct {
	// Err is the underlying failure.
	Err error
}

// Error returns the wrapped error's message.
func (e *TerminalError) Error() string {
	if e.Err == nil {
		return "terminal error"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err to mean "don't retry": the task's result carries "terminal": true
// and the resource pins Failed for the current generation until its spec changes. Use it
// for errors a retry cannot fix (a malformed spec, a permanent permission denial); a
// plain error is transient and retried with backoff. Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err, or any error it wraps, is a [TerminalError].
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}
