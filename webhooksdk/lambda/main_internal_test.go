package lambda

import (
	"log/slog"
	"strings"
	"testing"
)

func TestMainNeedsSecrets(t *testing.T) {
	t.Parallel()
	if _, err := mainHandler(nil, "", slog.Default()); err == nil || !strings.Contains(err.Error(), "PROVIDER_SECRETS") {
		t.Errorf("no secrets: %v, want an error naming PROVIDER_SECRETS", err)
	}
	if _, err := mainHandler(nil, "not-a-secret", slog.Default()); err == nil {
		t.Error("a malformed secret was accepted")
	}
}
