package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestConfig: each ARN gets its key's size; the function refuses to start
// without a secret to rotate or with a duration it cannot read, naming the
// variable.
func TestConfig(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // "" : starts
	}{
		{"no secret", map[string]string{}, []string{"set SECRET_KEY_ARN or CALLBACK_KEY_ARN"}},
		{"bad durations", map[string]string{"SECRET_KEY_ARN": "arn:s", "PROPAGATION": "soon", "MIN_KEY_AGE": "-1h"},
			[]string{`PROPAGATION="soon"`, `MIN_KEY_AGE="-1h"`}},
		{"both keys", map[string]string{"SECRET_KEY_ARN": "arn:s", "CALLBACK_KEY_ARN": "arn:c", "PROPAGATION": "90s"}, nil},
	} {
		cfg, err := config(func(k string) string { return c.env[k] }, log)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			if diff := cmp.Diff(map[string]int{"arn:s": 32, "arn:c": 48}, cfg.KeyBytes); diff != "" || cfg.Propagation != 90*time.Second {
				t.Errorf("%s: key sizes (-want +got):\n%s propagation %s", c.name, diff, cfg.Propagation)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err = %v, want %q", c.name, err, w)
			}
		}
	}
}
