package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestAlertSinkCommands: an alert sink applied from a file (its type from
// the document's "type" field), listed, shown and deleted against the real
// API; a refused sink names the field.
func TestAlertSinkCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, "", "apply", "-f", b.file(t, "sinks.yaml", `type: alertsink
name: oncall
sink_type: webhook
target: https://hooks.example/converge
event_types: [endpoint.disabled, breaker.opened]
---
type: sink
name: queue
sink_type: sqs
target: https://sqs.eu-west-1.amazonaws.com/123456789012/alerts.fifo
event_types: [resource.failed]
kinds: [vpc]
`))
	wantCode(t, r, ExitOK)
	secret := regexp.MustCompile(`signing secret: (whsec_\S+)`).FindStringSubmatch(r.stdout)
	if secret == nil || !strings.Contains(r.stderr, "signing secret of alertsink/oncall is shown only this once") {
		t.Errorf("apply did not show the webhook sink's secret once:\n%s\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "alertsink/oncall created\n") || !strings.Contains(r.stdout, "alertsink/queue created\n") {
		t.Errorf("apply:\n%s", r.stdout)
	}

	r = b.run(t, "", "list", "alertsinks")
	wantCode(t, r, ExitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "oncall") ||
		!strings.Contains(lines[1], "endpoint.disabled,breaker.opened") || !strings.Contains(lines[2], "sqs") {
		t.Fatalf("list:\n%s", r.stdout)
	}
	r = b.run(t, "", "get", "sink", "queue", "-o", "json")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, `"resource.failed"`) || strings.Contains(r.stdout, "secret") {
		t.Errorf("get:\n%s", r.stdout)
	}
	r = b.run(t, "", "apply", "--type", "alertsink", "-f", b.file(t, "bad.yaml",
		"name: bad\nsink_type: sns\ntarget: https://sns.example\nevent_types: [kind.parked]\n"))
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "target") {
		t.Errorf("stderr = %q, want the target named", r.stderr)
	}
	r = b.run(t, "", "delete", "alertsink", "oncall", "queue")
	wantCode(t, r, ExitOK)
	r = b.run(t, "", "get", "alertsink", "oncall")
	wantCode(t, r, ExitFailure)
	if !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("stderr = %q after the delete, want not found", r.stderr)
	}
}
