package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/examples/classic"
	"github.com/convergeplane/converge/internal/testkit/testnet"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

func TestObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		bom  string
	}{
		{nil, "small"},
		{[]string{"--bom", "small"}, "small"},
		{[]string{"--bom", "large"}, "large"},
		{[]string{"-bom=updated"}, "updated"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := objects(tc.args, &buf); err != nil {
				t.Fatalf("objects(%q): %v", tc.args, err)
			}
			if !strings.HasPrefix(buf.String(), "{\n  \"manifests\": [") || !strings.HasSuffix(buf.String(), "}\n") {
				t.Errorf("objects(%q) is not indented JSON beginning with manifests: %.80q", tc.args, buf.String())
			}
			var got classic.Objects
			dec := json.NewDecoder(&buf)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("objects(%q) output: %v", tc.args, err)
			}
			if dec.More() {
				t.Errorf("objects(%q) printed more than one document", tc.args)
			}
			want, err := classic.ObjectsFor(tc.bom)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, mustMarshal(t, got), mustMarshal(t, want)) {
				t.Errorf("objects(%q) does not print ObjectsFor(%q)", tc.args, tc.bom)
			}
		})
	}
}

func TestObjectsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bom", "medium"}, `no BOM "medium"`},
		{[]string{"--bom", "small", "extra"}, "takes no arguments"},
		{[]string{"large"}, "takes no arguments"},
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"--bom"}, "flag needs an argument"},
	} {
		var buf bytes.Buffer
		err := objects(tc.args, &buf)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("objects(%q): err = %v, want one containing %q", tc.args, err, tc.want)
		}
		// flag writes its usage to stderr, never to the document's writer.
		if buf.Len() != 0 {
			t.Errorf("objects(%q) wrote %q to its output on error", tc.args, buf.String())
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRunConfigErrors sets the process environment, so it is not parallel.
func TestRunConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"no secrets", map[string]string{"PROVIDER_SECRETS": ""}, "PROVIDER_SECRETS is required"},
		{"bad secret", map[string]string{"PROVIDER_SECRETS": "not-a-secret"}, "with secrets"},
		{"bad fault rate", map[string]string{"PROVIDER_SECRETS": newSecret(t), "FAKE_FAULT_RATE": "2"}, "FAKE_FAULT_RATE"},
		{"bad delay", map[string]string{"PROVIDER_SECRETS": newSecret(t), "FAKE_WORK_DELAY": "later"}, "FAKE_WORK_DELAY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PROVIDER_ADDR", "127.0.0.1:0")
			for _, k := range []string{"FAKE_FAULT_RATE", "FAKE_WORK_DELAY", "FAKE_DELETE_DELAY"} {
				t.Setenv(k, "")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := run(ctx, quietLogger())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("run: err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := webhooksdk.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunServes starts the provider as the binary would and drives it over
// HTTP: the health probe lists every kind, a signed task runs, a delete
// shows in /debug/teardowns, and cancelling the context shuts it down.
func TestRunServes(t *testing.T) {
	secret, addr := newSecret(t), testnet.FreeAddr(t)
	t.Setenv("PROVIDER_ADDR", addr)
	t.Setenv("PROVIDER_SECRETS", "whsec_"+strings.Repeat("B", 32)+","+secret) // the second of two secrets signs
	t.Setenv("FAKE_FAULT_RATE", "0")
	t.Setenv("FAKE_WORK_DELAY", "")
	t.Setenv("FAKE_DELETE_DELAY", "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, quietLogger()) }()
	base := "http://" + addr

	// Wait for the listener: the first successful GET.
	var teardowns []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/debug/teardowns")
		if err == nil {
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /debug/teardowns = %d", resp.StatusCode)
			}
			err = json.NewDecoder(resp.Body).Decode(&teardowns)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("GET /debug/teardowns: %v", err)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider not listening on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the listener
	}
	if len(teardowns) != 0 {
		t.Errorf("teardowns before any delete = %q", teardowns)
	}

	post := func(body []byte) []byte {
		t.Helper()
		resp, err := http.DefaultClient.Do(sdktest.NewSignedRequest(t, base+"/", secret, "", time.Time{}, body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST / = %d %s", resp.StatusCode, b)
		}
		return b
	}

	var health webhooksdk.HealthResponse
	if err := json.Unmarshal(post([]byte(`{"type":"health"}`)), &health); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, k := range health.Kinds {
		kinds = append(kinds, k.Kind+"/"+strconv.Itoa(k.KindVersion))
		if !k.Ready {
			t.Errorf("%s/%d is not ready", k.Kind, k.KindVersion)
		}
	}
	slices.Sort(kinds)
	if want := []string{"account/1", "classicbom/1", "route/1", "statussink/1", "tgw/1", "vpc/1", "vpc/2"}; !slices.Equal(kinds, want) {
		t.Errorf("health lists %v, want %v", kinds, want)
	}

	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "account", Version: 1})
	env.Reaction, env.Resource.Name, env.Resource.Spec = "specChange", "team-a", json.RawMessage(`{"team_name": "a"}`)
	var res webhooksdk.Result
	if err := json.Unmarshal(post(mustMarshal(t, env)), &res); err != nil {
		t.Fatal(err)
	}
	if res.Error != nil || res.Outcome == nil {
		t.Fatalf("account task = %+v, want an outcome", res)
	}
	var st struct {
		AccountID string `json:"account_id"`
	}
	if err := json.Unmarshal(res.Outcome.Status, &st); err != nil || !regexp.MustCompile(`^[0-9]{12}$`).MatchString(st.AccountID) {
		t.Errorf("account status %s, want a 12-digit account_id", res.Outcome.Status)
	}

	del := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "vpc", Version: 2})
	del.TaskID, del.TaskType, del.Reaction, del.Trigger = "task-2", webhooksdk.TaskDelete, "teardown", webhooksdk.TriggerDeleteRequested
	del.Resource.Name = "team-a"
	res = webhooksdk.Result{}
	if err := json.Unmarshal(post(mustMarshal(t, del)), &res); err != nil || res.Error != nil {
		t.Fatalf("vpc delete = %+v, %v", res, err)
	}
	resp, err := http.Get(base + "/debug/teardowns")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&teardowns)
	resp.Body.Close()
	if err != nil || !slices.Equal(teardowns, []string{"vpc/team-a"}) {
		t.Errorf("teardowns after a vpc delete = %q, %v; want [vpc/team-a]", teardowns, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v, want a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
