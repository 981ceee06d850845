package provider

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

func TestSinkKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, name string
		gen          int64
		want         string
	}{
		{"status", "classic", 3, "status/classic-3.json"},
		{"", "classic", 3, "classic-3.json"},
		{"a/b", "classic", 12, "a/b/classic-12.json"},
		{"a/b/", "classic", 1, "a/b/classic-1.json"},
		{"status", "sample-vpc", 0, "status/sample-vpc-0.json"},
	} {
		if got := SinkKey(tc.prefix, tc.name, tc.gen); got != tc.want {
			t.Errorf("SinkKey(%q, %q, %d) = %q, want %q", tc.prefix, tc.name, tc.gen, got, tc.want)
		}
	}
}

func TestTokenGeneration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		token string
		want  int64
	}{
		{"0b8e-uuid:synced:7:binding", 7},
		{"id:synced:0:b", 0},
		{"id:synced:123456789012:b", 123456789012},
		{"", 99},
		{"id:synced:7", 99},
		{"id:synced:7:b:extra", 99},
		{"id:synced:seven:b", 99},
		{"id:synced::b", 99},
	} {
		if got := tokenGeneration(tc.token, 99); got != tc.want {
			t.Errorf("tokenGeneration(%q, 99) = %d, want %d", tc.token, got, tc.want)
		}
	}
}

func TestStatusSinkBeforeConfig(t *testing.T) {
	t.Parallel()
	s := NewStatusSink()
	if got := s.Kind(); got != (webhooksdk.KindVersion{Kind: "statussink", Version: 1}) {
		t.Errorf("Kind() = %v", got)
	}
	// Ready before any config, so the first task, which brings one, is sent.
	if !s.Ready() {
		t.Error("a sink without config is not Ready")
	}
	_, err := s.Work(t.Context(), sinkRequest(nil))
	if !errors.Is(err, errNoConfig) || webhooksdk.IsTerminal(err) {
		t.Errorf("Work before any config: err = %v, want the transient errNoConfig", err)
	}
}

// TestStatusSinkUnusableConfig: a config that cannot work is not redialed;
// the sink stays ready (so a better config can reach it) and Work fails
// transiently saying why.
func TestStatusSinkUnusableConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, spec, want string }{
		{"empty", "", "names no bucket"},
		{"no bucket", `{"endpoint": "http://127.0.0.1:1", "prefix": "p"}`, "names no bucket"},
		{"bad json", `{"bucket": 7}`, "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewStatusSink()
			s.OnConfig(webhooksdk.ProviderConfig{Spec: json.RawMessage(tc.spec)})
			if !s.Ready() {
				t.Error("sink with an unusable config is not Ready")
			}
			_, err := s.Work(t.Context(), sinkRequest(nil))
			if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Work: err = %v, want a transient error containing %q", err, tc.want)
			}
		})
	}
}

// fakeS3 is the path-style S3 statussink needs: HEAD bucket and PUT object.
type fakeS3 struct {
	mu       sync.Mutex
	buckets  map[string]bool
	objects  map[string][]byte // bucket/key → body
	types    map[string]string // bucket/key → Content-Type
	puts     int
	heads    int
	denyPuts bool
}

func newFakeS3(t *testing.T, buckets ...string) (*fakeS3, string) {
	t.Helper()
	f := &fakeS3{buckets: map[string]bool{}, objects: map[string][]byte{}, types: map[string]string{}}
	for _, b := range buckets {
		f.buckets[b] = true
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodHead && key == "":
		f.heads++
		if !f.buckets[bucket] {
			w.WriteHeader(http.StatusNotFound)
		}
	case r.Method == http.MethodPut && key != "":
		f.puts++
		if f.denyPuts {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `<Error><Code>AccessDenied</Code><Message>denied</Message></Error>`)
			return
		}
		if !f.buckets[bucket] {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.objects[bucket+"/"+key] = b
		f.types[bucket+"/"+key] = r.Header.Get("Content-Type")
		w.Header().Set("ETag", `"etag"`)
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

func (f *fakeS3) object(key string) ([]byte, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[key]
	return b, f.types[key], ok
}

func (f *fakeS3) counts() (heads, puts, objects int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heads, f.puts, len(f.objects)
}

func (f *fakeS3) addBucket(b string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets[b] = true
}

// awsTestEnv gives the SDK static credentials, one attempt per call (so an
// unreachable store fails fast) and no shared config or instance metadata.
// It sets the process environment: callers do not run in parallel.
func awsTestEnv(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "",
		"AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "", "AWS_REGION": "",
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": "",
	} {
		t.Setenv(k, v)
	}
}

func sinkConfig(t *testing.T, endpoint, bucket, prefix string) webhooksdk.ProviderConfig {
	return webhooksdk.ProviderConfig{Spec: mustJSON(t, SinkConfig{Endpoint: endpoint, Bucket: bucket, Prefix: prefix, Region: "us-east-1"})}
}

// sinkRequest is the reactor task for classicbom "classic" syncing at
// generation 7 with status st.
func sinkRequest(st json.RawMessage) webhooksdk.Request {
	return webhooksdk.Request{TaskID: "t", Reaction: "upload", KindVersion: 1, Trigger: webhooksdk.TriggerReactor,
		TaskType: webhooksdk.TaskReact, Transition: webhooksdk.TransitionSynced, Generation: 7,
		DedupToken: "4f1c-uuid:synced:7:binding-uuid",
		Resource: webhooksdk.Resource{ID: "4f1c-uuid", Kind: "classicbom", KindVersion: 1, Name: "classic",
			Spec: json.RawMessage(`{"domains": []}`), Status: st, Generation: 7, Phase: "Ready"}}
}

// closedEndpoint is a local URL nothing listens on, so a dial fails at once.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// TestStatusSinkUploads runs the sink against an in-process S3: it uploads
// the watched classicbom's rolled-up status under <prefix>/<name>-<gen>.json.
func TestStatusSinkUploads(t *testing.T) {
	awsTestEnv(t)
	f, endpoint := newFakeS3(t, "converge-status")
	s := NewStatusSink()
	s.OnConfig(sinkConfig(t, endpoint, "converge-status", "status"))
	if !s.Ready() {
		t.Fatal("sink is not Ready with a reachable store")
	}
	if heads, _, _ := f.counts(); heads != 1 {
		t.Errorf("OnConfig sent %d HEAD bucket requests, want 1 to check the store", heads)
	}

	// The status a rollup gives the root is what the sink uploads.
	rolled, _ := runRollup(t, `{"domains": [{"name": "a", "teams": ["x"]}]}`,
		descendants(map[string][]string{"account": {"Ready", "Ready"}, "vpc": {"Reconciling"}}))
	st := mustJSON(t, rolled)
	req := sinkRequest(st)
	req.Generation = 9 // the token's generation wins
	out, err := s.Work(t.Context(), req)
	if err != nil {
		t.Fatalf("Work: %v", err)
	}
	if !out.SideEffectDone || out.Status != nil {
		t.Errorf("Work = %+v, want only SideEffectDone", out)
	}
	body, ctype, ok := f.object("converge-status/status/classic-7.json")
	if !ok {
		_, _, n := f.counts()
		t.Fatalf("no object at status/classic-7.json (%d objects)", n)
	}
	if ctype != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ctype)
	}
	var obj SinkObject
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("uploaded %s: %v", body, err)
	}
	want := SinkObject{Kind: "classicbom", Name: "classic", Generation: 7, Phase: "Ready", Transition: "synced",
		DedupToken: "4f1c-uuid:synced:7:binding-uuid"}
	gotStatus := obj.Status
	obj.Status = nil
	if !reflect.DeepEqual(obj, want) {
		t.Errorf("uploaded %+v, want %+v", obj, want)
	}
	if !jsonEqual(t, gotStatus, st) {
		t.Errorf("uploaded status %s, want the rolled-up status %s", gotStatus, st)
	}

	// A redelivery overwrites its own object; a token without a
	// generation falls back to the request's.
	if _, err := s.Work(t.Context(), sinkRequest(st)); err != nil {
		t.Fatalf("redelivered Work: %v", err)
	}
	req = sinkRequest(json.RawMessage(`{"ready": 1}`))
	req.DedupToken, req.Generation = "opaque", 8
	if _, err := s.Work(t.Context(), req); err != nil {
		t.Fatalf("Work with an opaque token: %v", err)
	}
	if _, puts, n := f.counts(); puts != 3 || n != 2 {
		t.Errorf("%d puts made %d objects, want 3 puts and 2 objects", puts, n)
	}
	if body, _, ok := f.object("converge-status/status/classic-8.json"); !ok || !strings.Contains(string(body), `"status":{"ready":1}`) {
		t.Errorf("object for generation 8 = %s (present %v)", body, ok)
	}

	// A failed put is a transient error naming the object.
	f.mu.Lock()
	f.denyPuts = true
	f.mu.Unlock()
	_, err = s.Work(t.Context(), sinkRequest(st))
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "s3://converge-status/status/classic-7.json") {
		t.Errorf("Work with a denied put: err = %v, want a transient error naming the object", err)
	}
}

// TestStatusSinkUnreachable: a store that cannot be reached makes the sink
// unready and Work fail; a new config that works replaces it at once.
func TestStatusSinkUnreachable(t *testing.T) {
	awsTestEnv(t)
	s := NewStatusSink()
	down := closedEndpoint(t)
	s.OnConfig(sinkConfig(t, down, "converge-status", "status"))
	if s.Ready() {
		t.Fatal("sink is Ready while its store is unreachable")
	}
	_, err := s.Work(t.Context(), sinkRequest(json.RawMessage(`{}`)))
	if err == nil || !strings.Contains(err.Error(), `reach bucket "converge-status" at "`+down+`"`) {
		t.Errorf("Work with an unreachable store: err = %v, want it to say which store it cannot reach", err)
	}

	f, endpoint := newFakeS3(t, "converge-status")
	s.OnConfig(sinkConfig(t, endpoint, "converge-status", "p"))
	if !s.Ready() {
		t.Fatal("sink is not Ready after a config naming a reachable store")
	}
	if _, err := s.Work(t.Context(), sinkRequest(json.RawMessage(`{}`))); err != nil {
		t.Fatalf("Work after the new config: %v", err)
	}
	if _, _, ok := f.object("converge-status/p/classic-7.json"); !ok {
		t.Error("the new config's store got no object")
	}
}

// TestStatusSinkRedials: a store whose bucket is missing keeps the sink
// unready until a redial finds it (every redialEvery).
func TestStatusSinkRedials(t *testing.T) {
	awsTestEnv(t)
	f, endpoint := newFakeS3(t) // no bucket yet
	s := NewStatusSink()
	s.OnConfig(sinkConfig(t, endpoint, "later", ""))
	if s.Ready() {
		t.Fatal("sink is Ready while its bucket is missing")
	}
	f.addBucket("later")
	deadline := time.Now().Add(10 * redialEvery)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("sink still unready %v after the bucket appeared", 10*redialEvery)
		}
		time.Sleep(20 * time.Millisecond) // polling a state the redial loop sets
	}
	if _, err := s.Work(t.Context(), sinkRequest(json.RawMessage(`{}`))); err != nil {
		t.Fatalf("Work after the redial: %v", err)
	}
	if _, _, ok := f.object("later/classic-7.json"); !ok {
		t.Error("no object at later/classic-7.json after the redial")
	}
}
